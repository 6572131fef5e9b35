// A per-tenant value read from Postgres and cached for ttlMs: what budgets
// (billing/budgets.ts) and rate limits (ratelimit/limits.ts) share. An entry
// in use is re-read in the background from 3/4 of its ttl on, so a tenant
// with steady traffic never waits for Postgres (rate limits sit in front of
// every request: a wait there was a wait in every request's first token) and
// a change still shows within ttlMs. An expired entry is re-read, but when
// Postgres fails or is slow the last value is used (an outage must not stall
// requests); only a tenant never seen before has to wait for Postgres. One
// read per tenant at a time.
import { freshOrStale } from "./auth/resolver.ts";

/** How long an expired entry waits for Postgres before the last one is used. */
const STALE_AFTER_MS = 250;

/** Share of the ttl after which a hit starts a background re-read. */
const REFRESH_AHEAD = 0.75;

export class TenantCache<V> {
  private readonly cache = new Map<number, { until: number; refreshAt: number; value: V }>();
  private readonly inflight = new Map<number, Promise<V>>();

  constructor(
    private readonly read: (tenantId: number) => Promise<V>,
    private readonly ttlMs: number,
    /** Entries kept at most: made-up tenant ids can't grow the router's memory without limit. */
    private readonly maxEntries = 100_000,
  ) {}

  /** A fresh entry is answered as it is, not as a promise: this sits in front of every request (rate limits). */
  get(tenantId: number): V | Promise<V> {
    const now = Date.now();
    const hit = this.cache.get(tenantId);
    if (hit && hit.until > now) {
      if (hit.refreshAt <= now && !this.inflight.has(tenantId)) {
        // A failed background read keeps the entry as it was and is tried again at most once a second.
        this.load(tenantId).catch(() => {
          hit.refreshAt = Date.now() + Math.min(this.ttlMs, 1_000);
        });
      }
      return hit.value;
    }
    const fresh = this.load(tenantId);
    if (!hit) return fresh;
    return this.staleOr(fresh, hit, now);
  }

  private async staleOr(fresh: Promise<V>, hit: { until: number; refreshAt: number; value: V }, now: number): Promise<V> {
    const value = await freshOrStale(fresh, hit.value, STALE_AFTER_MS);
    // Don't re-ask a failing Postgres on every request: at most once a second.
    hit.until = Math.max(hit.until, now + Math.min(this.ttlMs, 1_000));
    hit.refreshAt = hit.until;
    return value;
  }

  private load(tenantId: number): Promise<V> {
    let p = this.inflight.get(tenantId);
    if (!p) {
      p = this.read(tenantId)
        .then((value) => {
          if (this.cache.size >= this.maxEntries) this.cache.clear();
          const now = Date.now();
          this.cache.set(tenantId, { until: now + this.ttlMs, refreshAt: now + this.ttlMs * REFRESH_AHEAD, value });
          return value;
        })
        .finally(() => this.inflight.delete(tenantId));
      this.inflight.set(tenantId, p);
    }
    return p;
  }
}
