// Names for a request's long shared prefix — a chat's first message, a
// completion's prompt — computed the same way by routers (to route a request
// where its prefix is already cached) and by workers (to advertise, in their
// heartbeats, the prefixes their engine has recently computed).
import { createHash } from "node:crypto";

/** Shorter first messages are cheap to recompute: they get no name. */
export const PREFIX_MIN_CHARS = 100;
/** Characters of the first message that make its name. */
const PREFIX_KEY_CHARS = 4_096;
/** Prefix names a heartbeat carries at most. */
export const MAX_ADVERTISED_PREFIXES = 64;

export type PrefixRoute = "/v1/chat/completions" | "/v1/completions" | string;

/** The name of this request's prefix, or undefined when it has none worth caching. */
export function prefixKey(path: PrefixRoute, body: Record<string, unknown>): string | undefined {
  let text: unknown;
  if (path === "/v1/chat/completions") {
    const first = Array.isArray(body.messages) ? (body.messages[0] as { role?: unknown; content?: unknown } | undefined) : undefined;
    text = first && typeof first.content === "string" ? `${String(first.role)}\u0000${first.content}` : undefined;
  } else if (path === "/v1/completions") {
    text = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
  }
  if (typeof text !== "string" || text.length < PREFIX_MIN_CHARS) return undefined;
  // 16 bytes of SHA-1 is plenty to tell prompts apart and keeps heartbeats small.
  return createHash("sha1").update(text.slice(0, PREFIX_KEY_CHARS)).digest("base64url").slice(0, 22);
}
