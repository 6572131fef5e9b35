// A response's input items in the Responses API's item shape, each with an
// id, as GET /v1/responses/{id}/input_items lists them: the request's input
// normalized (a string is a user message of input_text; every message's
// content is parts), after the items of the response it continues and that
// response's output — everything the model was given but the instructions.
// Stored with the response, so ids stay the same from one listing (and one
// page) to the next.
import { createHash } from "node:crypto";
import { isObject, type Json } from "../boundary.ts";
import { newItemId } from "./response.ts";

/** An id a client sent on an item that we keep (the outputs of an earlier response it replays keep theirs); anything else gets a minted one. */
const CLIENT_ITEM_ID = /^[A-Za-z0-9_-]{1,128}$/;

const text = (v: unknown) => (typeof v === "string" ? v : "");

/** One content part of a user, system or developer message, as ResponseInputMessageItem's content has it. */
function inputContent(part: Json): Json {
  if (part.type === "input_image") {
    return { type: "input_image", image_url: part.image_url, detail: typeof part.detail === "string" ? part.detail : "auto" };
  }
  // input_text; output_text and refusal parts the chat path read as text too.
  return { type: "input_text", text: part.type === "refusal" ? text(part.refusal) : text(part.text) };
}

/** One content part of an assistant message, as ResponseOutputMessage's content has it (no logprobs: they belong to the answer that sampled them). */
function outputContent(part: Json): Json {
  if (part.type === "refusal") return { type: "refusal", refusal: text(part.refusal) };
  return { type: "output_text", text: text(part.text), annotations: Array.isArray(part.annotations) ? part.annotations : [] };
}

function messageItem(id: string, raw: Json): Json {
  const role = raw.role as string;
  const parts: Json[] = typeof raw.content === "string" ? [{ type: "input_text", text: raw.content }] : (raw.content as unknown[]).filter(isObject);
  if (role === "assistant") return { id, type: "message", role, status: "completed", content: parts.map(outputContent) };
  return { id, type: "message", role, status: "completed", content: parts.map(inputContent) };
}

function functionOutput(output: unknown): unknown {
  if (!Array.isArray(output)) return output;
  return output.filter(isObject).map((p) => ({ type: "input_text", text: text(p.text) }));
}

/**
 * The request's input as items with ids. `input` has passed the chat
 * translation (request.ts), which refuses what it cannot read; `taken` holds
 * the ids already in the list (the history's), so a client's id that repeats
 * one is replaced: an id is a page cursor and must name one item.
 */
export function inputItems(input: unknown, taken: Set<string>): Json[] {
  const raws: Json[] = typeof input === "string" ? [{ type: "message", role: "user", content: input }] : Array.isArray(input) ? input.filter(isObject) : [];
  return raws.map((raw) => {
    const type = raw.type ?? "message";
    const prefix = type === "function_call" ? "fc" : type === "function_call_output" ? "fco" : type === "reasoning" ? "rs" : "msg";
    const own = typeof raw.id === "string" && CLIENT_ITEM_ID.test(raw.id) && !taken.has(raw.id) ? raw.id : undefined;
    const id = own ?? newItemId(prefix);
    taken.add(id);
    switch (type) {
      case "function_call":
        return { id, type, status: "completed", call_id: raw.call_id, name: raw.name, ...(typeof raw.namespace === "string" && raw.namespace !== "" ? { namespace: raw.namespace } : {}), arguments: raw.arguments };
      case "function_call_output":
        return { id, type, status: "completed", call_id: raw.call_id, output: functionOutput(raw.output) };
      case "reasoning": {
        // Kept as the record of what was sent; encrypted_content is not kept (this router's own went into the chat turn it preceded, another provider's is dropped).
        const summary = Array.isArray(raw.summary) ? raw.summary.filter(isObject).map((s) => ({ type: "summary_text", text: text(s.text) })) : [];
        return { id, type, summary };
      }
      default:
        return messageItem(id, raw);
    }
  });
}

/**
 * A response's output items as the next turn's input items: the same ids
 * and status, output_text without its logprobs, a reasoning item without
 * its encrypted_content (kept as its chat turn's reasoning_details), as an
 * input reasoning item is listed.
 */
export function outputAsItems(output: unknown): Json[] {
  if (!Array.isArray(output)) return [];
  return output.filter(isObject).map((item) => {
    if (item.type === "reasoning") return { id: item.id, type: "reasoning", summary: item.summary };
    if (item.type !== "message" || !Array.isArray(item.content)) return item;
    return { ...item, content: item.content.filter(isObject).map(outputContent) };
  });
}

/** A stable id for an item derived from a record that has none (the same response and position, the same id). */
function derivedId(prefix: string, responseId: string, index: number): string {
  return `${prefix}_${createHash("sha256").update(`${responseId}:${index}`).digest("hex").slice(0, 32)}`;
}

/**
 * Items for chat messages, for a response stored by a router from before
 * input items were kept (its record has only the chat conversation): what
 * the chat shape still says, with ids derived from the response id and the
 * position, so that they are the same on every listing. A `developer`
 * message reads as `system` (chat kept no difference), reasoning items the
 * chat path dropped are not there.
 */
export function itemsFromMessages(messages: Json[], responseId: string): Json[] {
  const out: Json[] = [];
  const id = (prefix: string) => derivedId(prefix, responseId, out.length);
  for (const m of messages) {
    if (m.role === "tool") {
      out.push({ id: id("fco"), type: "function_call_output", status: "completed", call_id: text(m.tool_call_id), output: text(m.content) });
    } else if (m.role === "assistant") {
      const calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter(isObject) : [];
      if (typeof m.content === "string" && (m.content !== "" || calls.length === 0)) {
        out.push({ id: id("msg"), type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: m.content, annotations: [] }] });
      }
      for (const c of calls) {
        const fn = isObject(c.function) ? c.function : {};
        out.push({ id: id("fc"), type: "function_call", status: "completed", call_id: text(c.id), name: text(fn.name), arguments: text(fn.arguments) });
      }
    } else {
      const parts = typeof m.content === "string" ? [{ type: "input_text", text: m.content }] : Array.isArray(m.content) ? m.content.filter(isObject).map(chatPartAsInput) : [];
      out.push({ id: id("msg"), type: "message", role: m.role === "user" ? "user" : "system", status: "completed", content: parts });
    }
  }
  return out;
}

function chatPartAsInput(part: Json): Json {
  if (part.type === "image_url" && isObject(part.image_url)) {
    return { type: "input_image", image_url: part.image_url.url, detail: typeof part.image_url.detail === "string" ? part.image_url.detail : "auto" };
  }
  return { type: "input_text", text: text(part.text) };
}
