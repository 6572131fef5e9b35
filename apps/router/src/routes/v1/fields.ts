// Request fields the inference routes' schemas share: the generation
// parameters of chat and text completions, bounded by the engine's types.
import { z } from "zod";

/** The largest value a protobuf uint32 holds: the engine's max_tokens, top_k, layer indices. */
export const UINT32_MAX = 4_294_967_295;

/**
 * The generation fields chat and text completions share, as OpenAI defines
 * them, bounded by the engine's protobuf field types
 * (proto/switchyard/engine/v1/engine.proto): a value the worker cannot
 * encode is the client's 400 here, not a 500 counted against a worker.
 */
export const generationFields = {
  model: z.string().min(1),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: z.number().int().positive().max(UINT32_MAX).nullish(),
  /** OpenAI's newer name for max_tokens; the two become one value (normalizeMaxOutput). */
  max_completion_tokens: z.number().int().positive().max(UINT32_MAX).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().nonnegative().max(UINT32_MAX).nullish(),
  n: z.literal(1).nullish(),
  // uint64 in the engine; any safe integer (negative ones by magnitude).
  seed: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER).nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  // Chat: a boolean with top_logprobs 0–20; completions: an integer 0–5 (the worker checks which shape fits the route).
  logprobs: z.union([z.boolean(), z.number().int().min(0).max(5)]).nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  user: z.string().nullish(),
};
