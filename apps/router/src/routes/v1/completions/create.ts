// POST /v1/completions — legacy text completions, streamed or not.
import type { Hono } from "hono";
import { z } from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { generationFields } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { completionAnswer, inferenceErrors } from "../../../openapi/common.ts";

export const completionSchema = z.looseObject({
  ...generationFields,
  prompt: z.union([z.string(), z.array(z.string()).length(1)]),
});

export const textCompletionAnswer = z.looseObject({ id: z.string(), object: z.literal("text_completion"), choices: z.array(z.looseObject({ index: z.number().int() })) });

export function registerCompletions(app: Hono<AppEnv>, deps: AppDeps): void {
  app.post(
    "/v1/completions",
    authenticate(deps),
    ...jsonBody(deps, completionSchema),
    documented(
      { summary: "Create a text completion", tag: "inference", operationId: "createCompletion", responses: completionAnswer(textCompletionAnswer, "a text_completion, or with stream: true an SSE stream ending with data: [DONE]"), errors: inferenceErrors },
      (c) => handleInference(c, deps, "/v1/completions"),
    ),
  );
}
