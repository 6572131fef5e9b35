// OpenAI chat/completions requests → engine Generate, engine events → OpenAI
// JSON or SSE chunks. Shared by the chat and the legacy completions routes.
import { randomUUID } from "node:crypto";
import { FinishReason, type Generate } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { EngineClient } from "../engine/client.ts";
import { EngineError } from "../engine/client.ts";
import type { WorkerContext } from "./context.ts";
import { errorEvent, errorJson } from "./errors.ts";

export interface GenerateBody {
  model: string;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean } | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  seed?: number | null;
  stop?: string | string[] | null;
}

type Input =
  | { case: "prompt"; value: string }
  /** continueFinal: carry on the final (assistant) message instead of opening a new turn. */
  | { case: "messages"; value: { role: string; content: string }[]; continueFinal?: boolean };

export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p && typeof p === "object" && "text" in p ? String((p as { text: unknown }).text) : "")).join("");
  return "";
}

function toGenerate(body: GenerateBody, input: Input): Generate {
  const stop = body.stop == null ? [] : Array.isArray(body.stop) ? body.stop : [body.stop];
  return {
    $typeName: "switchyard.engine.v1.Generate",
    model: body.model,
    input:
      input.case === "prompt"
        ? { case: "prompt", value: input.value }
        : {
            case: "messages",
            value: {
              $typeName: "switchyard.engine.v1.ChatMessages",
              messages: input.value.map((m) => ({ $typeName: "switchyard.engine.v1.ChatMessage", role: m.role, content: m.content })),
              continueFinalMessage: input.continueFinal ?? false,
            },
          },
    maxTokens: body.max_tokens ?? body.max_completion_tokens ?? 256,
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    topK: body.top_k ?? 0,
    seed: body.seed == null ? undefined : BigInt(Math.abs(Math.trunc(body.seed))),
    stop,
  };
}

const finishName = (r: FinishReason) => (r === FinishReason.LENGTH ? "length" : "stop");

const engineErrorStatus = (err: unknown): { status: number; code: string; message: string } => {
  if (err instanceof EngineError) {
    const invalid = err.code === 1 || err.code === 3; // INVALID_REQUEST, CONTEXT_LENGTH
    return { status: invalid ? 400 : err.code === 2 ? 404 : 503, code: invalid ? "invalid_request" : err.code === 2 ? "model_not_found" : "engine_error", message: err.message };
  }
  return { status: 500, code: "internal_error", message: (err as Error)?.message ?? String(err) };
};

export async function runGenerate(
  ctx: WorkerContext,
  engine: EngineClient,
  body: GenerateBody,
  input: Input,
  opts: { chat: boolean; requestId: string; signal: AbortSignal },
): Promise<Response> {
  const engineId = `${opts.requestId}:${randomUUID().slice(0, 8)}`;
  const id = `${opts.chat ? "chatcmpl" : "cmpl"}-${randomUUID().replaceAll("-", "")}`;
  const created = Math.floor(Date.now() / 1000);
  const events = engine.call({ case: "generate", value: toGenerate(body, input) }, engineId);
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
      for await (const ev of events) {
        if (ev.kind.case === "tokens") text += ev.kind.value.text;
        else if (ev.kind.case === "done") {
          const u = ev.kind.value.usage;
          const usage = { prompt_tokens: u?.promptTokens ?? 0, completion_tokens: u?.completionTokens ?? 0, total_tokens: (u?.promptTokens ?? 0) + (u?.completionTokens ?? 0) };
          const finish = finishName(ev.kind.value.finishReason);
          return Response.json(
            opts.chat
              ? { id, object: "chat.completion", created, model: body.model, choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: finish, logprobs: null }], usage }
              : { id, object: "text_completion", created, model: body.model, choices: [{ index: 0, text, finish_reason: finish, logprobs: null }], usage },
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
  const chunk = (delta: Record<string, unknown> | string, finish: string | null) =>
    JSON.stringify(
      opts.chat
        ? { id, object: "chat.completion.chunk", created, model: body.model, choices: [{ index: 0, delta, finish_reason: finish, logprobs: null }] }
        : { id, object: "text_completion", created, model: body.model, choices: [{ index: 0, text: delta, finish_reason: finish, logprobs: null }] },
    );
  let sentRole = false;
  const stream = new ReadableStream<Uint8Array>({
    async start(controller) {
      let current = first;
      try {
        while (!current.done) {
          const ev = current.value;
          if (ev.kind.case === "tokens") {
            if (ev.kind.value.text) {
              const delta = opts.chat ? (sentRole ? { content: ev.kind.value.text } : { role: "assistant", content: ev.kind.value.text }) : ev.kind.value.text;
              sentRole = true;
              controller.enqueue(sse(chunk(delta, null)));
            }
          } else if (ev.kind.case === "done") {
            if (ev.kind.value.finishReason === FinishReason.CANCELLED) break;
            controller.enqueue(sse(chunk(opts.chat ? (sentRole ? {} : { role: "assistant", content: "" }) : "", finishName(ev.kind.value.finishReason))));
            if (includeUsage) {
              const u = ev.kind.value.usage;
              const usage = { prompt_tokens: u?.promptTokens ?? 0, completion_tokens: u?.completionTokens ?? 0, total_tokens: (u?.promptTokens ?? 0) + (u?.completionTokens ?? 0) };
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
