// POST /v1/completions — legacy text completions, streamed or not.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../inference.ts";

export const completionSchema = z.looseObject({
  model: z.string().min(1),
  prompt: z.union([z.string(), z.array(z.string()).length(1)]),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().nonnegative().nullish(),
  n: z.literal(1).nullish(),
  seed: z.number().int().nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  user: z.string().nullish(),
});

export function registerCompletions(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post("/v1/completions", authenticate(deps), ...jsonBody(deps), (c) => handleInference(c, deps, "/v1/completions", completionSchema));
}
