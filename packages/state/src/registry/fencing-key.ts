// Signed fencing tokens. Routers sign each lease fencing token they forward
// with an Ed25519 key derived from workers.secretKey, over the worker's id and
// the token; a worker given the public key (its --fencing-key) accepts a token
// only with a valid signature for its own id. So only a router — which
// forwards only tokens Postgres issued — can raise a worker's highest token:
// not a party that learned the worker's call secret, nor another worker
// replaying a token signed for itself.
import { createHmac, createPrivateKey, createPublicKey, sign, verify, type KeyObject } from "node:crypto";

export const FENCING_SIGNATURE_HEADER = "x-switchyard-fencing-signature";
/**
 * The worker a fencing token belongs to, when it is not the one the request
 * is sent to: a lease on a shard after a split model's head, whose token the
 * head checks on that shard's behalf (its signature is for that worker's id).
 */
export const FENCING_WORKER_HEADER = "x-switchyard-fencing-worker";

// PKCS#8 DER of an Ed25519 private key, up to the 32-byte seed (RFC 8410).
const PKCS8_ED25519_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");
// SPKI DER of an Ed25519 public key, up to the 32 raw bytes.
const SPKI_ED25519_PREFIX = Buffer.from("302a300506032b6570032100", "hex");

function message(workerId: string, token: number | string): Buffer {
  return Buffer.from(`switchyard:fencing:v1:${workerId}:${token}`);
}

/** The routers' signing key, the same on every router holding `secretKey`. */
export function fencingSigningKey(secretKey: string): KeyObject {
  const seed = createHmac("sha256", secretKey).update("switchyard:fencing-signing").digest();
  return createPrivateKey({ key: Buffer.concat([PKCS8_ED25519_PREFIX, seed]), format: "der", type: "pkcs8" });
}

/** The public half, base64url of the 32 raw bytes: what `workers invite` prints as --fencing-key. */
export function fencingPublicKey(secretKey: string): string {
  const der = createPublicKey(fencingSigningKey(secretKey)).export({ format: "der", type: "spki" });
  return der.subarray(SPKI_ED25519_PREFIX.length).toString("base64url");
}

/** Parses a --fencing-key; throws on anything but 32 base64url bytes. */
export function parseFencingPublicKey(text: string): KeyObject {
  const raw = Buffer.from(text, "base64url");
  if (raw.length !== 32 || raw.toString("base64url") !== text.replace(/=+$/, "")) throw new Error("fencing key must be 32 bytes, base64url (printed by 'switchyard workers invite')");
  return createPublicKey({ key: Buffer.concat([SPKI_ED25519_PREFIX, raw]), format: "der", type: "spki" });
}

export function signFencingToken(key: KeyObject, workerId: string, token: number): string {
  return sign(null, message(workerId, token), key).toString("base64url");
}

export function verifyFencingToken(key: KeyObject, workerId: string, token: number, signature: string | undefined | null): boolean {
  if (!signature || !/^[A-Za-z0-9_-]{86}$/.test(signature)) return false;
  return verify(null, message(workerId, token), key, Buffer.from(signature, "base64url"));
}

/** Signs for a router, caching the last signature per worker (a lease's requests all carry one token). */
export class FencingSigner {
  private readonly key: KeyObject;
  private readonly last = new Map<string, { token: number; signature: string }>();
  constructor(secretKey: string) {
    this.key = fencingSigningKey(secretKey);
  }
  sign(workerId: string, token: number): string {
    const hit = this.last.get(workerId);
    if (hit?.token === token) return hit.signature;
    const signature = signFencingToken(this.key, workerId, token);
    if (this.last.size >= 4096) this.last.clear();
    this.last.set(workerId, { token, signature });
    return signature;
  }
}
