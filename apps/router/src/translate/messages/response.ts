// Chat answers → Anthropic Messages answers (inbound): the inverse of
// backends/anthropic/response.ts, with its wire shapes. Also the error body
// Anthropic's clients expect, and its error types by status.
import { randomBytes } from "node:crypto";
import type { AnthropicUsage, MessagesResponse } from "../../backends/anthropic/wire.ts";
import type { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";
import { thinkingBlocks, type ThinkingDisplay } from "./thinking.ts";

export const newMessageId = () => `msg_${randomBytes(12).toString("hex")}`;

/** Chat finish_reason → Anthropic stop_reason (backends/anthropic/response.ts maps the other way). */
const stopReasons: Record<string, string> = {
  stop: "end_turn",
  length: "max_tokens",
  tool_calls: "tool_use",
  function_call: "tool_use",
  content_filter: "refusal",
};

export function stopReason(finish: unknown): string {
  return (typeof finish === "string" && Object.hasOwn(stopReasons, finish) && stopReasons[finish]) || "end_turn";
}

/**
 * Anthropic's stop_reason and stop_sequence for a chat choice. Chat's "stop"
 * does not say whether a stop sequence ended it; a backend that knows says
 * which in vLLM's `stop_reason` on the choice (backends/anthropic does), and
 * only a string naming one the client sent counts (vLLM also puts a stop
 * token's id there).
 */
export function stopOf(finish: unknown, matched: unknown, sent: readonly string[]): { stop_reason: string; stop_sequence: string | null } {
  if (finish === "stop" && typeof matched === "string" && sent.includes(matched)) return { stop_reason: "stop_sequence", stop_sequence: matched };
  return { stop_reason: stopReason(finish), stop_sequence: null };
}

const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/**
 * OpenAI usage → Anthropic's: input_tokens excludes what was read from or
 * written to the cache; the writes split by lifetime as Anthropic reports
 * them (`cache_creation`: 1-hour writes are priced apart, and a client
 * reconciling its bill needs the split).
 */
export function anthropicUsage(u: unknown): Required<Pick<AnthropicUsage, "input_tokens" | "output_tokens" | "cache_read_input_tokens" | "cache_creation_input_tokens">> & {
  cache_creation: { ephemeral_5m_input_tokens: number; ephemeral_1h_input_tokens: number };
} {
  const usage = isObject(u) ? u : {};
  const details = isObject(usage.prompt_tokens_details) ? usage.prompt_tokens_details : {};
  const cached = count(details.cached_tokens);
  const written = count(details.cache_write_tokens);
  const written1h = Math.min(written, count(details.cache_write_1h_tokens));
  return {
    input_tokens: Math.max(0, count(usage.prompt_tokens) - cached - written),
    output_tokens: count(usage.completion_tokens),
    cache_read_input_tokens: cached,
    cache_creation_input_tokens: written,
    cache_creation: { ephemeral_5m_input_tokens: written - written1h, ephemeral_1h_input_tokens: written1h },
  };
}

/** A tool call's arguments as Anthropic's `input` object (a model's malformed JSON is kept under `_raw`, never dropped). */
export function toolInput(args: unknown): Json {
  if (isObject(args)) return args;
  if (typeof args !== "string" || args.trim() === "") return {};
  try {
    const v = JSON.parse(args) as unknown;
    return isObject(v) ? v : { _raw: args };
  } catch {
    return { _raw: args };
  }
}

/** What of the Messages request shapes its answer. */
export interface AnswerShape {
  /** The request's stop_sequences. */
  stops?: readonly string[];
  /** Whether and how thinking blocks are shown (toChatRequest's reading of `thinking`). */
  thinking?: ThinkingDisplay;
}

/** The `message` object for a whole chat.completion, named as the client named the model: thinking blocks first, then text, then tool_use. */
export function messageFromCompletion(completion: Json, model: string, shape: AnswerShape = {}): MessagesResponse & Json {
  const choice = Array.isArray(completion.choices) && isObject(completion.choices[0]) ? completion.choices[0] : {};
  const message = isObject(choice.message) ? choice.message : {};
  const content = thinkingBlocks(message, shape.thinking ?? "none") as MessagesResponse["content"];
  const text = typeof message.content === "string" ? message.content : "";
  if (text !== "") content.push({ type: "text", text });
  for (const c of Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : []) {
    const fn = isObject(c.function) ? c.function : {};
    content.push({ type: "tool_use", id: String(c.id ?? ""), name: String(fn.name ?? ""), input: toolInput(fn.arguments) });
  }
  return {
    id: newMessageId(),
    type: "message",
    role: "assistant",
    model,
    content,
    ...stopOf(choice.finish_reason, choice.stop_reason, shape.stops ?? []),
    usage: { ...anthropicUsage(completion.usage), service_tier: "standard" } as AnthropicUsage,
  };
}

/** Anthropic's error type for a status (its SDK picks the exception class by status, and shows the type). */
export function anthropicErrorType(status: number): string {
  if (status === 400 || status === 405 || status === 415 || status === 422 || status === 499) return "invalid_request_error";
  if (status === 401) return "authentication_error";
  if (status === 402) return "billing_error";
  if (status === 403) return "permission_error";
  if (status === 404) return "not_found_error";
  if (status === 413) return "request_too_large";
  if (status === 429) return "rate_limit_error";
  if (status === 503) return "overloaded_error";
  if (status === 504) return "timeout_error";
  return "api_error";
}

/**
 * The HTTP status an Anthropic client gets for a router status: Anthropic
 * answers overloaded_error with 529, not 503, and clients written to its
 * docs back off on 529 (its SDKs retry both, and honour Retry-After).
 */
export function anthropicStatus(status: number): number {
  return status === 503 ? 529 : status;
}

/** `{"type":"error","error":{type,message},"request_id"}`, Anthropic's one error shape. */
export function anthropicErrorBody(status: number, message: string, requestId: string | undefined): Json {
  return { type: "error", error: { type: anthropicErrorType(status), message }, request_id: requestId ?? null };
}

/** The ApiError's status, and its message with the field it names (Anthropic's shape has no param), unless it starts with it already. */
export function describeError(err: Pick<ApiError, "status" | "message" | "param">): { status: number; message: string } {
  const named = err.param && !err.message.startsWith(err.param) ? `${err.param}: ${err.message}` : err.message;
  return { status: err.status, message: named };
}
