// Fencing: a lease holder's requests carry the lease's token
// (x-switchyard-fencing-token); tokens only grow, so a request with a token
// older than one this worker already accepted comes from a lease that has been
// superseded (a paused client, a router with a stale view) and is refused.
// The highest token lives in this process only: a restarted worker starts
// from zero again (see docs/LEASES.md). Requests without a token pass.
export const FENCING_HEADER = "x-switchyard-fencing-token";

export type FencingVerdict =
  | { ok: true; token?: number }
  | { ok: false; status: 400 | 409; code: "invalid_fencing_token" | "stale_fencing_token"; message: string };

export class FencingGuard {
  /** The highest token accepted so far (0: none yet). */
  highest = 0;
  accepted = 0;
  refused = 0;

  /** Checks and records in one synchronous step (nothing can interleave). */
  admit(header: string | undefined | null): FencingVerdict {
    if (header === undefined || header === null) return { ok: true };
    if (!/^[1-9]\d{0,15}$/.test(header)) {
      return { ok: false, status: 400, code: "invalid_fencing_token", message: `${FENCING_HEADER} must be a positive integer` };
    }
    const token = Number(header);
    if (!Number.isSafeInteger(token)) {
      return { ok: false, status: 400, code: "invalid_fencing_token", message: `${FENCING_HEADER} must be below 2^53` };
    }
    if (token < this.highest) {
      this.refused++;
      return {
        ok: false,
        status: 409,
        code: "stale_fencing_token",
        message: `fencing token ${token} is older than ${this.highest}, already seen by this worker: the lease was superseded`,
      };
    }
    this.highest = token;
    this.accepted++;
    return { ok: true, token };
  }
}
