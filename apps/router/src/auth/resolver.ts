// Resolves a bearer key to its tenant with a short-lived cache: a revoked key
// stops working within keyCacheMs. Negative answers are cached too, so a
// flood of bad keys doesn't become a flood of Postgres queries. An expired
// entry is re-read, but a key seen before keeps its last answer when
// Postgres fails or is slow, so a database outage does not stop serving. An
// entry in use is re-read in the background from 3/4 of its ttl on, so a key
// in steady use never waits for Postgres (with the 2 s default, a request
// every 2 s per key did, in its time to first token).
//
// Before any of that, a string that is not shaped like a key (sy_<8 hex>_
// <secret>) is refused without a lookup: bearer garbage costs no query. At
// the cache's bound the unknown keys' entries go first, then the oldest: a
// flood of made-up keys cannot push real tenants' keys out (it cleared the
// whole cache, and every real key then waited for Postgres).
import { hashKey, prefixOf } from "@switchyard/db";
import type { KeyOwner, KeyStore } from "./key-store.ts";

/** How long an expired entry waits for Postgres before the last answer is used. */
const STALE_AFTER_MS = 250;

/** Longer than any key generateKey makes (55 characters), with room for other secret lengths prefixOf takes. */
const MAX_KEY_CHARS = 256;

/** Share of the ttl after which a hit starts a background re-read. */
const REFRESH_AHEAD = 0.75;

/** The fresh value if it arrives within `ms`, else (or on failure) the stale one. */
export function freshOrStale<T>(fresh: Promise<T>, stale: T, ms: number): Promise<T> {
  return new Promise<T>((resolve) => {
    const t = setTimeout(() => resolve(stale), ms);
    fresh.then(
      (v) => {
        clearTimeout(t);
        resolve(v);
      },
      () => {
        clearTimeout(t);
        resolve(stale);
      },
    );
  });
}

export class KeyResolver {
  private readonly cache = new Map<string, { owner: KeyOwner | undefined; until: number; refreshAt: number }>();
  /** Keys whose entry is being re-read in the background (one read per key at a time). */
  private readonly refreshing = new Set<string>();
  private readonly pendingTouch = new Set<number>();
  private readonly lastTouched = new Map<number, number>();
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: KeyStore,
    private readonly ttlMs: number,
    private readonly maxEntries = 100_000,
  ) {}

  /** A key in the cache is answered as it is, not as a promise (every request asks); a miss or an expired entry waits for Postgres. */
  resolve(key: string): KeyOwner | undefined | Promise<KeyOwner | undefined> {
    // Keys are 55 characters: a long bearer is not hashed at all.
    if (key.length > MAX_KEY_CHARS) return undefined;
    const hash = hashKey(key);
    const now = Date.now();
    const hit = this.cache.get(hash);
    if (hit && hit.until > now) {
      const owner = hit.owner;
      if (hit.refreshAt <= now && !this.refreshing.has(hash)) {
        this.refreshing.add(hash);
        this.refresh(hash)
          // A failed background read keeps the entry as it was and is tried again at most once a second.
          .catch(() => (hit.refreshAt = Date.now() + Math.min(this.ttlMs, 1_000)))
          .finally(() => this.refreshing.delete(hash));
      }
      if (owner && !owner.revoked) this.noteUse(owner.keyId, now);
      return owner;
    }
    // Only keys shaped like ours are looked up (a cached entry was: not checked again per request).
    if (!hit && prefixOf(key) === null) return undefined;
    return this.reread(hash, hit, now);
  }

  private async reread(hash: string, hit: { owner: KeyOwner | undefined; until: number; refreshAt: number } | undefined, now: number): Promise<KeyOwner | undefined> {
    let owner: KeyOwner | undefined;
    if (hit) {
      // Expired: re-read, but if Postgres fails or is slow, answer from the
      // last lookup — an outage must not take serving down. A revocation
      // still takes effect within the TTL whenever Postgres answers.
      owner = await freshOrStale(this.refresh(hash), hit.owner, STALE_AFTER_MS);
      hit.until = Math.max(hit.until, now + Math.min(this.ttlMs, 1_000));
      hit.refreshAt = hit.until;
    } else {
      owner = await this.refresh(hash);
    }
    if (owner && !owner.revoked) this.noteUse(owner.keyId, now);
    return owner;
  }

  private async refresh(hash: string): Promise<KeyOwner | undefined> {
    const owner = await this.store.lookup(hash);
    if (this.cache.size >= this.maxEntries && !this.cache.has(hash)) this.makeRoom();
    const at = Date.now();
    this.cache.set(hash, { owner, until: at + this.ttlMs, refreshAt: at + this.ttlMs * REFRESH_AHEAD });
    return owner;
  }

  /** At the bound: every unknown key's entry goes, and then the oldest tenth if that was not enough. */
  private makeRoom(): void {
    for (const [hash, entry] of this.cache) if (entry.owner === undefined) this.cache.delete(hash);
    if (this.cache.size < this.maxEntries) return;
    let drop = Math.max(1, Math.ceil(this.maxEntries / 10));
    for (const hash of this.cache.keys()) {
      if (drop-- <= 0) break;
      this.cache.delete(hash);
    }
  }

  /** last_used_at is written at most once a minute per key, batched. */
  private noteUse(keyId: number, now: number): void {
    if (now - (this.lastTouched.get(keyId) ?? 0) < 60_000) return;
    this.lastTouched.set(keyId, now);
    this.pendingTouch.add(keyId);
    this.flushTimer ??= setTimeout(() => void this.flush(), 1_000);
    this.flushTimer.unref?.();
  }

  async flush(): Promise<void> {
    this.flushTimer = undefined;
    const ids = [...this.pendingTouch];
    this.pendingTouch.clear();
    if (ids.length > 0) await this.store.touch(ids).catch(() => {});
  }
}
