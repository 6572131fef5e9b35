// Fencing: a lease holder's requests carry the lease's token
// (x-switchyard-fencing-token); tokens only grow, so a request with a token
// older than one this worker already accepted comes from a lease that has been
// superseded (a paused client, a router with a stale view) and is refused.
// With a state file, the highest token survives a restart of the worker
// process: it is written (atomically, before the request is admitted) each
// time it grows, which happens once per lease, not per request. Requests
// without a token pass. With the routers' fencing key (invited workers), a
// token counts only with a router's signature for this worker's id
// (registry/fencing-key.ts): whoever else reaches the worker, even with its
// call secret, cannot push its highest token up and lock out real leases.
// A shard of a split model runs the same guard on the token a sequence opens
// with (ShardOpen.fence, shard/server.ts): one state per worker, whichever
// way its requests come.
import { mkdirSync, readFileSync, renameSync, writeFileSync } from "node:fs";
import type { KeyObject } from "node:crypto";
import path from "node:path";
import { FENCING_SIGNATURE_HEADER, parseFencingPublicKey, verifyFencingToken } from "@switchyard/state";

export const FENCING_HEADER = "x-switchyard-fencing-token";
export { FENCING_SIGNATURE_HEADER };

export type FencingVerdict =
  | { ok: true; token?: number }
  | { ok: false; status: 400 | 403 | 409; code: "invalid_fencing_token" | "stale_fencing_token" | "unsigned_fencing_token"; message: string };

/** Who this worker is and the routers' public fencing key (the join command's --fencing-key). */
export interface FencingKey {
  workerId: string;
  publicKey: string;
}

/** The token a header carries (none without the header), or why it is no token (400). */
export function parseFencingToken(header: string | undefined | null): FencingVerdict {
  if (header === undefined || header === null) return { ok: true };
  if (!/^[1-9]\d{0,15}$/.test(header)) {
    return { ok: false, status: 400, code: "invalid_fencing_token", message: `${FENCING_HEADER} must be a positive integer` };
  }
  const token = Number(header);
  if (!Number.isSafeInteger(token)) {
    return { ok: false, status: 400, code: "invalid_fencing_token", message: `${FENCING_HEADER} must be below 2^53` };
  }
  return { ok: true, token };
}

export class FencingGuard {
  /** The highest token accepted so far (0: none yet). */
  highest = 0;
  accepted = 0;
  refused = 0;

  private readonly verifier: { workerId: string; key: KeyObject } | undefined;

  /** The worker id tokens must be signed for (with the routers' key). */
  get workerId(): string | undefined {
    return this.verifier?.workerId;
  }
  /** The last signature verified, so a lease's requests (one token) cost one verification. */
  private lastSigned: { token: number; signature: string } | undefined;

  /**
   * `statePath`: where the highest token is kept across restarts (none: in
   * this process only); `key`: require routers' signatures on tokens.
   */
  constructor(
    private readonly statePath?: string,
    key?: FencingKey,
  ) {
    this.verifier = key ? { workerId: key.workerId, key: parseFencingPublicKey(key.publicKey) } : undefined;
    if (!statePath) return;
    let text: string;
    try {
      text = readFileSync(statePath, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
      throw err;
    }
    const n = Number(text.trim());
    // A damaged file must not silently reopen the door to old tokens.
    if (!Number.isSafeInteger(n) || n < 0) throw new Error(`fencing state ${statePath} is unreadable (${JSON.stringify(text.slice(0, 40))}); delete it only if no lease can be outstanding`);
    this.highest = n;
  }

  private persist(token: number): void {
    if (!this.statePath) return;
    mkdirSync(path.dirname(this.statePath), { recursive: true });
    const tmp = `${this.statePath}.${process.pid}.tmp`;
    writeFileSync(tmp, `${token}\n`);
    renameSync(tmp, this.statePath);
  }

  /** Checks and records in one synchronous step (nothing can interleave). */
  admit(header: string | undefined | null, signature?: string | null): FencingVerdict {
    const parsed = parseFencingToken(header);
    if (!parsed.ok || parsed.token === undefined) return parsed;
    const token = parsed.token;
    if (this.verifier && !(this.lastSigned?.token === token && this.lastSigned.signature === signature)) {
      if (!verifyFencingToken(this.verifier.key, this.verifier.workerId, token, signature)) {
        this.refused++;
        return { ok: false, status: 403, code: "unsigned_fencing_token", message: `${FENCING_HEADER} needs a router's ${FENCING_SIGNATURE_HEADER} for worker '${this.verifier.workerId}'` };
      }
      this.lastSigned = { token, signature: signature! };
    }
    if (token < this.highest) {
      this.refused++;
      return {
        ok: false,
        status: 409,
        code: "stale_fencing_token",
        message: `fencing token ${token} is older than ${this.highest}, already seen by this worker: the lease was superseded${
          this.statePath ? ` (if this fabric's state was reset, delete ${this.statePath})` : ""
        }`,
      };
    }
    if (token > this.highest) {
      // Durable before the request runs: a crash right after cannot forget it.
      this.persist(token);
      this.highest = token;
    }
    this.accepted++;
    return { ok: true, token };
  }
}
