// Request fields the inference routes' schemas share: the generation
// parameters of chat and text completions, bounded by the engine's types.
import * as z from "zod";

/** The largest value a protobuf uint32 holds: the engine's max_tokens, top_k, layer indices. */
export const UINT32_MAX = 4_294_967_295;

/** Choices per request at most (n, best_of): the worker's batch holds them together. */
export const MAX_CHOICES = 8;

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
  top_p: z.number().min(0).max(1).nullish(),
  top_k: z.number().int().nonnegative().max(UINT32_MAX).nullish(),
  /** Choices per prompt; a worker decodes them together, sharing the prompt's computed keys and values. */
  n: z.number().int().min(1).max(MAX_CHOICES).nullish(),
  // uint64 in the engine; any safe integer (negative ones by magnitude).
  seed: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER).nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  // Chat: a boolean with top_logprobs 0–20; completions: an integer 0–5 (the worker checks which shape fits the route).
  logprobs: z.union([z.boolean(), z.number().int().min(0).max(5)]).nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  // Token ids (the model's vocabulary, checked where it is known) → a bias added to their logits.
  logit_bias: z.record(z.string().regex(/^\d+$/, "keys are token ids"), z.number().min(-100).max(100)).refine((m) => Object.keys(m).length <= 1024, "at most 1024 tokens").nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  // vLLM's extensions: 1 (or 0) is off; min_p relative to the most likely token.
  repetition_penalty: z.number().gt(0).max(10).nullish(),
  min_p: z.number().min(0).max(1).nullish(),
  user: z.string().nullish(),
};


/**
 * OpenAI's rule: stream_options only with stream: true (its 400 names
 * stream_options). Ignoring it would leave a client that forgot `stream`
 * waiting for a usage chunk that never comes.
 */
export function streamOptionsNeedStream(body: { stream?: boolean | null; stream_options?: unknown }, ctx: z.RefinementCtx): void {
  if (body.stream_options != null && body.stream !== true) {
    ctx.addIssue({ code: "custom", path: ["stream_options"], message: "is only allowed when 'stream' is true" });
  }
}

/** A list of token ids (completions' prompt, embeddings' input as LangChain sends them). */
export const tokenIds = z.array(z.number().int().nonnegative().max(UINT32_MAX)).min(1);
