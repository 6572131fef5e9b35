// POST /v1/responses — OpenAI's Responses API, streamed (typed events) or
// not, on every backend: translated to a chat request at one boundary
// (translate/), run through the same pipeline as /v1/chat/completions, and
// stored per tenant (unless store: false) so that any router can continue it
// with previous_response_id.
import type { Context } from "hono";
import * as z from "zod";
import type { ResponseStore } from "@switchyard/state";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { ApiError } from "../../../errors.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { runTranslated, type ChatTranslation, type Json } from "../../../translate/boundary.ts";
import { historyItems, loadResponse, saveResponse } from "../../../translate/responses/conversation.ts";
import { inputItems } from "../../../translate/responses/items.ts";
import { namespacedNames } from "../../../translate/responses/namespaces.ts";
import { includesEncrypted } from "../../../translate/responses/reasoning.ts";
import { INCLUDABLE } from "./list-input-items.ts";
import { toChatRequest } from "../../../translate/responses/request.ts";
import { newResponseId, nowSeconds, outputFromCompletion, responseEnvelope, statusOf } from "../../../translate/responses/response.ts";
import { ResponsesStreamTranslator } from "../../../translate/responses/stream.ts";
import { UINT32_MAX } from "../fields.ts";
import { documented } from "../../../openapi/marks.ts";
import { completionAnswer, inferenceErrors } from "../../../openapi/common.ts";

const inputContentPart = z.looseObject({ type: z.string() });

/** One input item: a message (easy or typed), a function call, its output, a reasoning item (request.ts checks each kind's fields). */
const inputItem = z.looseObject({
  type: z.string().optional(),
  role: z.enum(["user", "assistant", "system", "developer"]).optional(),
  // null on a reasoning item, as OpenAI writes one (Codex CLI sends them back so).
  content: z.union([z.string(), z.array(inputContentPart)]).nullish(),
  call_id: z.string().optional(),
  name: z.string().optional(),
  arguments: z.string().optional(),
  output: z.union([z.string(), z.array(inputContentPart)]).optional(),
});

const functionTool = z.looseObject({
  type: z.string(),
  name: z.string().optional(),
  description: z.string().nullish(),
  parameters: z.record(z.string(), z.unknown()).nullish(),
  strict: z.boolean().nullish(),
});

const textFormat = z.union([
  z.looseObject({ type: z.literal("text") }),
  z.looseObject({ type: z.literal("json_object") }),
  z.looseObject({ type: z.literal("json_schema"), name: z.string().min(1).max(64), schema: z.record(z.string(), z.unknown()), description: z.string().optional(), strict: z.boolean().nullish() }),
]);

// Strict: a key OpenAI's create does not take (or one Switchyard does not
// know) is a 400 naming it, as OpenAI answers one — never dropped by the
// translation to chat, which builds its body from the keys it reads.
export const createResponseSchema = z.strictObject({
  model: z.string().min(1),
  input: z.union([z.string(), z.array(inputItem)]),
  instructions: z.string().nullish(),
  previous_response_id: z.string().max(128).nullish(),
  store: z.boolean().nullish(),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_obfuscation: z.boolean().optional() }).nullish(),
  max_output_tokens: z.number().int().positive().max(UINT32_MAX).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().min(0).max(1).nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  // OpenAI refuses a value it does not know (a typo of the logprobs one would otherwise be silently ignored).
  include: z.array(z.enum(INCLUDABLE)).nullish(),
  tools: z.array(functionTool).nullish(),
  tool_choice: z.union([z.enum(["none", "auto", "required"]), z.looseObject({ type: z.string(), name: z.string().optional() })]).nullish(),
  parallel_tool_calls: z.boolean().nullish(),
  text: z.looseObject({ format: textFormat.optional(), verbosity: z.enum(["low", "medium", "high"]).nullish() }).nullish(),
  reasoning: z.looseObject({ effort: z.string().nullish(), summary: z.string().nullish() }).nullish(),
  truncation: z.enum(["auto", "disabled"]).nullish(),
  metadata: z
    .record(z.string().max(64), z.string().max(512))
    .refine((m) => Object.keys(m).length <= 16, "at most 16 keys")
    .nullish(),
  user: z.string().nullish(),
  // Codex CLI's per-turn labels (its window and turn ids): inert here, as OpenAI's API takes them.
  client_metadata: z.record(z.string(), z.string()).nullish(),
  safety_identifier: z.string().max(64).nullish(),
  prompt_cache_key: z.string().nullish(),
  service_tier: z.string().nullish(),
  background: z.boolean().nullish(),
  // OpenAI's prompt-cache hints, inert here as prompt_cache_key is (a provider's cache keeps its own lifetimes).
  prompt_cache_retention: z.string().nullish(),
  prompt_cache_options: z.record(z.string(), z.unknown()).nullish(),
  // Read only to refuse them by name (translate/responses/request.ts rejectUnsupported).
  conversation: z.unknown().optional(),
  prompt: z.unknown().optional(),
  context_management: z.unknown().optional(),
  moderation: z.unknown().optional(),
});

/** The 400 for a conversation past responses.maxConversationBytes, naming `input`, or `previous_response_id` for a continuation. */
export function conversationTooLong(maxBytes: number, param: string): ApiError {
  return new ApiError("invalid_request", `the conversation exceeds ${maxBytes} bytes; start a new one`, param);
}

export type CreateResponseBody = z.infer<typeof createResponseSchema>;

/** The answer's documented shape (OpenAI's response object; streams are its typed events). */
export const responseAnswer = z.looseObject({
  id: z.string(),
  object: z.literal("response"),
  status: z.enum(["completed", "incomplete", "in_progress", "failed"]),
  output: z.array(z.looseObject({ type: z.string() })),
});

/**
 * A Responses body's chat request with the stored conversation it continues
 * (the tenant's own, else a 404 naming previous_response_id; one kept for
 * GET only, past responses.maxConversationBytes, is that 400): what create
 * runs and input_tokens counts. `sizeParam` is the field a conversation too
 * long is the client's 400 for.
 */
export async function continuedChat(store: ResponseStore, tenantId: number, body: Json, maxConversationBytes: number) {
  const previous = typeof body.previous_response_id === "string" && body.previous_response_id !== "" ? await loadResponse(store, tenantId, body.previous_response_id, "previous_response_id") : undefined;
  if (previous && previous.messages === null) throw conversationTooLong(maxConversationBytes, "previous_response_id");
  const history = previous?.messages ?? [];
  const { chat, input } = toChatRequest(body, history);
  const conversation = [...history, ...input];
  return { previous, chat, conversation, conversationBytes: JSON.stringify(conversation).length, sizeParam: previous ? "previous_response_id" : "input" };
}

export async function createResponse(c: Context<AppEnv>, deps: AppDeps, store: ResponseStore): Promise<Response> {
  const body = c.get("body") as CreateResponseBody & Json;
  const tenantId = c.get("tenant").tenantId;
  const { ttlS, maxConversationBytes } = deps.config.responses;
  const { previous, chat, conversation, conversationBytes, sizeParam } = await continuedChat(store, tenantId, body, maxConversationBytes);
  const keep = body.store !== false;
  // The input items (with ids) are kept for input_items beside the chat
  // conversation, so a stored response holds its conversation twice: each
  // copy is bounded, the longer one deciding (items carry ids and part
  // wrappers chat messages do not). Nothing is kept with store: false.
  let items: Json[] = [];
  let itemsBytes = 0;
  if (keep) {
    const earlier = previous ? historyItems(previous) : [];
    items = [...earlier, ...inputItems(body.input, new Set(earlier.map((i) => String(i.id))))];
    itemsBytes = JSON.stringify(items).length;
  }
  if (Math.max(conversationBytes, itemsBytes) > maxConversationBytes) throw conversationTooLong(maxConversationBytes, sizeParam);
  const seed = { id: newResponseId(), createdAt: nowSeconds(), body };
  /** Stored before the client hears it is done: its next request may continue it on another router at once. */
  const persist = async (response: Json, turn: Json) => {
    if (!keep) return;
    // The conversation's JSON with the turn appended: its length without serializing it all again.
    const bytes = conversationBytes + JSON.stringify(turn).length + (conversation.length > 0 ? 1 : 0);
    // The items are the input alone (the output is the response's own): they fit, checked above.
    await saveResponse(store, tenantId, { response, messages: bytes <= maxConversationBytes ? [...conversation, turn] : null, items }, ttlS);
  };
  const translation: ChatTranslation = {
    whole: async (completion) => {
      const { output, turn, finish, usage } = outputFromCompletion(completion, includesEncrypted(body), namespacedNames(body.tools));
      const response = responseEnvelope(seed, { status: statusOf(finish), output, usage, finish });
      try {
        await persist(response, turn);
      } catch {
        throw new ApiError("response_store_unavailable", "the response could not be stored; retry shortly");
      }
      return response;
    },
    stream: () =>
      new ResponsesStreamTranslator(seed, async ({ response, turn }) => {
        try {
          await persist(response, turn);
        } catch {
          throw new Error("the response could not be stored; retry shortly");
        }
      }),
  };
  return runTranslated(c, deps, chat, translation, { params: chatParamsOfResponses });
}

/** The chat fields toChatRequest makes, by the Responses field the client sent (errors name the latter). */
export const chatParamsOfResponses: Record<string, string> = {
  reasoning_effort: "reasoning.effort",
  verbosity: "text.verbosity",
  max_tokens: "max_output_tokens",
  response_format: "text.format",
};

export function registerCreateResponse(app: RouteTable, deps: AppDeps, store: ResponseStore): void {
  app.post(
    "/v1/responses",
    authenticate(deps),
    jsonBody(deps, createResponseSchema),
    documented(
      {
        summary: "Create a model response (OpenAI's Responses API)",
        description: "Translated to a chat request and run like one (docs/APIS.md). Stored per tenant unless store: false; previous_response_id continues a stored one.",
        tag: "inference",
        operationId: "createResponse",
        responses: completionAnswer(responseAnswer, "a response object, or with stream: true an SSE stream of OpenAI's typed response events ending with response.completed, response.incomplete or response.failed"),
        errors: [...inferenceErrors, "not_found", "response_store_unavailable"],
      },
      (c) => createResponse(c, deps, store),
    ),
  );
}
