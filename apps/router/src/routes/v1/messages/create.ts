// POST /v1/messages — Anthropic's Messages API inbound, so code written for
// Anthropic (its SDK, curl from its docs) runs on any backend: a Switchyard
// key in x-api-key (or Authorization: Bearer), anthropic-version accepted,
// the request translated to a chat request at one boundary (translate/) and
// run through the same pipeline, budgets and ledger as /v1/chat/completions.
// Errors leave in Anthropic's shape.
import type { Context, MiddlewareHandler } from "hono";
import * as z from "zod";
import type { Backend } from "../../../backends/types.ts";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { ApiError, toApiError } from "../../../errors.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { runTranslated, type Json } from "../../../translate/boundary.ts";
import { toChatRequest, type NeededFeature } from "../../../translate/messages/request.ts";
import { anthropicErrorBody, anthropicStatus, describeError, messageFromCompletion } from "../../../translate/messages/response.ts";
import { MessagesStreamTranslator } from "../../../translate/messages/stream.ts";
import { UINT32_MAX } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { completionAnswer, inferenceErrors } from "../../../openapi/common.ts";

/** The answer's documented shape (Anthropic's message; streams are its events). */
export const messageAnswer = z.looseObject({ id: z.string(), type: z.literal("message"), role: z.literal("assistant"), content: z.array(z.looseObject({ type: z.string() })), stop_reason: z.string().nullable() });

/** Anthropic's error body, this route's one error shape. */
export const anthropicErrorSchema = z.object({ type: z.literal("error"), error: z.object({ type: z.string(), message: z.string() }), request_id: z.string().nullable() });

const cacheControl = z.looseObject({ type: z.literal("ephemeral"), ttl: z.enum(["5m", "1h"]).optional() });
const contentBlock = z.looseObject({ type: z.string(), cache_control: cacheControl.nullish() });
const textBlock = z.looseObject({ type: z.literal("text"), text: z.string(), cache_control: cacheControl.nullish() });

export const messageParamSchema = z.looseObject({
  role: z.enum(["user", "assistant", "system"]),
  content: z.union([z.string(), z.array(contentBlock)]),
});

/** Anthropic's MessageCreateParams, as far as Switchyard reads them (translate/messages/request.ts refuses the rest by name). */
export const createMessageSchema = z.looseObject({
  model: z.string().min(1),
  max_tokens: z.number().int().positive().max(UINT32_MAX),
  messages: z.array(messageParamSchema).min(1),
  system: z.union([z.string(), z.array(textBlock)]).optional(),
  stop_sequences: z.array(z.string()).optional(),
  stream: z.boolean().optional(),
  temperature: z.number().min(0).max(1).optional(),
  top_p: z.number().min(0).max(1).optional(),
  top_k: z.number().int().nonnegative().max(UINT32_MAX).optional(),
  metadata: z.looseObject({ user_id: z.string().max(256).nullish() }).optional(),
  tools: z.array(z.looseObject({ name: z.string().min(1), type: z.string().nullish(), description: z.string().optional(), input_schema: z.record(z.string(), z.unknown()).optional() })).optional(),
  tool_choice: z.looseObject({ type: z.enum(["auto", "any", "tool", "none"]), name: z.string().optional(), disable_parallel_tool_use: z.boolean().optional() }).optional(),
  thinking: z.looseObject({ type: z.string() }).optional(),
  service_tier: z.enum(["auto", "standard_only"]).optional(),
  output_config: z.looseObject({ format: z.looseObject({ type: z.string(), schema: z.record(z.string(), z.unknown()).optional() }).nullish(), effort: z.string().nullish() }).optional(),
  // Read only to refuse them by name when set (translate/messages/request.ts).
  cache_control: cacheControl.nullish(),
  container: z.null().optional(),
  mcp_servers: z.array(z.never()).max(0).optional(),
  // Claude Code sends clear_thinking with thinking on (translate/messages/thinking.ts applies it).
  context_management: z.looseObject({ edits: z.array(z.looseObject({ type: z.string() })).optional() }).nullish(),
  inference_geo: z.string().nullish(),
  speed: z.string().nullish(),
  // Anthropic refuses extra inputs; so does Switchyard, naming the field.
}).catchall(z.never());

const VERSION = /^\d{4}-\d{2}-\d{2}$/;

/**
 * Every error of this route in Anthropic's shape (`{"type":"error","error":
 * {type,message},"request_id"}`), whatever raised it: auth, body checks,
 * admission, routing, the upstream. Status and headers (Retry-After) stay,
 * but for 503, which is Anthropic's 529 (anthropicStatus).
 */
export const anthropicErrors: MiddlewareHandler<AppEnv> = async (c, next) => {
  await next();
  if (!c.error) return;
  const err = toApiError(c.error);
  const { status, message } = describeError(err);
  const headers = new Headers(c.res.headers);
  headers.set("content-type", "application/json");
  headers.delete("content-length");
  headers.set("request-id", c.get("requestId"));
  c.res = new Response(JSON.stringify(anthropicErrorBody(status, message, c.get("requestId"))), { status: anthropicStatus(status), headers });
};

/** anthropic-version, when sent, must look like a version date (Anthropic's SDKs send 2023-06-01). */
export const checkVersion: MiddlewareHandler<AppEnv> = async (c, next) => {
  const v = c.req.header("anthropic-version");
  if (v !== undefined && !VERSION.test(v.trim())) throw new ApiError("invalid_request", `anthropic-version: '${v.slice(0, 40)}' is not a version date (e.g. 2023-06-01)`, "anthropic-version");
  await next();
};

/** Keeps the candidates that carry every feature the request needs; none left is the client's 400 naming the first field. */
export function narrowByFeatures(needs: NeededFeature[], model: string): ((backends: Backend[]) => Backend[]) | undefined {
  if (needs.length === 0) return undefined;
  return (backends) => {
    for (const need of needs) {
      const able = backends.filter((b) => b.features?.has(need.feature) === true);
      if (able.length === 0) {
        throw new ApiError("invalid_request", `${need.param}: ${need.feature.replace("_", " ")} is not supported by the backends serving model '${model}' (${backends.map((b) => b.id).join(", ")})`, need.param);
      }
      backends = able;
    }
    return backends;
  };
}

/**
 * The chat fields toChatRequest makes, by the Messages field the client sent:
 * a backend's refusal of one (a worker's of `reasoning`) names the latter.
 */
export const chatParamsOfMessages: Record<string, string> = {
  reasoning: "thinking",
  response_format: "output_config.format",
  stop: "stop_sequences",
  parallel_tool_calls: "tool_choice.disable_parallel_tool_use",
  user: "metadata.user_id",
};

export async function createMessage(c: Context<AppEnv>, deps: AppDeps): Promise<Response> {
  const body = c.get("body") as Json & { model: string };
  const { chat, needs, thinking } = toChatRequest(body);
  const narrow = narrowByFeatures(needs, body.model);
  const shape = { stops: Array.isArray(body.stop_sequences) ? (body.stop_sequences as string[]) : [], thinking };
  // Anthropic's SDK reads the id from `request-id`.
  const headers = { "request-id": c.get("requestId") };
  return runTranslated(
    c,
    deps,
    chat,
    {
      whole: async (completion) => messageFromCompletion(completion, body.model, shape),
      stream: () => new MessagesStreamTranslator(body.model, shape),
    },
    { headers, params: chatParamsOfMessages, ...(narrow ? { narrow } : {}) },
  );
}

export function registerCreateMessage(app: RouteTable, deps: AppDeps): void {
  app.post(
    "/v1/messages",
    anthropicErrors,
    authenticate(deps, { apiKeyHeader: "x-api-key" }),
    checkVersion,
    jsonBody(deps, createMessageSchema),
    documented(
      {
        summary: "Create a message (Anthropic's Messages API)",
        description: "The key in x-api-key or Authorization: Bearer; anthropic-version accepted. Translated to a chat request and run like one (docs/APIS.md); errors in Anthropic's shape.",
        tag: "inference",
        operationId: "createMessage",
        responses: completionAnswer(messageAnswer, "a message, or with stream: true Anthropic's SSE events message_start … message_stop"),
        errors: inferenceErrors,
        errorShape: { name: "AnthropicError", schema: anthropicErrorSchema, status: anthropicStatus },
      },
      (c) => createMessage(c, deps),
    ),
  );
}
