// Names for a request's long shared prefix — a chat's first message, a
// completion's prompt — scoped to the tenant that sent it. Routers name a
// request's prefix (to route it where its prefix is already cached) and pass
// the name to the worker they send it to, in the body field
// `switchyard_prefix`; workers advertise, in their heartbeats, the names of
// the prefixes their engine recently computed — never computing names
// themselves. The tenant is part of the name, so the same prompt from two
// tenants has two unrelated names: no tenant can learn from a routing
// decision, an x-switchyard-route explanation or a heartbeat that another
// sent that prompt (docs/ROUTING.md, Prefix affinity).
import * as nodeCrypto from "node:crypto";
import { createHash } from "node:crypto";

// crypto.hash (Node ≥ 20.12): one call, no Hash object — 2.5× faster than
// createHash on a short prompt, and every chat request with a long first
// message is named (issue 14); older Node 20s take createHash.
const oneShot = (nodeCrypto as { hash?: (algorithm: string, data: string, encoding: "base64url") => string }).hash;

/** Shorter first messages are cheap to recompute: they get no name. */
export const PREFIX_MIN_CHARS = 100;
/** Characters of the first message that make its name. */
const PREFIX_KEY_CHARS = 4_096;
/** Prefix names a heartbeat carries at most. */
export const MAX_ADVERTISED_PREFIXES = 64;
/** The body field a router names the request's prefix in, for the worker it sends it to (null: none). */
export const PREFIX_NAME_FIELD = "switchyard_prefix";
/** What a prefix name looks like (the record schema takes up to 64 characters). */
const PREFIX_NAME = /^[A-Za-z0-9_-]{16,64}$/;

export type PrefixRoute = "/v1/chat/completions" | "/v1/completions" | string;

/**
 * The name of this request's prefix for this tenant (`scope`: the tenant's
 * id), or undefined when it has none worth caching.
 */
export function prefixKey(path: PrefixRoute, body: Record<string, unknown>, scope: string): string | undefined {
  let text: unknown;
  if (path === "/v1/chat/completions") {
    const first = Array.isArray(body.messages) ? (body.messages[0] as { role?: unknown; content?: unknown } | undefined) : undefined;
    text = first && typeof first.content === "string" ? `${String(first.role)}\u0000${first.content}` : undefined;
  } else if (path === "/v1/completions") {
    text = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
  }
  if (typeof text !== "string" || text.length < PREFIX_MIN_CHARS) return undefined;
  // 16 bytes of SHA-256 is plenty to tell prompts apart and keeps heartbeats
  // small; the scope's length goes first so no (scope, text) pair can be
  // shifted into another.
  // One string, the same bytes as the scope's part and the text hashed one after the other (it ends in NUL: no character is split between them).
  const data = `${scope.length}:${scope}\u0000${text.slice(0, PREFIX_KEY_CHARS)}`;
  return (oneShot ? oneShot("sha256", data, "base64url") : createHash("sha256").update(data).digest("base64url")).slice(0, 22);
}

/** On the worker: the prefix name the router sent with this request, if it sent a well-formed one. */
export function routerPrefixName(body: Record<string, unknown>): string | undefined {
  const name = body[PREFIX_NAME_FIELD];
  return typeof name === "string" && PREFIX_NAME.test(name) ? name : undefined;
}
