// Tenant budgets as the router sees them: limit, time zone and alert
// thresholds, cached for billing.refreshMs. No row means no limit (paid
// spend is still counted and ledgered).
import { getBudget, type Db } from "@switchyard/db";

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
  private readonly cache = new Map<number, { at: number; value: Promise<TenantBudget | null> }>();
  constructor(
    private readonly db: Db,
    private readonly ttlMs: number,
  ) {}

  budgetOf(tenantId: number): Promise<TenantBudget | null> {
    const now = Date.now();
    const hit = this.cache.get(tenantId);
    if (hit && now - hit.at < this.ttlMs) return hit.value;
    const value = getBudget(this.db, tenantId).then(
      (b) =>
        b
          ? { limitMicro: b.dailyLimitCents * 1_000_000n, timeZone: b.timeZone, thresholds: [...b.alertThresholds].sort((x, y) => x - y) }
          : null,
      (err: unknown) => {
        // Postgres down: a stale budget beats no budget; no budget at all fails the request.
        this.cache.delete(tenantId);
        if (hit) return hit.value;
        throw err;
      },
    );
    this.cache.set(tenantId, { at: now, value });
    return value;
  }
}
