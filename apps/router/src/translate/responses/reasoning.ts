// The chat answer's reasoning (OpenRouter's `reasoning` text and
// `reasoning_details`) as a Responses `reasoning` item, and back: its summary
// is the reasoning text; its `encrypted_content` (with include
// "reasoning.encrypted_content") carries the reasoning_details, so a client
// that keeps its own conversation (store: false) sends Claude's signed
// thinking back, as a tool-use turn needs.
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";

/** The include value that asks for a reasoning item's `encrypted_content`. */
export const ENCRYPTED_INCLUDE = "reasoning.encrypted_content";

export const includesEncrypted = (body: Json): boolean => Array.isArray(body.include) && body.include.includes(ENCRYPTED_INCLUDE);

/**
 * What this router's `encrypted_content` starts with: a version, then the
 * base64url JSON of the reasoning_details. Opaque to clients, not
 * encrypted: the router keeps no key and the client already holds the
 * reasoning text. What protects the thinking is the provider's own
 * signature inside each entry, which it checks when the turn comes back.
 */
const MINTED = "swy.rd1.";

export function mintEncryptedContent(details: Json[]): string {
  return MINTED + Buffer.from(JSON.stringify(details), "utf8").toString("base64url");
}

const BASE64URL = /^[A-Za-z0-9_-]*$/;

/**
 * A reasoning item's `encrypted_content` as the reasoning_details this
 * router put in it; undefined when it did not mint it (another provider's
 * reasoning: OpenAI's own encrypted state, or none at all). Minted but
 * unreadable is the client's 400 naming `at`.
 */
export function readEncryptedContent(content: unknown, at: string): Json[] | undefined {
  if (typeof content !== "string" || !content.startsWith(MINTED)) return undefined;
  const body = content.slice(MINTED.length);
  let details: unknown;
  try {
    if (!BASE64URL.test(body)) throw new Error("not base64url");
    details = JSON.parse(Buffer.from(body, "base64url").toString("utf8"));
  } catch {
    details = undefined;
  }
  if (!Array.isArray(details) || !details.every((d) => isObject(d) && typeof d.type === "string")) {
    throw new ApiError("invalid_request", `${at}: is not the reasoning this API returned; send the reasoning item back unmodified`, at);
  }
  return details as Json[];
}

/** Whether a whole chat message carries reasoning: a property check or two, nothing allocated, for the answer that has none. */
export function carriesReasoning(message: Json): boolean {
  return (typeof message.reasoning === "string" && message.reasoning !== "") || (Array.isArray(message.reasoning_details) && message.reasoning_details.length > 0);
}

/** The output item: the summary the reasoning text (none when there is no text), `encrypted_content` only when asked for (null with nothing to carry). */
export function reasoningItem(id: string, text: string, details: Json[], encrypted: boolean): Json {
  const item: Json = { id, type: "reasoning", summary: text === "" ? [] : [{ type: "summary_text", text }] };
  if (encrypted) item.encrypted_content = details.length > 0 ? mintEncryptedContent(details) : null;
  return item;
}

/**
 * An assistant turn (chat) takes a reasoning item's reasoning: its text
 * after any the turn has, its details after the turn's, their indexes moved
 * past them (entries are merged by index on the way to the backend, and two
 * items' entries must not merge).
 */
export function attachReasoning(turn: Json, text: string, details: Json[]): void {
  if (text !== "") turn.reasoning = (typeof turn.reasoning === "string" ? turn.reasoning : "") + text;
  if (details.length === 0) return;
  const had = Array.isArray(turn.reasoning_details) ? (turn.reasoning_details as Json[]) : [];
  if (had.length === 0) {
    turn.reasoning_details = details;
    return;
  }
  const base = had.reduce((n, d) => (typeof d.index === "number" ? Math.max(n, d.index + 1) : n), 0);
  turn.reasoning_details = [...had, ...details.map((d) => (typeof d.index === "number" ? { ...d, index: base + d.index } : d))];
}
