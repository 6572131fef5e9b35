// POST /v1/chat/completions — OpenAI chat, streamed or not.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../inference.ts";

const contentPart = z.looseObject({ type: z.string() });

export const chatMessageSchema = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
  content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
  name: z.string().optional(),
});

export const chatCompletionSchema = z.looseObject({
  model: z.string().min(1),
  messages: z.array(chatMessageSchema).min(1),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: z.number().int().positive().nullish(),
  max_completion_tokens: z.number().int().positive().nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().nonnegative().nullish(),
  n: z.literal(1).nullish(),
  seed: z.number().int().nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  user: z.string().nullish(),
});

export function registerChatCompletions(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post("/v1/chat/completions", authenticate(deps), ...jsonBody(deps), (c) =>
    handleInference(c, deps, "/v1/chat/completions", chatCompletionSchema),
  );
}
