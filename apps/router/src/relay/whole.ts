// Relaying one whole JSON body (non-streamed answers): read within the
// attempt's deadlines, checked to be JSON, its usage counted, passed on as
// the upstream's bytes.
import { isUtf8 } from "node:buffer";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import type { Backend, UpstreamResponse } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { usageFrom } from "../backends/usage.ts";
import type { Attempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";

/** The answer of an attempt whose upstream sent 2xx headers; throws UpstreamFailure (the caller may fail over) when the body is not JSON. */
export async function relayWhole(backend: Backend, up: UpstreamResponse, a: Attempt, ctx: RelayContext): Promise<Response> {
  const { metrics } = ctx;
  // The bytes, when the upstream gives them: they go to the client as they
  // came, not decoded and encoded again (and measured for content-length a
  // second time) on every answer.
  const bytes = up.bytes ? await up.bytes() : undefined;
  const text = bytes ? bytes.toString("utf8") : await up.text();
  a.cleanup();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new UpstreamFailure("protocol", `${backend.id} answered with invalid JSON`, true);
  }
  metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
  a.report("ok");
  const usage = usageFrom(body, text);
  if (usage) {
    metrics.tokens.inc({ kind: "prompt" }, usage.prompt);
    metrics.tokens.inc({ kind: "completion" }, usage.completion);
  }
  ctx.settle?.({ backend, status: "ok", usage });
  // The upstream's bytes as they came: parsed only to count tokens.
  const head: Record<string, string> = { "content-type": "application/json", "x-request-id": ctx.requestId, "x-switchyard-backend": backend.id };
  if (ctx.headers) Object.assign(head, ctx.headers);
  const out = ctx.outgoing;
  if (out && !out.headersSent) {
    // On Node, straight to the socket in one write, as the stream relay
    // does: no Response object for the adapter to take apart again.
    // Bytes that are not UTF-8 were read with replacement characters: the text that parsed is what goes out then.
    const body = bytes && isUtf8(bytes) ? bytes : text;
    head["content-length"] = String(typeof body === "string" ? Buffer.byteLength(body) : body.length);
    out.writeHead(200, head);
    out.end(body);
    return RESPONSE_ALREADY_SENT;
  }
  return new Response(text, { headers: head });
}
