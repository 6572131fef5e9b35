// API key material: generation and hashing. Keys look like
// `sy_<8 hex prefix>_<43 chars base64url secret>`; only SHA-256(key) is stored.
import * as nodeCrypto from "node:crypto";
import { createHash, randomBytes } from "node:crypto";

// crypto.hash (Node ≥ 20.12): one call, no Hash object; older Node 20s take createHash.
const oneShot = (nodeCrypto as { hash?: (algorithm: string, data: string, encoding: "hex") => string }).hash;

export function hashKey(key: string): string {
  // The router hashes every request's key to find its cache entry.
  return oneShot ? oneShot("sha256", key, "hex") : createHash("sha256").update(key).digest("hex");
}

export function generateKey(): { key: string; prefix: string; hash: string } {
  const prefix = `sy_${randomBytes(4).toString("hex")}`;
  const key = `${prefix}_${randomBytes(32).toString("base64url")}`;
  return { key, prefix, hash: hashKey(key) };
}

/** The visible part of a key, or null when it doesn't look like one of ours. */
export function prefixOf(key: string): string | null {
  const m = /^(sy_[0-9a-f]{8})_[A-Za-z0-9_-]{20,}$/.exec(key);
  return m ? m[1]! : null;
}
