// POST /v1/completions — legacy text completions, streamed or not.
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { generationFields, MAX_CHOICES, streamOptionsNeedStream, tokenIds } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { completionAnswer, inferenceErrors } from "../../../openapi/common.ts";

// best_of must be at least n and cannot stream: the worker checks (a
// refinement here would be invisible in the OpenAPI schema). stream_options
// without stream is refused here, as on chat: it holds for every backend.
export const completionSchema = z
  .looseObject({
    ...generationFields,
    // OpenAI's four shapes: a string, strings, token ids, lists of token ids.
    prompt: z.union([z.string(), z.array(z.string()).min(1).max(MAX_CHOICES), tokenIds, z.array(tokenIds).min(1).max(MAX_CHOICES)]),
    echo: z.boolean().nullish(),
    best_of: z.number().int().min(1).max(MAX_CHOICES).nullish(),
    suffix: z.string().nullish(),
  })
  .superRefine(streamOptionsNeedStream);

export const textCompletionAnswer = z.looseObject({ id: z.string(), object: z.literal("text_completion"), choices: z.array(z.looseObject({ index: z.number().int() })) });

export function registerCompletions(app: RouteTable, deps: AppDeps): void {
  app.post(
    "/v1/completions",
    authenticate(deps),
    jsonBody(deps, completionSchema),
    documented(
      { summary: "Create a text completion", tag: "inference", operationId: "createCompletion", responses: completionAnswer(textCompletionAnswer, "a text_completion, or with stream: true an SSE stream ending with data: [DONE]"), errors: inferenceErrors },
      (c) => handleInference(c, deps, "/v1/completions"),
    ),
  );
}
