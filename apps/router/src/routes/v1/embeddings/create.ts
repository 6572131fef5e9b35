// POST /v1/embeddings — sentence embeddings.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference, UINT32_MAX } from "../inference.ts";

export const embeddingsSchema = z.looseObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(z.string()).min(1).max(2048)]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().positive().max(UINT32_MAX).nullish(),
  user: z.string().nullish(),
});

export function registerEmbeddings(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post("/v1/embeddings", authenticate(deps), ...jsonBody(deps), (c) => handleInference(c, deps, "/v1/embeddings", embeddingsSchema));
}
