// POST /v1/completions — legacy text completions, streamed or not.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { generationFields } from "../fields.ts";

export const completionSchema = z.looseObject({
  ...generationFields,
  prompt: z.union([z.string(), z.array(z.string()).length(1)]),
});

export function registerCompletions(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post("/v1/completions", authenticate(deps), ...jsonBody(deps, completionSchema), (c) => handleInference(c, deps, "/v1/completions"));
}
