// The one boundary between the worker's JSON (OpenAI's shapes) and the
// engine's protobuf: request bodies become engine requests here, and engine
// events, tensors and errors become JSON here. Routes and the stream pump
// (generate.ts) never build a proto message or read one's fields themselves,
// so a change to engine.proto lands in this file.
import { DType, FinishReason, Pooling, type ChatMessages, type Done, type Embeddings, type Generate, type HiddenStates, type TokenLogprob, type TokenLogprobs } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { EngineError } from "../engine/client.ts";

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
  /** chat: a boolean; legacy completions: how many alternatives (0–5). */
  logprobs?: boolean | number | null;
  /** chat only: alternatives per token (0–20), needs logprobs: true. */
  top_logprobs?: number | null;
}

/** What the request asks for in logprobs (undefined: none). */
export type LogprobsAsk = { top: number } | undefined;

const utf8 = new TextDecoder();
const tokenText = (t: TokenLogprob | undefined) => utf8.decode(t?.token ?? new Uint8Array());

/** Engine logprobs → the chat shape (`choices[].logprobs.content`). */
export function chatLogprobs(entries: TokenLogprobs[]) {
  const one = (t: TokenLogprob | undefined) => ({ token: tokenText(t), logprob: t?.logprob ?? 0, bytes: [...(t?.token ?? [])] });
  return { content: entries.map((e) => ({ ...one(e.chosen), top_logprobs: e.top.map(one) })), refusal: null };
}

/** Engine logprobs → the legacy completions shape; `offset` is where the first token's text starts. */
export function completionLogprobs(entries: TokenLogprobs[], offset: number) {
  const tokens = entries.map((e) => tokenText(e.chosen));
  const text_offset: number[] = [];
  for (const t of tokens) {
    text_offset.push(offset);
    offset += t.length;
  }
  return {
    tokens,
    token_logprobs: entries.map((e) => e.chosen?.logprob ?? 0),
    top_logprobs: entries.map((e) => Object.fromEntries(e.top.map((t) => [tokenText(t), t.logprob]))),
    text_offset,
  };
}

export type Input =
  | { case: "prompt"; value: string }
  /** continueFinal: carry on the final (assistant) message instead of opening a new turn. */
  | { case: "messages"; value: { role: string; content: string }[]; continueFinal?: boolean };

export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p && typeof p === "object" && "text" in p ? String((p as { text: unknown }).text) : "")).join("");
  return "";
}

export function toGenerate(body: GenerateBody, input: Input, logprobs: LogprobsAsk, cacheSalt: string): Generate {
  const stop = body.stop == null ? [] : Array.isArray(body.stop) ? body.stop : [body.stop];
  return {
    $typeName: "switchyard.engine.v1.Generate",
    model: body.model,
    input:
      input.case === "prompt"
        ? { case: "prompt", value: input.value }
        : { case: "messages", value: chatMessages(input.value, input.continueFinal ?? false) },
    maxTokens: body.max_tokens ?? body.max_completion_tokens ?? 256,
    temperature: body.temperature ?? 1,
    topP: body.top_p ?? 1,
    topK: body.top_k ?? 0,
    seed: body.seed == null ? undefined : BigInt(Math.abs(Math.trunc(body.seed))),
    stop,
    logprobs: logprobs !== undefined,
    topLogprobs: logprobs?.top ?? 0,
    cacheSalt,
  };
}

/** OpenAI's usage block; prompt tokens served from the engine's prefix cache count as cached. */
export function usageOf(done: Done) {
  const prompt = done.usage?.promptTokens ?? 0;
  const completion = done.usage?.completionTokens ?? 0;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: done.cachedPromptTokens } };
}

export const finishName = (r: FinishReason) => (r === FinishReason.LENGTH ? "length" : "stop");

export const engineErrorStatus = (err: unknown): { status: number; code: string; message: string } => {
  if (err instanceof EngineError) {
    const invalid = err.code === 1 || err.code === 3; // INVALID_REQUEST, CONTEXT_LENGTH
    return { status: invalid ? 400 : err.code === 2 ? 404 : 503, code: invalid ? "invalid_request" : err.code === 2 ? "model_not_found" : "engine_error", message: err.message };
  }
  return { status: 500, code: "internal_error", message: (err as Error)?.message ?? String(err) };
};


/** OpenAI chat messages → the engine's (content parts flattened to their text). */
export function chatMessages(messages: { role?: unknown; content?: unknown }[], continueFinal = false): ChatMessages {
  return {
    $typeName: "switchyard.engine.v1.ChatMessages",
    messages: messages.map((m) => ({ $typeName: "switchyard.engine.v1.ChatMessage", role: String(m.role ?? "user"), content: contentText(m.content) })),
    continueFinalMessage: continueFinal,
  };
}

/** Engine embeddings → OpenAI's `data` list: floats, or base64 of little-endian f32 (`encoding_format: "base64"`). */
export function embeddingsData(result: Embeddings, base64: boolean) {
  return result.vectors.map((t, index) => {
    const bytes = t.data;
    const f32 = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    return { object: "embedding", index, embedding: base64 ? Buffer.from(f32.buffer).toString("base64") : Array.from(f32) };
  });
}

// Maps, not object literals: a body's `pooling: "constructor"` must not find
// Object.prototype's.
const POOLINGS = new Map<string, Pooling>([
  ["none", Pooling.NONE],
  ["mean", Pooling.MEAN],
  ["last", Pooling.LAST],
]);
const DTYPES = new Map<string, DType>([
  ["f32", DType.DTYPE_F32],
  ["f16", DType.DTYPE_F16],
]);

/** A hidden-states body → the engine request, or the 400 to answer (field and message). */
export function toHiddenStates(body: Record<string, unknown>): HiddenStates | { param: string; message: string } {
  const pooling = POOLINGS.get(String(body.pooling ?? "none"));
  if (pooling === undefined) return { param: "pooling", message: "pooling: one of none, mean, last" };
  const dtype = DTYPES.get(String(body.dtype ?? "f32"));
  if (dtype === undefined) return { param: "dtype", message: "dtype: one of f32, f16" };
  const layers = body.layers === undefined || body.layers === "all" ? [] : body.layers;
  if (!Array.isArray(layers) || !layers.every((l) => Number.isInteger(l) && l >= 0)) return { param: "layers", message: "layers: 'all' or an array of layer indices" };
  let input: HiddenStates["input"];
  if (typeof body.input === "string") input = { case: "prompt", value: body.input };
  else if (Array.isArray(body.messages) && body.messages.length > 0) input = { case: "messages", value: chatMessages(body.messages as { role?: unknown; content?: unknown }[]) };
  else return { param: "input", message: "input (a string) or messages is required" };
  return { $typeName: "switchyard.engine.v1.HiddenStates", model: String(body.model), input, layers: layers as number[], pooling, dtype, passOn: false };
}
