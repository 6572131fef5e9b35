// POST /v1/messages/count_tokens — Anthropic's token counting, which its SDK
// (`messages.countTokens`) and Claude Code call before sending: the Messages
// request's prompt is translated as /v1/messages translates it and counted
// where that request would run (pipeline/count.ts) — by the worker's engine
// or by Anthropic, exactly; for a backend that cannot count (OpenRouter), the
// router's estimate, marked `switchyard-token-count: estimate`. Not billed,
// no ledger row. Errors leave in Anthropic's shape, as on /v1/messages.
import type { Context } from "hono";
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { countHeaders, countPrompt, type PromptCount } from "../../../pipeline/count.ts";
import type { InferenceBody } from "../../../pipeline/inference.ts";
import { clientParam, type Json } from "../../../translate/boundary.ts";
import { toChatRequest } from "../../../translate/messages/request.ts";
import { anthropicStatus } from "../../../translate/messages/response.ts";
import { documented } from "../../../openapi/marks.ts";
import { countErrors, tokenCountHeaders } from "../../../openapi/common.ts";
import { anthropicErrors, anthropicErrorSchema, chatParamsOfMessages, checkVersion, createMessageSchema, narrowByFeatures } from "./create.ts";

/** Anthropic's answer: the prompt's tokens (system, messages and tools together). */
export const tokenCountAnswer = z.object({ input_tokens: z.number().int().nonnegative() });

const create = createMessageSchema.shape;

/**
 * Anthropic's MessageCountTokensParams: the fields of a message that make
 * its prompt. What shapes only the answer (max_tokens, sampling, stop
 * sequences, stream, metadata) Anthropic refuses here as extra inputs; so
 * does Switchyard, naming the field.
 */
export const countTokensSchema = z
  .looseObject({
    model: create.model,
    messages: create.messages,
    system: create.system,
    tools: create.tools,
    tool_choice: create.tool_choice,
    thinking: create.thinking,
    output_config: create.output_config,
    // Read only to refuse them by name when set (translate/messages/request.ts), as on /v1/messages.
    cache_control: create.cache_control,
    context_management: create.context_management,
    mcp_servers: create.mcp_servers,
    speed: create.speed,
  })
  .catchall(z.never());

export async function countMessageTokens(c: Context<AppEnv>, deps: AppDeps): Promise<Response> {
  const body = c.get("body") as Json & { model: string };
  // The prompt /v1/messages would run: the same translation, the same 400s for what no backend can honour.
  const { chat, needs } = toChatRequest(body);
  delete chat.max_tokens;
  const narrow = narrowByFeatures(needs, body.model);
  let count: PromptCount;
  try {
    count = await countPrompt(c, deps, chat as InferenceBody, narrow ? { narrow } : {});
  } catch (err) {
    // A refusal of a chat field names the Messages field sent (reasoning → thinking), as on /v1/messages.
    throw clientParam(err, chatParamsOfMessages);
  }
  return c.json({ input_tokens: count.tokens }, 200, { ...countHeaders(count), "request-id": c.get("requestId") });
}

export function registerCountMessageTokens(app: RouteTable, deps: AppDeps): void {
  app.post(
    "/v1/messages/count_tokens",
    anthropicErrors,
    authenticate(deps, { apiKeyHeader: "x-api-key" }),
    checkVersion,
    jsonBody(deps, countTokensSchema),
    documented(
      {
        summary: "Count a message's input tokens (Anthropic's count_tokens)",
        description:
          "Counted where the same /v1/messages request would run, without running it: exactly by a worker's engine (the model's tokenizer and chat template) or by Anthropic's count_tokens; estimated by the router for a backend that cannot count (OpenRouter), and then marked `switchyard-token-count: estimate`. Not billed; counts as one request against rate limits, no tokens. Errors in Anthropic's shape (docs/APIS.md).",
        tag: "inference",
        operationId: "countMessageTokens",
        responses: {
          200: {
            description: "the prompt's tokens",
            json: tokenCountAnswer,
            headers: tokenCountHeaders,
          },
        },
        errors: countErrors,
        errorShape: { name: "AnthropicError", schema: anthropicErrorSchema, status: anthropicStatus },
      },
      (c) => countMessageTokens(c, deps),
    ),
  );
}
