// Tenant budgets as the router sees them: limit, time zone and alert
// thresholds, cached for billing.refreshMs. No row means no limit (paid
// spend is still counted and ledgered).
import { getBudget, type Db } from "@switchyard/db";
import { TenantCache } from "../tenant-cache.ts";

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

/** Cached for ttlMs (TenantCache: the last budget is used while Postgres fails or is slow). */
export class PostgresBudgets implements BudgetDirectory {
  private readonly cache: TenantCache<TenantBudget | null>;
  constructor(db: Db, ttlMs: number) {
    this.cache = new TenantCache(async (tenantId) => {
      const b = await getBudget(db, tenantId);
      return b ? { limitMicro: b.dailyLimitCents * 1_000_000n, timeZone: b.timeZone, thresholds: [...b.alertThresholds].sort((x, y) => x - y) } : null;
    }, ttlMs);
  }

  async budgetOf(tenantId: number): Promise<TenantBudget | null> {
    return this.cache.get(tenantId);
  }
}
