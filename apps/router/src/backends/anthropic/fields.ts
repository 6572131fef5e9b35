// What the Anthropic translation (request.ts) does with each request field
// (backends/fields.ts has the catalogue). Messages has no penalties, bias,
// seed, choices or logprobs; it serves chat only.
import type { FieldSupport } from "../fields.ts";

export const anthropicFields: FieldSupport = {
  // OpenAI's range is 0..2, Anthropic's 0..1: clamped.
  temperature: "translated",
  top_p: "honoured",
  max_tokens: "translated",
  stop: "translated",
  stream: "translated",
  seed: "refused",
  n: "refused",
  logprobs: "refused",
  logit_bias: "refused",
  frequency_penalty: "refused",
  presence_penalty: "refused",
  top_k: "honoured",
  min_p: "refused",
  repetition_penalty: "refused",
  // Messages has tools but no output grammar: json_object / json_schema are refused.
  response_format: "refused",
  tools: "translated",
  tool_choice: "translated",
  parallel_tool_calls: "translated",
  image_parts: "translated",
  audio_parts: "refused",
  modalities: "refused",
  // Both become `thinking`: a token budget (reasoning.max_tokens, or an effort's share of max_tokens), or adaptive.
  reasoning_effort: "translated",
  reasoning: "translated",
  // Messages has no setting for the length and detail of the answer.
  verbosity: "refused",
  echo: "unserved",
  best_of: "unserved",
  suffix: "unserved",
  prompt_tokens: "unserved",
  prompt_list: "unserved",
  dimensions: "unserved",
  encoding_format: "unserved",
  input_tokens: "unserved",
  provider_preferences: "refused",
  other_model: "refused",
  unknown: "refused",
};
