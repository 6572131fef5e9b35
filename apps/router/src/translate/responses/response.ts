// Chat answers → OpenAI Responses objects: the `response` envelope (echoing
// the request's settings, as OpenAI's does), its output items (a reasoning
// item, an assistant message with output_text, function_call items) and its
// usage. Shared by the whole answer and the stream translator.
import { randomBytes } from "node:crypto";
import { isObject, type Json } from "../boundary.ts";
import { callName, type CallName } from "./namespaces.ts";
import { attachReasoning, carriesReasoning, reasoningItem } from "./reasoning.ts";

/** An item id: `msg_` messages, `fc_` function calls, `fco_` their outputs, `rs_` reasoning (the prefixes OpenAI uses). */
export const newItemId = (prefix: "msg" | "fc" | "fco" | "rs") => `${prefix}_${randomBytes(16).toString("hex")}`;
export const newResponseId = () => `resp_${randomBytes(16).toString("hex")}`;
export const nowSeconds = () => Math.floor(Date.now() / 1000);

/** What a response echoes of the request that made it. */
export interface ResponseSeed {
  id: string;
  createdAt: number;
  body: Json;
}

export type ResponseStatus = "in_progress" | "completed" | "incomplete" | "failed";

const orNull = (v: unknown) => (v === undefined ? null : v);

/** The response object in a given state; fields as OpenAI's Response type names them. */
export function responseEnvelope(seed: ResponseSeed, state: { status: ResponseStatus; output: Json[]; usage?: Json | null; finish?: string | null; error?: Json | null }): Json {
  const b = seed.body;
  const text = isObject(b.text) ? b.text : {};
  return {
    id: seed.id,
    object: "response",
    created_at: seed.createdAt,
    status: state.status,
    ...(state.status === "completed" ? { completed_at: nowSeconds() } : {}),
    background: false,
    error: state.error ?? null,
    incomplete_details: state.status === "incomplete" ? { reason: state.finish === "content_filter" ? "content_filter" : "max_output_tokens" } : null,
    instructions: orNull(b.instructions),
    max_output_tokens: orNull(b.max_output_tokens),
    metadata: b.metadata ?? {},
    model: b.model,
    output: state.output,
    parallel_tool_calls: b.parallel_tool_calls ?? true,
    previous_response_id: orNull(b.previous_response_id),
    prompt_cache_key: orNull(b.prompt_cache_key),
    reasoning: isObject(b.reasoning) ? { effort: orNull(b.reasoning.effort), summary: orNull(b.reasoning.summary) } : { effort: null, summary: null },
    safety_identifier: orNull(b.safety_identifier),
    service_tier: "default",
    store: b.store ?? true,
    temperature: b.temperature ?? 1,
    text: { format: isObject(text.format) ? text.format : { type: "text" }, verbosity: text.verbosity ?? "medium" },
    tool_choice: b.tool_choice ?? "auto",
    tools: Array.isArray(b.tools) ? b.tools : [],
    top_logprobs: b.top_logprobs ?? 0,
    top_p: b.top_p ?? 1,
    truncation: b.truncation ?? "disabled",
    usage: state.usage ?? null,
    user: orNull(b.user),
  };
}

const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/**
 * OpenAI chat usage → Responses usage. A finished response always has one,
 * as OpenAI's do: a backend that reported none reads as zeros (its ledger row
 * is billed an estimate and says so), since strict clients reject a null
 * (the Vercel AI SDK's schemas require usage on response.completed).
 */
export function responsesUsage(reported: unknown): Json {
  const u = isObject(reported) ? reported : {};
  const details = isObject(u.prompt_tokens_details) ? u.prompt_tokens_details : {};
  const out = isObject(u.completion_tokens_details) ? u.completion_tokens_details : {};
  const input = count(u.prompt_tokens);
  const output = count(u.completion_tokens);
  return {
    input_tokens: input,
    input_tokens_details: { cached_tokens: count(details.cached_tokens), cache_write_tokens: count(details.cache_write_tokens) },
    output_tokens: output,
    output_tokens_details: { reasoning_tokens: count(out.reasoning_tokens) },
    total_tokens: input + output,
  };
}

/** A finished response's status from the chat finish reason. */
export function statusOf(finish: string | null | undefined): ResponseStatus {
  return finish === "length" || finish === "content_filter" ? "incomplete" : "completed";
}

/** Chat logprobs entries → the Responses shape (token, logprob, top_logprobs). */
export function responsesLogprobs(entries: unknown): Json[] {
  if (!Array.isArray(entries)) return [];
  return entries.filter(isObject).map((e) => ({
    token: String(e.token ?? ""),
    logprob: typeof e.logprob === "number" ? e.logprob : 0,
    top_logprobs: Array.isArray(e.top_logprobs) ? e.top_logprobs.filter(isObject).map((t) => ({ token: String(t.token ?? ""), logprob: typeof t.logprob === "number" ? t.logprob : 0 })) : [],
  }));
}

export function outputText(text: string, logprobs: Json[]): Json {
  return { type: "output_text", text, annotations: [], logprobs };
}

/** The answer's reasoning, as the stored turn keeps it: its text and its reasoning_details (Claude's signed thinking). */
export interface TurnReasoning {
  text: string;
  details: Json[];
}

/**
 * The assistant turn a response's output adds to the stored conversation
 * (chat shape). Its reasoning goes with it, so that a continuation sends
 * Claude its signed thinking back, as a tool-use turn requires.
 */
export function historyTurn(text: string, calls: Array<{ call_id: string; name: string; arguments: string }>, reasoning?: TurnReasoning): Json {
  const turn: Json = { role: "assistant", content: text === "" && calls.length > 0 ? null : text };
  if (calls.length > 0) turn.tool_calls = calls.map((c) => ({ id: c.call_id, type: "function", function: { name: c.name, arguments: c.arguments } }));
  if (reasoning) attachReasoning(turn, reasoning.text, reasoning.details);
  return turn;
}

/**
 * Output items for a whole chat.completion — a reasoning item first when
 * the answer reasoned (its `encrypted_content` when `encrypted`), a call of
 * a namespaced function (`names`: namespacedNames of the request's tools)
 * with its name and namespace; `turn` is its assistant message in chat shape.
 */
export function outputFromCompletion(completion: Json, encrypted = false, names?: Map<string, CallName>): { output: Json[]; turn: Json; finish: string | null; usage: Json } {
  const choice = Array.isArray(completion.choices) && isObject(completion.choices[0]) ? completion.choices[0] : {};
  const message = isObject(choice.message) ? choice.message : {};
  const finish = typeof choice.finish_reason === "string" ? choice.finish_reason : null;
  // What the output limit cut is the last item: the items before it are whole.
  const cut = statusOf(finish) !== "completed";
  const text = typeof message.content === "string" ? message.content : "";
  const refusal = typeof message.refusal === "string" && message.refusal !== "" ? message.refusal : undefined;
  const calls = (Array.isArray(message.tool_calls) ? message.tool_calls : [])
    .filter(isObject)
    .map((c) => {
      const fn = isObject(c.function) ? c.function : {};
      return { call_id: String(c.id ?? ""), name: String(fn.name ?? ""), arguments: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {}) };
    });
  const output: Json[] = [];
  let reasoning: TurnReasoning | undefined;
  if (carriesReasoning(message)) {
    reasoning = { text: typeof message.reasoning === "string" ? message.reasoning : "", details: Array.isArray(message.reasoning_details) ? message.reasoning_details.filter(isObject) : [] };
    output.push(reasoningItem(newItemId("rs"), reasoning.text, reasoning.details, encrypted));
  }
  if (text !== "" || refusal !== undefined || calls.length === 0) {
    const content: Json[] = [];
    if (text !== "" || refusal === undefined) content.push(outputText(text, responsesLogprobs(isObject(choice.logprobs) ? choice.logprobs.content : undefined)));
    if (refusal !== undefined) content.push({ type: "refusal", refusal });
    output.push({ id: newItemId("msg"), type: "message", status: cut && calls.length === 0 ? "incomplete" : "completed", role: "assistant", content });
  }
  // Items name a namespaced function as the client did; the stored turn keeps the chat name.
  calls.forEach((c, i) => output.push({ id: newItemId("fc"), type: "function_call", status: cut && i === calls.length - 1 ? "incomplete" : "completed", ...c, ...callName(c.name, names) }));
  return { output, turn: historyTurn(text, calls, reasoning), finish, usage: responsesUsage(completion.usage) };
}
