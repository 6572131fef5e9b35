// Budget, price and alert queries: what `switchyard budgets|prices` write and
// what routers read (through their caches) on the request path.
import { and, asc, desc, eq, lte, sql } from "drizzle-orm";
import type { Db } from "./client.ts";
import type { TokenPrice } from "./money.ts";
import { budgetAlerts, budgets, prices, tenants, type Budget, type Price } from "./schema/index.ts";

export interface BudgetInput {
  tenantId: number;
  dailyLimitCents: bigint;
  /** IANA zone; unchanged when omitted on an existing budget (UTC for a new one). */
  timeZone?: string;
  /** Percentages; unchanged when omitted on an existing budget ({80,100} for a new one). */
  alertThresholds?: number[];
}

/** Creates or replaces a tenant's budget. */
export async function setBudget(db: Db, input: BudgetInput): Promise<Budget> {
  const set: Partial<Budget> = { dailyLimitCents: input.dailyLimitCents, updatedAt: new Date() };
  if (input.timeZone) set.timeZone = input.timeZone;
  if (input.alertThresholds) set.alertThresholds = input.alertThresholds;
  const rows = await db
    .insert(budgets)
    .values({
      tenantId: input.tenantId,
      dailyLimitCents: input.dailyLimitCents,
      ...(input.timeZone ? { timeZone: input.timeZone } : {}),
      ...(input.alertThresholds ? { alertThresholds: input.alertThresholds } : {}),
    })
    .onConflictDoUpdate({ target: budgets.tenantId, set })
    .returning();
  return rows[0]!;
}

export async function getBudget(db: Db, tenantId: number): Promise<Budget | undefined> {
  const rows = await db.select().from(budgets).where(eq(budgets.tenantId, tenantId)).limit(1);
  return rows[0];
}

/** Removes the budget: the tenant's paid inference is unlimited again. */
export async function deleteBudget(db: Db, tenantId: number): Promise<boolean> {
  const rows = await db.delete(budgets).where(eq(budgets.tenantId, tenantId)).returning({ tenantId: budgets.tenantId });
  return rows.length > 0;
}

export async function listBudgets(db: Db) {
  return db
    .select({
      tenantId: budgets.tenantId,
      tenantName: tenants.name,
      dailyLimitCents: budgets.dailyLimitCents,
      timeZone: budgets.timeZone,
      alertThresholds: budgets.alertThresholds,
      updatedAt: budgets.updatedAt,
    })
    .from(budgets)
    .innerJoin(tenants, eq(tenants.id, budgets.tenantId))
    .orderBy(asc(tenants.name));
}

export interface PriceInput {
  backend: string;
  model: string;
  inputMicroPerMtok: bigint;
  outputMicroPerMtok: bigint;
  cachedInputMicroPerMtok?: bigint | null;
  cacheWriteMicroPerMtok?: bigint | null;
  cacheWrite1hMicroPerMtok?: bigint | null;
  audioInputMicroPerMtok?: bigint | null;
  imageTokenMultiplierPermille?: number | null;
  /** The long-context tier: the threshold, long input and long output set together or not at all (the prices_long_context check). */
  longContextThresholdTokens?: number | null;
  longInputMicroPerMtok?: bigint | null;
  longOutputMicroPerMtok?: bigint | null;
  longCachedInputMicroPerMtok?: bigint | null;
  longCacheWriteMicroPerMtok?: bigint | null;
  longCacheWrite1hMicroPerMtok?: bigint | null;
  effectiveFrom?: Date;
}

/** Adds a price row (a new price never rewrites an old one: past requests stay re-priceable). */
export async function setPrice(db: Db, input: PriceInput): Promise<Price> {
  const rates = {
    inputMicroPerMtok: input.inputMicroPerMtok,
    outputMicroPerMtok: input.outputMicroPerMtok,
    cachedInputMicroPerMtok: input.cachedInputMicroPerMtok ?? null,
    cacheWriteMicroPerMtok: input.cacheWriteMicroPerMtok ?? null,
    cacheWrite1hMicroPerMtok: input.cacheWrite1hMicroPerMtok ?? null,
    audioInputMicroPerMtok: input.audioInputMicroPerMtok ?? null,
    imageTokenMultiplierPermille: input.imageTokenMultiplierPermille ?? null,
    longContextThresholdTokens: input.longContextThresholdTokens ?? null,
    longInputMicroPerMtok: input.longInputMicroPerMtok ?? null,
    longOutputMicroPerMtok: input.longOutputMicroPerMtok ?? null,
    longCachedInputMicroPerMtok: input.longCachedInputMicroPerMtok ?? null,
    longCacheWriteMicroPerMtok: input.longCacheWriteMicroPerMtok ?? null,
    longCacheWrite1hMicroPerMtok: input.longCacheWrite1hMicroPerMtok ?? null,
  };
  const rows = await db
    .insert(prices)
    .values({ backend: input.backend, model: input.model, ...rates, effectiveFrom: input.effectiveFrom ?? new Date() })
    // Same instant twice: the later call wins (a typo fixed at once).
    .onConflictDoUpdate({ target: [prices.backend, prices.model, prices.effectiveFrom], set: rates })
    .returning();
  return rows[0]!;
}

/**
 * A price row as money.ts prices with it: its flat rates, and its long_*
 * columns as the long-context tier. Every row that prices a request goes
 * through here — a row passed as a TokenPrice as it is would lose its tier.
 */
export function tokenPriceOf(p: Price): TokenPrice {
  return {
    inputMicroPerMtok: p.inputMicroPerMtok,
    outputMicroPerMtok: p.outputMicroPerMtok,
    cachedInputMicroPerMtok: p.cachedInputMicroPerMtok,
    cacheWriteMicroPerMtok: p.cacheWriteMicroPerMtok,
    cacheWrite1hMicroPerMtok: p.cacheWrite1hMicroPerMtok,
    audioInputMicroPerMtok: p.audioInputMicroPerMtok,
    imageTokenMultiplierPermille: p.imageTokenMultiplierPermille,
    longContext:
      p.longContextThresholdTokens === null || p.longInputMicroPerMtok === null || p.longOutputMicroPerMtok === null
        ? null
        : {
            thresholdTokens: p.longContextThresholdTokens,
            inputMicroPerMtok: p.longInputMicroPerMtok,
            outputMicroPerMtok: p.longOutputMicroPerMtok,
            cachedInputMicroPerMtok: p.longCachedInputMicroPerMtok,
            cacheWriteMicroPerMtok: p.longCacheWriteMicroPerMtok,
            cacheWrite1hMicroPerMtok: p.longCacheWrite1hMicroPerMtok,
          },
  };
}

/** Every price row in force now or scheduled, newest first per backend × model. */
export async function listPrices(db: Db): Promise<Price[]> {
  return db.select().from(prices).orderBy(asc(prices.backend), asc(prices.model), desc(prices.effectiveFrom));
}

/** The price in force at `at` for every backend × model that has one. */
export async function currentPrices(db: Db, at: Date = new Date()): Promise<Price[]> {
  return db
    .selectDistinctOn([prices.backend, prices.model])
    .from(prices)
    .where(lte(prices.effectiveFrom, at))
    .orderBy(asc(prices.backend), asc(prices.model), desc(prices.effectiveFrom));
}

/**
 * Records that a tenant's day crossed a threshold. True only for the caller
 * that inserted the row: an alert fires once per day per threshold however
 * many routers notice it.
 */
export async function recordBudgetAlert(db: Db, tenantId: number, day: string, threshold: number): Promise<boolean> {
  const rows = await db
    .insert(budgetAlerts)
    .values({ tenantId, day, threshold })
    .onConflictDoNothing()
    .returning({ threshold: budgetAlerts.threshold });
  return rows.length > 0;
}

export async function listBudgetAlerts(db: Db, tenantId: number, day?: string) {
  return db
    .select()
    .from(budgetAlerts)
    .where(and(eq(budgetAlerts.tenantId, tenantId), day ? eq(budgetAlerts.day, day) : sql`true`))
    .orderBy(asc(budgetAlerts.day), asc(budgetAlerts.threshold));
}
