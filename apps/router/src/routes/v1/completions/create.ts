// POST /v1/completions — legacy text completions, streamed or not.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { generationFields, handleInference } from "../inference.ts";

export const completionSchema = z.looseObject({
  ...generationFields,
  prompt: z.union([z.string(), z.array(z.string()).length(1)]),
});

export function registerCompletions(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post("/v1/completions", authenticate(deps), ...jsonBody(deps), (c) => handleInference(c, deps, "/v1/completions", completionSchema));
}
