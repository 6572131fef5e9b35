// Stored responses: what a response keeps so that any router can continue it
// (previous_response_id) or answer GET /v1/responses/{id} and its
// input_items — the response object, its whole conversation as chat
// messages, and its input items with their ids (both without instructions,
// which a continuation does not inherit). Per tenant, with the configured TTL.
import { RESPONSE_ID, type ResponseStore } from "@switchyard/state";
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";
import { itemsFromMessages, outputAsItems } from "./items.ts";

export interface StoredResponse {
  response: Json;
  /**
   * The conversation up to and including this response's output, as chat
   * messages; null when it passed responses.maxConversationBytes with this
   * answer (kept for GET, not to be continued: a continuation would be
   * refused anyway, and an upstream's long answer is not stored twice).
   */
  messages: Json[] | null;
  /**
   * Its input items in the Responses shape, with ids (items.ts): those of
   * the response it continues, that response's output, then its own input —
   * the conversation before its output. Kept beside `messages` (the chat
   * shape a continuation runs) so the ids a listing hands out stay the same;
   * bounded like them by responses.maxConversationBytes (create.ts).
   * Absent from records written by routers from before it existed.
   */
  items?: Json[];
}

/**
 * The response's input items: as stored, or for a record without them
 * (an older router's) derived from its chat conversation less its last turn,
 * which is its own output — none when that conversation was not kept.
 */
export function storedInputItems(stored: StoredResponse): Json[] {
  if (stored.items) return stored.items;
  return stored.messages ? itemsFromMessages(stored.messages.slice(0, -1), String(stored.response.id)) : [];
}

/** What a continuation of `previous` lists before its own input: the previous input items, then the previous output. */
export function historyItems(previous: StoredResponse): Json[] {
  return [...storedInputItems(previous), ...outputAsItems(previous.response.output)];
}

const notFound = (id: string, param: string | null) => new ApiError("not_found", `Response with id '${id}' not found.`, param);

/** The tenant's stored response, or a 404 (another tenant's id, an expired or unknown one, a malformed one). */
export async function loadResponse(store: ResponseStore, tenantId: number, id: string, param: string | null = null): Promise<StoredResponse> {
  if (!RESPONSE_ID.test(id)) throw notFound(id.slice(0, 80), param);
  let text: string | undefined;
  try {
    text = await store.get(tenantId, id);
  } catch {
    throw new ApiError("response_store_unavailable", "stored responses cannot be read right now; retry shortly", param);
  }
  if (text === undefined) throw notFound(id, param);
  const stored = JSON.parse(text) as StoredResponse;
  if (!isObject(stored.response) || !(Array.isArray(stored.messages) || stored.messages === null) || !(stored.items === undefined || Array.isArray(stored.items))) throw notFound(id, param);
  return stored;
}

export async function saveResponse(store: ResponseStore, tenantId: number, stored: StoredResponse, ttlS: number): Promise<void> {
  await store.put(tenantId, String(stored.response.id), JSON.stringify(stored), ttlS * 1000);
}
