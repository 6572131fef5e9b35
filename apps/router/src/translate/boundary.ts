// The one boundary between a foreign wire format (OpenAI's Responses API,
// Anthropic's Messages API) and the router's one inference path. A route
// translates its request into an OpenAI chat body; the pipeline runs it like
// any chat request (admission, chain, leases, budget hold, failover, ledger);
// the chat answer — one JSON body, or an SSE stream of chunks — is
// translated back here, event by event, by the route's translator.
import { ApiError, errorCodes, type ErrorCode } from "../errors.ts";
import type { Context } from "hono";
import type { Backend } from "../backends/types.ts";
import type { AppDeps, AppEnv } from "../deps.ts";
import { handleInference, type InferenceBody } from "../pipeline/inference.ts";
import { parseSse, SSE_DONE } from "../relay/sse.ts";

export type Json = Record<string, unknown>;

export const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

/** A failure the stream reports after its first byte, in the router's terms. */
export interface StreamFailure {
  message: string;
  code: string;
}

/** A stream failure's HTTP status, for a wire format's error (its router error code's; any other code is a 500). */
export function failureStatus(code: string): number {
  return Object.hasOwn(errorCodes, code) ? errorCodes[code as ErrorCode].status : 500;
}

/** Turns one streamed chat answer into the client's SSE frames (each a whole `event:`/`data:` frame). */
export interface StreamTranslator {
  /** Frames for one chat.completion.chunk (often none). */
  chunk(chunk: Json): string[];
  /** The chat stream ended with [DONE]: the closing frames. */
  done(): Promise<string[]>;
  /** It failed after the first byte: the one terminal error frame of this wire format. */
  fail(failure: StreamFailure): string[];
}

export interface ChatTranslation {
  /** The client's JSON body for a whole chat.completion. */
  whole(completion: Json): Promise<Json>;
  /** A translator for one streamed answer. */
  stream(): StreamTranslator;
}

/**
 * Whether a streamed tool_calls delta continues the call open at its chat
 * index. Some OpenAI-compatible servers (Gemini, vLLM and llama.cpp models
 * behind OpenRouter) stream parallel calls all at index 0, each opening with
 * a new id: an id other than the open call's starts a new call. A delta with
 * no id, or the open call's own again, continues it; so does a first id on a
 * call that opened without one, since nothing else could tell two calls apart.
 */
export function continuesCall(open: { chatIndex: number; callId: string } | undefined, chatIndex: number, tc: Json): boolean {
  if (open?.chatIndex !== chatIndex) return false;
  return typeof tc.id !== "string" || tc.id === "" || open.callId === "" || tc.id === open.callId;
}

/** One SSE frame with an event name, as OpenAI's typed streams and Anthropic's carry them. */
export function sseFrame(event: string, data: Json): string {
  return `event: ${event}\ndata: ${JSON.stringify(data)}\n\n`;
}

const encoder = new TextEncoder();

/**
 * Runs `chat` through the pipeline as a chat completion and answers in the
 * route's wire format. Errors before the first byte are thrown as usual
 * (ApiError), for the route's error shape; after it, `fail` ends the stream.
 */
export async function runTranslated(
  c: Context<AppEnv>,
  deps: AppDeps,
  chat: InferenceBody,
  translation: ChatTranslation,
  opts: { narrow?: (backends: Backend[]) => Backend[]; headers?: Record<string, string>; params?: Readonly<Record<string, string>> } = {},
): Promise<Response> {
  let inner: Response;
  try {
    inner = await handleInference(c, deps, "/v1/chat/completions", { body: chat, detached: true, ...(opts.narrow ? { narrow: opts.narrow } : {}) });
  } catch (err) {
    throw clientParam(err, opts.params);
  }
  const headers = new Headers(inner.headers);
  headers.delete("content-length");
  for (const [k, v] of Object.entries(opts.headers ?? {})) headers.set(k, v);
  if (!(headers.get("content-type") ?? "").startsWith("text/event-stream")) {
    const completion = (await inner.json()) as Json;
    headers.set("content-type", "application/json");
    return new Response(JSON.stringify(await translation.whole(completion)), { status: inner.status, headers });
  }
  return new Response(translateStream(inner.body!, translation.stream(), deps.config.router.maxUpstreamEventBytes), { status: inner.status, headers });
}

/**
 * An error naming a chat field the translation made (`reasoning_effort`)
 * names the field the client sent instead (`reasoning.effort`).
 */
export function clientParam(err: unknown, params: Readonly<Record<string, string>> | undefined): unknown {
  if (!(err instanceof ApiError) || err.param === null || !params || !Object.hasOwn(params, err.param)) return err;
  const sent = params[err.param]!;
  const message = err.message.startsWith(`${err.param}:`) ? `${sent}:${err.message.slice(err.param.length + 1)}` : err.message;
  return new ApiError(err.code, message, sent, err.headers);
}

/**
 * The relay's chat SSE (checked chunks, then `[DONE]`, or one `{"error":…}`
 * event) → the client's frames, pulled as the client reads (backpressure),
 * and cancelled through to the relay when the client goes away (which
 * aborts the upstream).
 */
function translateStream(body: ReadableStream<Uint8Array>, t: StreamTranslator, maxEventBytes: number): ReadableStream<Uint8Array> {
  const reader = body.getReader();
  const chunks = (async function* () {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return;
      yield value;
    }
  })();
  const payloads = parseSse(chunks, { maxEventBytes, label: "relay" });
  let ended = false;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      const emit = (frames: string[]) => {
        for (const f of frames) controller.enqueue(encoder.encode(f));
        return frames.length;
      };
      const end = (frames: string[]) => {
        emit(frames);
        ended = true;
        controller.close();
      };
      try {
        for (;;) {
          const next = await payloads.next();
          if (next.done) return end(t.fail({ code: "bad_upstream", message: "the stream ended before it was complete" }));
          if (next.value === SSE_DONE) {
            emit(await t.done());
            // Read the relay to its end rather than cancel it: cancelling would
            // count as the client leaving, and the ledger row would say so.
            while (!(await payloads.next()).done);
            return end([]);
          }
          const obj = JSON.parse(next.value) as Json;
          if (isObject(obj.error)) {
            const e = obj.error;
            return end(t.fail({ code: typeof e.code === "string" ? e.code : "bad_upstream", message: typeof e.message === "string" ? e.message : "stream failed" }));
          }
          if (emit(t.chunk(obj)) > 0) return;
        }
      } catch {
        // The relay checked every event it sent, so this is the router's own failure: say no more than that.
        if (ended) return;
        end(t.fail({ code: "internal_error", message: "internal error" }));
      }
    },
    async cancel(reason) {
      ended = true;
      await reader.cancel(reason).catch(() => {});
    },
  });
}
