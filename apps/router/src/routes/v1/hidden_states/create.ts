// POST /v1/hidden_states — per-layer activations from a llama model, as
// safetensors bytes (default) or JSON floats with Accept: application/json.
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { chatMessageSchema } from "../chat/completions.ts";
import { handleInference } from "../../../pipeline/inference.ts";
import { UINT32_MAX } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { inferenceErrors, rateLimitHeaders } from "../../../openapi/common.ts";

export const hiddenStatesSchema = z
  .looseObject({
    model: z.string().min(1),
    input: z.string().min(1).optional(),
    messages: z.array(chatMessageSchema).min(1).optional(),
    layers: z.union([z.literal("all"), z.array(z.number().int().nonnegative().max(UINT32_MAX)).min(1).max(1024)]).optional(),
    pooling: z.enum(["none", "mean", "last"]).optional(),
    dtype: z.enum(["f32", "f16"]).optional(),
  })
  .refine((b) => (b.input === undefined) !== (b.messages === undefined), { message: "exactly one of input or messages is required", path: ["input"] })
  // The refine, said in JSON Schema for the OpenAPI document.
  .meta({ oneOf: [{ required: ["input"] }, { required: ["messages"] }] });

export function registerHiddenStates(app: RouteTable, deps: AppDeps): void {
  const doc = {
    summary: "Per-layer activations of a prompt",
    tag: "inference",
    operationId: "createHiddenStates",
    responses: { 200: { description: "safetensors bytes, or JSON floats with Accept: application/json", binary: ["application/octet-stream"], headers: rateLimitHeaders } },
    errors: inferenceErrors,
  };
  app.post(
    "/v1/hidden_states",
    authenticate(deps),
    jsonBody(deps, hiddenStatesSchema),
    documented(doc, (c) => {
      const accept = (c.req.header("accept") ?? "").includes("application/json") ? "application/json" : "application/octet-stream";
      return handleInference(c, deps, "/v1/hidden_states", { raw: { accept } });
    }),
  );
}
