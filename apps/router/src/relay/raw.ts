// Relaying raw bytes (hidden states): the upstream body goes through as it
// comes, under the idle deadline; a failure mid-body cuts the connection.
// The request ends with its last byte, not its headers: its duration and its
// ledger row (status, end time) are taken then — a body of megabytes can
// take longer than everything before it, and can still fail.
import type { Backend } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { outcomeOf, toFailure, type Attempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";
import type { Usage } from "../backends/usage.ts";
import type { SettleOutcome } from "../billing/guard.ts";

/** Bytes through as they come (hidden states); a failure mid-body cuts the connection. */
export function relayRaw(backend: Backend, raw: { headers: Record<string, string>; body: AsyncIterable<Uint8Array>; usage?: Usage }, a: Attempt, ctx: RelayContext): Response {
  const it = raw.body[Symbol.asyncIterator]();
  let ended = false;
  const end = (status: SettleOutcome["status"]) => {
    if (ended) return;
    ended = true;
    ctx.metrics.duration.observe({ route: ctx.route }, (performance.now() - ctx.startedAt) / 1000);
    // The prompt tokens the worker said it computed, counted as the ledger row counts them: whatever the body's end.
    if (raw.usage) ctx.metrics.tokens.inc({ kind: "prompt" }, raw.usage.prompt);
    ctx.settle?.({ backend, status, ...(raw.usage ? { usage: raw.usage } : {}) });
  };
  a.timer.arm("idle", ctx.deadlines.idleMs);
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await it.next();
        if (next.done) {
          a.cleanup();
          a.report("ok");
          end("ok");
          controller.close();
          return;
        }
        a.timer.refresh();
        controller.enqueue(next.value);
      } catch (err) {
        a.cleanup();
        const failure = toFailure(err, a);
        a.report(outcomeOf(failure), { failure });
        ctx.log.warn("raw relay failed", { backend: backend.id, error: failure.message });
        end(failure.kind === "aborted" ? "client_cancelled" : failure.kind === "timeout" ? "timeout" : "error");
        controller.error(err);
      }
    },
    cancel() {
      a.controller.abort(new UpstreamFailure("aborted", "client went away", false));
      a.cleanup();
      a.report("neutral");
      end("client_cancelled");
    },
  });
  return new Response(stream, { status: 200, headers: { ...raw.headers, "x-request-id": ctx.requestId, "x-switchyard-backend": backend.id, ...ctx.headers } });
}
