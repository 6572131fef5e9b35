// What self-hosted workers do with each request field (backends/fields.ts
// has the catalogue). "per model": the worker agent honours it where its
// model can and answers 400 naming the field where it can't.
import type { FieldSupport } from "../fields.ts";

export const workerFields: FieldSupport = {
  temperature: "honoured",
  top_p: "honoured",
  max_tokens: "honoured",
  stop: "honoured",
  stream: "honoured",
  seed: "honoured",
  n: "honoured",
  logprobs: "honoured",
  logit_bias: "honoured",
  frequency_penalty: "honoured",
  presence_penalty: "honoured",
  top_k: "honoured",
  min_p: "honoured",
  repetition_penalty: "honoured",
  // The engine's models read text only (llama GGUF, BERT): refused by the agent.
  // Constrained decoding (llguidance) on the engine; a split model refuses them.
  response_format: "honoured",
  tools: "honoured",
  tool_choice: "honoured",
  parallel_tool_calls: "honoured",
  image_parts: "per model",
  audio_parts: "per model",
  modalities: "refused",
  reasoning_effort: "refused",
  // OpenRouter's reasoning ask is "reason if the model does" (OpenRouter answers a model that does not with no
  // reasoning, and so does Anthropic's adaptive thinking when the model chooses not to think): the engine's models
  // do not reason, so the answer carries none. Claude Code asks it of every model, a worker's included.
  reasoning: "honoured",
  verbosity: "refused",
  echo: "honoured",
  best_of: "honoured",
  // Needs fill-in-the-middle tokens in the model's vocabulary.
  suffix: "per model",
  prompt_tokens: "honoured",
  prompt_list: "honoured",
  // Needs a model trained for truncated (Matryoshka) embeddings.
  dimensions: "per model",
  encoding_format: "honoured",
  input_tokens: "honoured",
  provider_preferences: "refused",
  other_model: "refused",
  unknown: "refused",
};

/**
 * What the worker agent refuses itself: fields it does not know (its own
 * list, workers/agent/src/server/fields.ts), answered 400 naming the field.
 * Test workers (the sim worker) take their own fields through the router.
 */
export const workerChecksItself: readonly (keyof FieldSupport)[] = ["unknown"];
