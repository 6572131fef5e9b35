// POST /v1/chat/completions — OpenAI chat, streamed or not.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { generationFields } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { completionAnswer, inferenceErrors } from "../../../openapi/common.ts";

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

/** The answer's documented shape (OpenAI's chat.completion; streams are chat.completion.chunk events). */
export const chatCompletionAnswer = z.looseObject({ id: z.string(), object: z.literal("chat.completion"), choices: z.array(z.looseObject({ index: z.number().int() })) });

export function registerChatCompletions(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post(
    "/v1/chat/completions",
    authenticate(deps),
    ...jsonBody(deps, chatCompletionSchema),
    documented(
      { summary: "Create a chat completion", tag: "inference", operationId: "createChatCompletion", responses: completionAnswer(chatCompletionAnswer, "a chat.completion, or with stream: true an SSE stream of chat.completion.chunk events ending with data: [DONE]"), errors: inferenceErrors },
      (c) => handleInference(c, deps, "/v1/chat/completions"),
    ),
  );
}
