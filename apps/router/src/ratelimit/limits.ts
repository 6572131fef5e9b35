// Tenants' rate limits as a router sees them: the tenant-wide row and its
// keys' rows (`switchyard limits set`), cached for rateLimits.refreshMs.
// No row: no limit, and nothing is counted in Redis.
import { tenantRateLimits, type Db } from "@switchyard/db";
import { freshOrStale } from "../auth/resolver.ts";

/** How long an expired entry waits for Postgres before the last one is used. */
const STALE_AFTER_MS = 250;

export interface RateRule {
  requests?: number;
  tokens?: number;
}

export interface TenantRateLimits {
  tenant?: RateRule;
  /** By key prefix (sy_…). */
  keys: Map<string, RateRule>;
}

export interface RateLimitDirectory {
  /** The tenant's limits, or null when it has none at all (the common case: no Redis call). */
  limitsOf(tenantId: number): Promise<TenantRateLimits | null>;
}

/** In-memory twin (unit tests, single-machine defaults). */
export class StaticRateLimits implements RateLimitDirectory {
  readonly limits = new Map<number, TenantRateLimits>();
  async limitsOf(tenantId: number): Promise<TenantRateLimits | null> {
    return this.limits.get(tenantId) ?? null;
  }
}

const rule = (rpm: number | null, tpm: number | null): RateRule | undefined =>
  rpm === null && tpm === null ? undefined : { ...(rpm !== null ? { requests: rpm } : {}), ...(tpm !== null ? { tokens: tpm } : {}) };

export class PostgresRateLimits implements RateLimitDirectory {
  private readonly cache = new Map<number, { until: number; value: TenantRateLimits | null }>();
  private readonly inflight = new Map<number, Promise<TenantRateLimits | null>>();
  constructor(
    private readonly db: Db,
    private readonly ttlMs: number,
  ) {}

  /** Cached; when Postgres fails or is slow the last value is used (only a tenant never seen waits). */
  async limitsOf(tenantId: number): Promise<TenantRateLimits | null> {
    const now = Date.now();
    const hit = this.cache.get(tenantId);
    if (hit && hit.until > now) return hit.value;
    const fresh = this.load(tenantId);
    if (!hit) return fresh;
    const value = await freshOrStale(fresh, hit.value, STALE_AFTER_MS);
    hit.until = Math.max(hit.until, now + Math.min(this.ttlMs, 1_000));
    return value;
  }

  private load(tenantId: number): Promise<TenantRateLimits | null> {
    let p = this.inflight.get(tenantId);
    if (!p) {
      p = tenantRateLimits(this.db, tenantId)
        .then((rows) => {
          let value: TenantRateLimits | null = null;
          for (const r of rows) {
            const x = rule(r.requestsPerMinute, r.tokensPerMinute);
            if (!x) continue;
            value ??= { keys: new Map() };
            if (r.keyPrefix === "") value.tenant = x;
            else value.keys.set(r.keyPrefix, x);
          }
          if (this.cache.size >= 100_000) this.cache.clear();
          this.cache.set(tenantId, { until: Date.now() + this.ttlMs, value });
          return value;
        })
        .finally(() => this.inflight.delete(tenantId));
      this.inflight.set(tenantId, p);
    }
    return p;
  }
}
