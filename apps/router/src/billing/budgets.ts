// Tenant budgets as the router sees them: limit, time zone and alert
// thresholds, cached for billing.refreshMs. No row means no limit (paid
// spend is still counted and ledgered).
import { getBudget, type Db } from "@switchyard/db";
import { freshOrStale } from "../auth/resolver.ts";

/** How long an expired budget waits for Postgres before the last one is used. */
const STALE_AFTER_MS = 250;

export interface TenantBudget {
  limitMicro: bigint;
  timeZone: string;
  /** Percent of the limit, ascending. */
  thresholds: number[];
}

export interface BudgetDirectory {
  budgetOf(tenantId: number): Promise<TenantBudget | null>;
}

/** In-memory twin. */
export class StaticBudgets implements BudgetDirectory {
  readonly budgets = new Map<number, TenantBudget>();
  async budgetOf(tenantId: number): Promise<TenantBudget | null> {
    return this.budgets.get(tenantId) ?? null;
  }
}

export class PostgresBudgets implements BudgetDirectory {
  private readonly cache = new Map<number, { until: number; value: TenantBudget | null }>();
  private readonly inflight = new Map<number, Promise<TenantBudget | null>>();
  constructor(
    private readonly db: Db,
    private readonly ttlMs: number,
  ) {}

  /**
   * Cached for ttlMs. An expired entry is re-read, but when Postgres fails or
   * is slow the last budget is used (an outage must not stall paid
   * requests); only a tenant never seen before has to wait for Postgres.
   */
  async budgetOf(tenantId: number): Promise<TenantBudget | null> {
    const now = Date.now();
    const hit = this.cache.get(tenantId);
    if (hit && hit.until > now) return hit.value;
    const fresh = this.load(tenantId);
    if (!hit) return fresh;
    const value = await freshOrStale(fresh, hit.value, STALE_AFTER_MS);
    // Don't re-ask a failing Postgres on every request: at most once a second.
    hit.until = Math.max(hit.until, now + Math.min(this.ttlMs, 1_000));
    return value;
  }

  private load(tenantId: number): Promise<TenantBudget | null> {
    let p = this.inflight.get(tenantId);
    if (!p) {
      p = getBudget(this.db, tenantId)
        .then((b) => {
          const value = b ? { limitMicro: b.dailyLimitCents * 1_000_000n, timeZone: b.timeZone, thresholds: [...b.alertThresholds].sort((x, y) => x - y) } : null;
          this.cache.set(tenantId, { until: Date.now() + this.ttlMs, value });
          return value;
        })
        .finally(() => this.inflight.delete(tenantId));
      this.inflight.set(tenantId, p);
    }
    return p;
  }
}
