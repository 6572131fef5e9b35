// What OpenRouter does with each request field (backends/fields.ts has the
// catalogue): it speaks OpenAI's protocol and passes its sampling fields to
// the provider, so most go through as they are. Refused: what its API does
// not offer (one choice per request; no echo, best_of or suffix) and token-id
// inputs, whose tokenizer depends on the model behind it; and OpenRouter's
// own fields that let the client choose what it is billed for — fallback
// `models`, `route`, `plugins` (web search is paid per result),
// `web_search_options`, and `provider` preferences that pick a dearer
// provider: the budget's hold is priced for the model asked for, so a
// request could spend past the tenant's budget. `provider` preferences that
// only narrow or sort by price go through, as do other fields outside the
// catalogue (transforms, usage).
import type { FieldSupport } from "../fields.ts";

export const openrouterFields: FieldSupport = {
  temperature: "honoured",
  top_p: "honoured",
  max_tokens: "honoured",
  stop: "honoured",
  stream: "honoured",
  seed: "honoured",
  n: "refused",
  logprobs: "honoured",
  logit_bias: "honoured",
  frequency_penalty: "honoured",
  presence_penalty: "honoured",
  top_k: "honoured",
  min_p: "honoured",
  repetition_penalty: "honoured",
  response_format: "honoured",
  tools: "honoured",
  tool_choice: "honoured",
  parallel_tool_calls: "honoured",
  image_parts: "honoured",
  audio_parts: "honoured",
  modalities: "honoured",
  reasoning_effort: "honoured",
  reasoning: "honoured",
  verbosity: "honoured",
  echo: "refused",
  best_of: "refused",
  suffix: "refused",
  prompt_tokens: "refused",
  prompt_list: "refused",
  dimensions: "honoured",
  encoding_format: "honoured",
  input_tokens: "refused",
  provider_preferences: "honoured",
  other_model: "refused",
  unknown: "honoured",
};
