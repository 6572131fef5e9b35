// POST /v1/chat/completions — OpenAI chat, streamed or not.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { generationFields } from "../fields.ts";

const contentPart = z.looseObject({ type: z.string() });

export const chatMessageSchema = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool", "function"]),
  content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
  name: z.string().optional(),
});

export const chatCompletionSchema = z.looseObject({
  ...generationFields,
  messages: z.array(chatMessageSchema).min(1),
});

export function registerChatCompletions(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post("/v1/chat/completions", authenticate(deps), ...jsonBody(deps, chatCompletionSchema), (c) => handleInference(c, deps, "/v1/chat/completions"));
}
