// GET /v1/responses/{id}/input_items — the input items of one of the
// tenant's stored responses, a page at a time, as OpenAI lists them
// (client.responses.inputItems.list): newest first unless order=asc, `after`
// an item id of the previous page. A continuation's items begin with the
// earlier turns' inputs and outputs — the conversation the model was given.
// Another tenant's id, an expired one or one stored with store: false is a
// 404, as on retrieve.
import type { ResponseStore } from "@switchyard/state";
import type { Context } from "hono";
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { ApiError } from "../../../errors.ts";
import { authenticate, validate } from "../../../middleware.ts";
import { documented } from "../../../openapi/marks.ts";
import type { Json } from "../../../translate/boundary.ts";
import { loadResponse, storedInputItems } from "../../../translate/responses/conversation.ts";

/** What `include` takes on OpenAI's API (the SDK's ResponseIncludable): here and on create, where the logprobs and encrypted reasoning ones add something (docs/APIS.md). */
export const INCLUDABLE = [
  "file_search_call.results",
  "web_search_call.results",
  "web_search_call.action.sources",
  "message.input_image.image_url",
  "computer_call_output.output.image_url",
  "code_interpreter_call.outputs",
  "reasoning.encrypted_content",
  "message.output_text.logprobs",
] as const;

export const inputItemsQuery = z.object({
  limit: z.coerce.number().int().min(1).max(100).default(20).describe("how many items, 1 to 100"),
  order: z.enum(["asc", "desc"]).default("desc").describe("asc: the conversation's order; desc (the default): newest first"),
  after: z.string().min(1).max(256).optional().describe("an item id: the items after it in this order (the last id of the previous page)"),
  include: z.array(z.enum(INCLUDABLE)).optional().describe("accepted as OpenAI's API takes it; adds nothing: stored items are listed whole, without log probabilities or encrypted reasoning, which are not kept"),
});

export const inputItemList = z.looseObject({
  object: z.literal("list"),
  data: z.array(z.looseObject({ id: z.string(), type: z.string() })),
  first_id: z.string().nullable(),
  last_id: z.string().nullable(),
  has_more: z.boolean(),
});

/** The query as the schema reads it: `include` repeated, or `include[]` as the openai SDK writes arrays. */
function query(c: Context<AppEnv>): z.infer<typeof inputItemsQuery> {
  const raw: Record<string, unknown> = { ...c.req.query() };
  delete raw["include[]"];
  const include = [...(c.req.queries("include") ?? []), ...(c.req.queries("include[]") ?? [])];
  if (include.length > 0) raw.include = include;
  return validate(inputItemsQuery, raw);
}

/** One page of `items` (in the conversation's order), as OpenAI's cursor lists answer. */
export function inputItemsPage(items: Json[], q: z.infer<typeof inputItemsQuery>): Json {
  const ordered = q.order === "asc" ? items : [...items].reverse();
  let start = 0;
  if (q.after !== undefined) {
    const at = ordered.findIndex((i) => i.id === q.after);
    if (at < 0) throw new ApiError("invalid_request", `after: no input item '${q.after.slice(0, 80)}' in this response`, "after");
    start = at + 1;
  }
  const data = ordered.slice(start, start + q.limit);
  return {
    object: "list",
    data,
    first_id: data.length > 0 ? data[0]!.id : null,
    last_id: data.length > 0 ? data[data.length - 1]!.id : null,
    has_more: start + q.limit < ordered.length,
  };
}

export function registerListInputItems(app: RouteTable, deps: AppDeps, store: ResponseStore): void {
  app.get(
    "/v1/responses/:id/input_items",
    authenticate(deps),
    documented(
      {
        summary: "List a stored response's input items",
        description:
          "OpenAI's list object of the response's input items, each with its id; a continuation's begin with the earlier turns' inputs and outputs (docs/APIS.md). Newest first unless order=asc; after names the last item of the previous page.",
        tag: "inference",
        operationId: "listInputItems",
        query: inputItemsQuery,
        responses: { 200: { description: "a page of input items", json: inputItemList } },
        errors: ["invalid_request", "not_found", "response_store_unavailable"],
      },
      async (c) => {
        // The query first: a bad one is the same 400 whoever asks.
        const q = query(c);
        const stored = await loadResponse(store, c.get("tenant").tenantId, c.req.param("id") ?? "");
        return c.json(inputItemsPage(storedInputItems(stored), q));
      },
    ),
  );
}
