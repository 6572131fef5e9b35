// The request fields the worker knows, per route: anything else would be
// ignored, so it is refused with a 400 naming it (the router's field table,
// apps/router/src/backends/fields.ts, says so for workers, and
// test/e2e/sampling.test.ts holds this list to that table).
const generation = [
  "model", "stream", "stream_options", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k", "n", "seed", "stop",
  "logprobs", "top_logprobs", "logit_bias", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_p",
];
/** Fields that do not change the answer. */
const inert = ["user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"];
/** What the router adds for its workers (prefix names, cache scope, stream resume). */
const router = ["switchyard_prefix", "switchyard_cache_scope", "continue_final_message", "add_generation_prompt"];
/** OpenRouter's reasoning ask ("reason if the model does"): the engine's models do not reason, so the answer has none (the router's field table says so). */
const reasoning = ["reasoning"];
/** Structured outputs and tools: their own rules. */
const structured = ["response_format", "tools", "tool_choice", "parallel_tool_calls"];

const known = {
  chat: new Set([...generation, ...inert, ...router, ...structured, ...reasoning, "messages", "modalities", "audio"]),
  completions: new Set([...generation, ...inert, ...router, "prompt", "echo", "best_of", "suffix"]),
  embeddings: new Set(["model", "input", "encoding_format", "dimensions", ...inert, ...router]),
  /** A prompt counted, not run: what makes it (messages, tools), and the structured-output fields a chat request carries beside them. */
  tokenize: new Set(["model", "messages", ...structured]),
};

/** The first field of `body` this route does not know, if any. */
export function unknownField(body: Record<string, unknown>, route: keyof typeof known): string | undefined {
  return Object.keys(body).find((k) => !known[route].has(k));
}
