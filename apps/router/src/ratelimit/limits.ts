// Tenants' rate limits as a router sees them: the tenant-wide row and its
// keys' rows (`switchyard limits set`), cached for rateLimits.refreshMs.
// No row: no limit, and nothing is counted in Redis.
import { tenantRateLimits, type Db } from "@switchyard/db";
import { TenantCache } from "../tenant-cache.ts";

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
  /** A cached answer comes as it is (not a promise): it is asked on every request. */
  limitsOf(tenantId: number): TenantRateLimits | null | Promise<TenantRateLimits | null>;
}

/** In-memory twin (unit tests, single-machine defaults). */
export class StaticRateLimits implements RateLimitDirectory {
  readonly limits = new Map<number, TenantRateLimits>();
  limitsOf(tenantId: number): TenantRateLimits | null {
    return this.limits.get(tenantId) ?? null;
  }
}

const rule = (rpm: number | null, tpm: number | null): RateRule | undefined =>
  rpm === null && tpm === null ? undefined : { ...(rpm !== null ? { requests: rpm } : {}), ...(tpm !== null ? { tokens: tpm } : {}) };

/** Cached for ttlMs (TenantCache: the last limits are used while Postgres fails or is slow; only a tenant never seen waits). */
export class PostgresRateLimits implements RateLimitDirectory {
  private readonly cache: TenantCache<TenantRateLimits | null>;
  constructor(db: Db, ttlMs: number) {
    this.cache = new TenantCache(async (tenantId) => {
      let value: TenantRateLimits | null = null;
      for (const r of await tenantRateLimits(db, tenantId)) {
        const x = rule(r.requestsPerMinute, r.tokensPerMinute);
        if (!x) continue;
        value ??= { keys: new Map() };
        if (r.keyPrefix === "") value.tenant = x;
        else value.keys.set(r.keyPrefix, x);
      }
      return value;
    }, ttlMs);
  }

  limitsOf(tenantId: number): TenantRateLimits | null | Promise<TenantRateLimits | null> {
    return this.cache.get(tenantId);
  }
}
