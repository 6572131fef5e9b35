// Budget, price and alert queries: what `switchyard budgets|prices` write and
// what routers read (through their caches) on the request path.
import { and, asc, desc, eq, lte, sql } from "drizzle-orm";
import type { Db } from "./client.ts";
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
  effectiveFrom?: Date;
}

/** Adds a price row (a new price never rewrites an old one: past requests stay re-priceable). */
export async function setPrice(db: Db, input: PriceInput): Promise<Price> {
  const rows = await db
    .insert(prices)
    .values({
      backend: input.backend,
      model: input.model,
      inputMicroPerMtok: input.inputMicroPerMtok,
      outputMicroPerMtok: input.outputMicroPerMtok,
      cachedInputMicroPerMtok: input.cachedInputMicroPerMtok ?? null,
      cacheWriteMicroPerMtok: input.cacheWriteMicroPerMtok ?? null,
      cacheWrite1hMicroPerMtok: input.cacheWrite1hMicroPerMtok ?? null,
      audioInputMicroPerMtok: input.audioInputMicroPerMtok ?? null,
      imageTokenMultiplierPermille: input.imageTokenMultiplierPermille ?? null,
      effectiveFrom: input.effectiveFrom ?? new Date(),
    })
    .onConflictDoUpdate({
      // Same instant twice: the later call wins (a typo fixed at once).
      target: [prices.backend, prices.model, prices.effectiveFrom],
      set: {
        inputMicroPerMtok: input.inputMicroPerMtok,
        outputMicroPerMtok: input.outputMicroPerMtok,
        cachedInputMicroPerMtok: input.cachedInputMicroPerMtok ?? null,
        cacheWriteMicroPerMtok: input.cacheWriteMicroPerMtok ?? null,
        cacheWrite1hMicroPerMtok: input.cacheWrite1hMicroPerMtok ?? null,
        audioInputMicroPerMtok: input.audioInputMicroPerMtok ?? null,
        imageTokenMultiplierPermille: input.imageTokenMultiplierPermille ?? null,
      },
    })
    .returning();
  return rows[0]!;
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
