// POST /v1/responses/input_tokens — OpenAI's "Get input token counts"
// (`client.responses.inputTokens.count` in the openai SDKs): a Responses
// request's prompt — instructions, the stored conversation it continues, its
// input and tools — translated as /v1/responses translates it and counted
// where that response would run (pipeline/count.ts): by the worker's engine
// or by Anthropic, exactly; for a backend that cannot count (OpenRouter), the
// router's estimate, marked `switchyard-token-count: estimate`. Not billed,
// no ledger row, nothing stored.
import type { Context } from "hono";
import * as z from "zod";
import type { ResponseStore } from "@switchyard/state";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { countHeaders, countPrompt, type PromptCount } from "../../../pipeline/count.ts";
import type { InferenceBody } from "../../../pipeline/inference.ts";
import { clientParam, type Json } from "../../../translate/boundary.ts";
import { documented } from "../../../openapi/marks.ts";
import { countErrors, tokenCountHeaders } from "../../../openapi/common.ts";
import { chatParamsOfResponses, continuedChat, conversationTooLong, createResponseSchema } from "./create.ts";

/** OpenAI's answer (InputTokenCountResponse). */
export const inputTokensAnswer = z.object({ object: z.literal("response.input_tokens"), input_tokens: z.number().int().nonnegative() });

const create = createResponseSchema.shape;

/**
 * OpenAI's InputTokenCountParams: the fields of a Responses request that
 * make its prompt, checked as create checks them. What shapes only the
 * answer or its storage (max_output_tokens, sampling, stream, store,
 * include, metadata, …) OpenAI's endpoint does not take; Switchyard refuses
 * it with a 400 naming the field rather than ignore it.
 */
export const countInputTokensSchema = z
  .looseObject({
    model: create.model,
    input: create.input,
    instructions: create.instructions,
    previous_response_id: create.previous_response_id,
    tools: create.tools,
    tool_choice: create.tool_choice,
    parallel_tool_calls: create.parallel_tool_calls,
    text: create.text,
    reasoning: create.reasoning,
    truncation: create.truncation,
    // Read only to refuse it by name (translate/responses/request.ts), as create does.
    conversation: z.union([z.string(), z.looseObject({ id: z.string() })]).nullish(),
    // Taken, and not applied, as create takes it: no backend has OpenAI's style presets.
    personality: z.string().max(64).nullish(),
  })
  .catchall(z.never());

export type CountInputTokensBody = z.infer<typeof countInputTokensSchema>;

export async function countInputTokens(c: Context<AppEnv>, deps: AppDeps, store: ResponseStore): Promise<Response> {
  const body = c.get("body") as CountInputTokensBody & Json;
  const tenantId = c.get("tenant").tenantId;
  const { maxConversationBytes } = deps.config.responses;
  // The prompt /v1/responses would run: the tenant's stored conversation first (404 for anyone else's), the same translation and 400s.
  const { chat, conversationBytes, sizeParam } = await continuedChat(store, tenantId, body, maxConversationBytes);
  // A conversation create would refuse as too long is refused here too (measured as with store: false: nothing is kept).
  if (conversationBytes > maxConversationBytes) throw conversationTooLong(maxConversationBytes, sizeParam);
  let count: PromptCount;
  try {
    count = await countPrompt(c, deps, chat as InferenceBody);
  } catch (err) {
    // An error about a chat field names the Responses field sent (reasoning.effort, text.format).
    throw clientParam(err, chatParamsOfResponses);
  }
  return c.json({ object: "response.input_tokens", input_tokens: count.tokens }, 200, countHeaders(count));
}

export function registerCountInputTokens(app: RouteTable, deps: AppDeps, store: ResponseStore): void {
  app.post(
    "/v1/responses/input_tokens",
    authenticate(deps),
    jsonBody(deps, countInputTokensSchema),
    documented(
      {
        summary: "Count a response's input tokens (OpenAI's input_tokens)",
        description:
          "Counted where the same /v1/responses request would run, without running it: instructions, the stored conversation previous_response_id continues, the input and the tools, exactly by a worker's engine (the model's tokenizer and chat template) or by Anthropic's count_tokens; estimated by the router for a backend that cannot count (OpenRouter), and then marked `switchyard-token-count: estimate`. Not billed, nothing stored; counts as one request against rate limits, no tokens (docs/APIS.md).",
        tag: "inference",
        operationId: "countResponseInputTokens",
        responses: { 200: { description: "the prompt's tokens", json: inputTokensAnswer, headers: tokenCountHeaders } },
        errors: [...countErrors, "not_found", "response_store_unavailable"],
      },
      (c) => countInputTokens(c, deps, store),
    ),
  );
}
