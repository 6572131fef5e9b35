// Runs one generation for the chat and the legacy completions routes: the
// whole answer as JSON, or the SSE stream with its one error event after the
// first byte. The shapes on each side are converters.ts's.
import { randomUUID } from "node:crypto";
import { FinishReason, type TokenLogprobs } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { GenerateEngine } from "../shard/pipeline.ts";
import type { WorkerContext } from "./context.ts";
import { errorEvent, errorJson } from "./errors.ts";
import { engineRequestId } from "./request.ts";
import { chatLogprobs, completionLogprobs, engineErrorStatus, finishName, toGenerate, usageOf, type GenerateBody, type Input, type LogprobsAsk } from "./converters.ts";

export type { GenerateBody } from "./converters.ts";
export { contentText } from "./converters.ts";

/** OpenAI's rules for the two shapes of the logprobs fields; a string is the 400 to answer. */
export function logprobsAsk(body: GenerateBody, chat: boolean): LogprobsAsk | string {
  if (chat) {
    if (body.logprobs != null && typeof body.logprobs !== "boolean") return "logprobs: must be a boolean";
    const top = body.top_logprobs ?? 0;
    if (!Number.isInteger(top) || top < 0 || top > 20) return "top_logprobs: an integer from 0 to 20";
    if (top > 0 && body.logprobs !== true) return "top_logprobs: needs logprobs: true";
    return body.logprobs === true ? { top } : undefined;
  }
  if (body.logprobs == null) return undefined;
  if (typeof body.logprobs !== "number" || !Number.isInteger(body.logprobs) || body.logprobs < 0 || body.logprobs > 5) return "logprobs: an integer from 0 to 5";
  return { top: body.logprobs };
}

/** The body field the router puts the tenant's prefix-cache scope in (apps/router routing/scorer.ts CACHE_SCOPE_FIELD). */
export const CACHE_SCOPE_FIELD = "switchyard_cache_scope";
const CACHE_SCOPE = /^[A-Za-z0-9_-]{1,128}$/;

/**
 * The engine's prefix-cache salt for this request: the scope the router sent,
 * or "" (entries without a salt only match requests without one). The agent
 * never derives a scope itself; a malformed one is treated as none.
 */
export function routerCacheScope(body: Record<string, unknown>): string {
  const scope = body[CACHE_SCOPE_FIELD];
  return typeof scope === "string" && CACHE_SCOPE.test(scope) ? scope : "";
}

export async function runGenerate(
  ctx: WorkerContext,
  engine: GenerateEngine,
  body: GenerateBody,
  input: Input,
  /**
   * prefix: the name of the prompt's long prefix, advertised once the engine has computed it;
   * cacheScope: the engine prefix-cache salt (the tenant's scope from the router, "" for none).
   */
  opts: { chat: boolean; requestId: string; spanId?: string | undefined; signal: AbortSignal; prefix?: string; cacheScope?: string },
): Promise<Response> {
  const ask = logprobsAsk(body, opts.chat);
  if (typeof ask === "string") return errorJson(400, ask, "invalid_request", ask.split(":")[0]);
  // The trace's span id when the router sent one, so an engine log line leads to the span.
  const engineId = engineRequestId(opts.requestId, opts.spanId, () => randomUUID().slice(0, 8));
  const id = `${opts.chat ? "chatcmpl" : "cmpl"}-${randomUUID().replaceAll("-", "")}`;
  const created = Math.floor(Date.now() / 1000);
  const events = engine.call({ case: "generate", value: toGenerate(body, input, ask, opts.cacheScope ?? "") }, engineId);
  const formatLogprobs = (entries: TokenLogprobs[], offset: number) =>
    ask === undefined ? null : opts.chat ? chatLogprobs(entries) : completionLogprobs(entries, offset);
  const onAbort = () => engine.cancel(engineId);
  opts.signal.addEventListener("abort", onAbort, { once: true });
  const end = ctx.begin();
  const release = () => {
    end();
    opts.signal.removeEventListener("abort", onAbort);
  };

  if (!body.stream) {
    try {
      let text = "";
      const entries: TokenLogprobs[] = [];
      for await (const ev of events) {
        if (ev.kind.case === "tokens") {
          text += ev.kind.value.text;
          entries.push(...ev.kind.value.logprobs);
        } else if (ev.kind.case === "done") {
          if (opts.prefix) ctx.notePrefix(opts.prefix);
          const usage = usageOf(ev.kind.value);
          const finish = finishName(ev.kind.value.finishReason);
          return Response.json(
            opts.chat
              ? { id, object: "chat.completion", created, model: body.model, choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: finish, logprobs: formatLogprobs(entries, 0) }], usage }
              : { id, object: "text_completion", created, model: body.model, choices: [{ index: 0, text, finish_reason: finish, logprobs: formatLogprobs(entries, 0) }], usage },
          );
        }
      }
      return errorJson(502, "engine ended without a result", "engine_error");
    } catch (err) {
      const e = engineErrorStatus(err);
      return errorJson(e.status, e.message, e.code);
    } finally {
      release();
    }
  }

  // Streaming: wait for the first event before committing to a 200, so an
  // engine that refuses the request answers with a proper status.
  let first: IteratorResult<Awaited<ReturnType<typeof events.next>>["value"]>;
  try {
    first = await events.next();
  } catch (err) {
    release();
    const e = engineErrorStatus(err);
    return errorJson(e.status, e.message, e.code);
  }
  const includeUsage = body.stream_options?.include_usage === true;
  const enc = new TextEncoder();
  const sse = (payload: string) => enc.encode(`data: ${payload}\n\n`);
  // Logprobs ride on the next chunk that goes out: a token's text can be
  // held back (an unfinished UTF-8 character, a possible stop sequence).
  let pending: TokenLogprobs[] = [];
  let sentChars = 0;
  const chunk = (delta: Record<string, unknown> | string, finish: string | null) => {
    const logprobs = formatLogprobs(pending, sentChars);
    pending = [];
    sentChars += typeof delta === "string" ? delta.length : typeof delta.content === "string" ? delta.content.length : 0;
    return JSON.stringify(
      opts.chat
        ? { id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index: 0, delta, finish_reason: finish, logprobs }] }
        : { id, object: "text_completion", created, model: body.model, choices: [{ index: 0, text: delta, finish_reason: finish, logprobs }] },
    );
  };
  let sentRole = false;
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      let current = first;
      try {
        while (!current.done) {
          const ev = current.value;
          if (ev.kind.case === "tokens") {
            pending.push(...ev.kind.value.logprobs);
            if (ev.kind.value.text) {
              const delta = opts.chat ? (sentRole ? { content: ev.kind.value.text } : { role: "assistant", content: ev.kind.value.text }) : ev.kind.value.text;
              sentRole = true;
              controller.enqueue(sse(chunk(delta, null)));
            }
          } else if (ev.kind.case === "done") {
            if (ev.kind.value.finishReason === FinishReason.CANCELLED) break;
            if (opts.prefix) ctx.notePrefix(opts.prefix);
            controller.enqueue(sse(chunk(opts.chat ? (sentRole ? {} : { role: "assistant", content: "" }) : "", finishName(ev.kind.value.finishReason))));
            if (includeUsage) {
              const usage = usageOf(ev.kind.value);
              controller.enqueue(sse(JSON.stringify({ id, object: opts.chat ? "chat.completion.chunk" : "text_completion", created, model: body.model, choices: [], usage })));
            }
            controller.enqueue(sse("[DONE]"));
            break;
          }
          current = await events.next();
        }
      } catch (err) {
        // After the first byte: exactly one error event, then close.
        const e = engineErrorStatus(err);
        ctx.log("stream failed", { request_id: opts.requestId, error: e.message });
        try {
          controller.enqueue(sse(errorEvent(e.message, e.code)));
        } catch {
          // client already gone
        }
      } finally {
        release();
        try {
          controller.close();
        } catch {
          // already closed by cancel
        }
      }
    },
    cancel() {
      engine.cancel(engineId);
      void events.return(undefined);
      release();
    },
  });
  return new Response(stream, { headers: { "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache" } });
}
