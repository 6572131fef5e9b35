// Anthropic Messages response → OpenAI chat completion (see wire.ts).
import { claudeDetail } from "../reasoning.ts";
import type { AnthropicUsage, Json, MessagesResponse, OpenAIUsage } from "./wire.ts";

const finishReasons: Record<string, string> = {
  end_turn: "stop",
  stop_sequence: "stop",
  pause_turn: "stop",
  max_tokens: "length",
  model_context_window_exceeded: "length",
  tool_use: "tool_calls",
  refusal: "content_filter",
};

export function finishReason(stopReason: string | null | undefined): string {
  return (stopReason && Object.hasOwn(finishReasons, stopReason) && finishReasons[stopReason]) || "stop";
}

/**
 * The stop sequence that ended the answer, as vLLM reports it on a chat
 * choice (`stop_reason`): chat's finish_reason "stop" does not say, and the
 * Messages API inbound (translate/messages) answers it as Anthropic's
 * `stop_sequence`. Nothing when no stop sequence matched.
 */
export function stopSequenceField(stopReason: string | null | undefined, stopSequence: string | null | undefined): { stop_reason?: string } {
  return stopReason === "stop_sequence" && typeof stopSequence === "string" ? { stop_reason: stopSequence } : {};
}

function count(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0;
}

/**
 * OpenAI usage from Anthropic's: prompt_tokens counts cached and
 * cache-written tokens too; the one-hour writes (`cache_creation`), priced
 * apart, go in `cache_write_1h_tokens`. A split larger than the total is
 * taken over the total (never billed short).
 */
export function openaiUsage(u: AnthropicUsage | undefined): OpenAIUsage | undefined {
  if (!u) return undefined;
  const cached = count(u.cache_read_input_tokens);
  const written5m = count(u.cache_creation?.ephemeral_5m_input_tokens);
  const written1h = count(u.cache_creation?.ephemeral_1h_input_tokens);
  const cacheWrite = Math.max(count(u.cache_creation_input_tokens), written5m + written1h);
  const prompt = count(u.input_tokens) + cached + cacheWrite;
  const completion = count(u.output_tokens);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached, cache_write_tokens: cacheWrite, ...(written1h > 0 ? { cache_write_1h_tokens: written1h } : {}) },
  };
}

export const nowSeconds = () => Math.floor(Date.now() / 1000);

/**
 * The thinking blocks as OpenRouter's `reasoning` (their text joined; null
 * when none) and `reasoning_details` (one entry per block, `index` its
 * place among them), so a client can send them back signed.
 */
function reasoningOf(content: MessagesResponse["content"]): { reasoning: string | null; details: Json[] } {
  let reasoning: string | null = null;
  const details: Json[] = [];
  for (const b of content) {
    if (b.type !== "thinking" && b.type !== "redacted_thinking") continue;
    if (b.type === "thinking") reasoning = (reasoning ?? "") + (b.thinking ?? "");
    details.push(claudeDetail(b, details.length));
  }
  return { reasoning, details };
}

/**
 * The OpenAI `chat.completion` for a Messages response. `model`: the name to
 * answer with (the response's own otherwise); `excludeReasoning`: the client
 * asked for thinking without seeing it. Unknown block types are skipped.
 */
export function fromMessagesResponse(msg: MessagesResponse, opts: { model?: string; excludeReasoning?: boolean } = {}): Json {
  const text = msg.content
    .filter((b) => b.type === "text")
    .map((b) => b.text ?? "")
    .join("");
  const toolCalls = msg.content
    .filter((b) => b.type === "tool_use")
    .map((b) => ({ id: b.id ?? "", type: "function", function: { name: b.name ?? "", arguments: JSON.stringify(b.input ?? {}) } }));
  const { reasoning, details } = opts.excludeReasoning ? { reasoning: null, details: [] } : reasoningOf(msg.content);
  const message: Json = { role: "assistant", content: text === "" && toolCalls.length > 0 ? null : text, refusal: null, reasoning };
  if (details.length > 0) message.reasoning_details = details;
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  const out: Json = {
    id: `chatcmpl-${msg.id}`,
    object: "chat.completion",
    created: nowSeconds(),
    model: opts.model ?? msg.model,
    choices: [{ index: 0, message, finish_reason: finishReason(msg.stop_reason), ...stopSequenceField(msg.stop_reason, msg.stop_sequence), logprobs: null }],
  };
  const usage = openaiUsage(msg.usage);
  if (usage) out.usage = usage;
  return out;
}

