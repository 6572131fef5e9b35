// POST /v1/embeddings — sentence embeddings.
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { tokenIds, UINT32_MAX } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { inferenceErrors, rateLimitHeaders } from "../../../openapi/common.ts";

export const embeddingsSchema = z.looseObject({
  model: z.string().min(1),
  // Text, or token ids of the model's vocabulary (LangChain's default shape).
  input: z.union([z.string(), z.array(z.string()).min(1), tokenIds, z.array(tokenIds).min(1)]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().positive().max(UINT32_MAX).nullish(),
  user: z.string().nullish(),
});

/** How much one request may ask to embed (config `embeddings`). */
export interface EmbeddingsLimits {
  maxInputs: number;
  maxInputChars: number;
}

/** The request schema under the configured limits: more inputs or text than they allow is a 400 naming `input`. */
export function embeddingsSchemaFor(limits: EmbeddingsLimits) {
  return embeddingsSchema.superRefine((body, ctx) => {
    const input = body.input;
    // A token list is one input; a token counts as one character.
    const inputs: Array<string | number[]> = typeof input === "string" ? [input] : input.every((t) => typeof t === "number") ? [input as number[]] : (input as Array<string | number[]>);
    if (inputs.length > limits.maxInputs) {
      ctx.addIssue({ code: "custom", path: ["input"], message: `at most ${limits.maxInputs} inputs per request (got ${inputs.length})` });
      return;
    }
    let chars = 0;
    for (const s of inputs) chars += s.length;
    if (chars > limits.maxInputChars) {
      ctx.addIssue({ code: "custom", path: ["input"], message: `at most ${limits.maxInputChars} characters across all inputs per request (got ${chars})` });
    }
  });
}

export const embeddingsAnswer = z.looseObject({ object: z.literal("list"), data: z.array(z.looseObject({ object: z.literal("embedding"), index: z.number().int() })) });

export function registerEmbeddings(app: RouteTable, deps: AppDeps): void {
  const schema = embeddingsSchemaFor(deps.config.embeddings);
  app.post(
    "/v1/embeddings",
    authenticate(deps),
    jsonBody(deps, schema),
    documented(
      { summary: "Create embeddings", tag: "inference", operationId: "createEmbedding", responses: { 200: { description: "a list of embeddings", json: embeddingsAnswer, headers: rateLimitHeaders } }, errors: inferenceErrors },
      (c) => handleInference(c, deps, "/v1/embeddings"),
    ),
  );
}
