// Resolves a bearer key to its tenant with a short-lived cache: a revoked key
// stops working within keyCacheMs. Negative answers are cached too, so a
// flood of bad keys doesn't become a flood of Postgres queries.
import { hashKey } from "@switchyard/db";
import type { KeyOwner, KeyStore } from "./key-store.ts";

export class KeyResolver {
  private readonly cache = new Map<string, { owner: KeyOwner | undefined; until: number }>();
  private readonly pendingTouch = new Set<number>();
  private readonly lastTouched = new Map<number, number>();
  private flushTimer: NodeJS.Timeout | undefined;

  constructor(
    private readonly store: KeyStore,
    private readonly ttlMs: number,
    private readonly maxEntries = 100_000,
  ) {}

  async resolve(key: string): Promise<KeyOwner | undefined> {
    const hash = hashKey(key);
    const now = Date.now();
    const hit = this.cache.get(hash);
    let owner: KeyOwner | undefined;
    if (hit && hit.until > now) owner = hit.owner;
    else {
      owner = await this.store.lookup(hash);
      if (this.cache.size >= this.maxEntries) this.cache.clear();
      this.cache.set(hash, { owner, until: now + this.ttlMs });
    }
    if (owner && !owner.revoked) this.noteUse(owner.keyId, now);
    return owner;
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
