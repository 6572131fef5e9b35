// The spend ledger: one row per request, written once, never updated. The
// table is range-partitioned by month on started_at (see the custom migration
// 0002_spend_ledger_partitions.sql; drizzle-kit cannot express partitioning),
// so retention drops a month's partition instead of deleting rows. This
// definition mirrors those columns so queries stay typed.
//
// The primary key is (request_id, started_at) because a partitioned table's
// unique keys must contain the partition key. Inserts are idempotent with
// ON CONFLICT DO NOTHING on that pair, so whoever retries a settle must carry
// the request's original started_at through every retry.
import { sql } from "drizzle-orm";
import { bigint, check, date, index, integer, numeric, pgEnum, pgTable, pgView, primaryKey, text } from "drizzle-orm/pg-core";
import { createdAt, tstz } from "./columns.ts";

/**
 * How a row's cost is known. At the normal end: `provider` (its reported
 * cost), `price_table` (usage × prices), `estimate` (no usage reported).
 * Finished by another router after the serving one died (crash-finished):
 * `provider_lookup` (the provider said what the generation cost),
 * `usage_on_crash` (the last usage seen, priced), `hold_on_crash` (nothing
 * known: the hold, the worst case — never $0).
 */
export const costSources = ["provider", "price_table", "estimate", "provider_lookup", "usage_on_crash", "hold_on_crash"] as const;
/** The sources of rows another router finished after the serving one died. */
export const crashCostSources = ["provider_lookup", "usage_on_crash", "hold_on_crash"] as const;
export type CostSource = (typeof costSources)[number];
export const costSource = pgEnum("cost_source", costSources);

export const requestStatuses = ["ok", "error", "client_cancelled", "timeout"] as const;
export type RequestStatus = (typeof requestStatuses)[number];
export const requestStatus = pgEnum("request_status", requestStatuses);

export const spendLedger = pgTable(
  "spend_ledger",
  {
    requestId: text("request_id").notNull(),
    /** No foreign key: finance history outlives a deleted tenant. */
    tenantId: bigint("tenant_id", { mode: "number" }).notNull(),
    keyId: bigint("key_id", { mode: "number" }),
    backend: text("backend").notNull(),
    model: text("model").notNull(),
    /** Worker id for self-hosted backends; null for paid APIs. */
    worker: text("worker"),
    promptTokens: integer("prompt_tokens").notNull().default(0),
    completionTokens: integer("completion_tokens").notNull().default(0),
    /** Prompt tokens served from a provider cache (included in prompt_tokens). */
    cachedTokens: integer("cached_tokens").notNull().default(0),
    /** Prompt tokens written to a provider cache (included in prompt_tokens). */
    cacheWriteTokens: integer("cache_write_tokens").notNull().default(0),
    /** Of cache_write_tokens, those written to Anthropic's 1-hour cache (`ttl: "1h"`), priced apart (migration 0013). */
    cacheWrite1hTokens: integer("cache_write_1h_tokens").notNull().default(0),
    /** Micro-cents (10⁻⁶ cent); free backends record 0. */
    costMicro: bigint("cost_micro", { mode: "bigint" }).notNull(),
    costSource: costSource("cost_source").notNull(),
    status: requestStatus("status").notNull(),
    startedAt: tstz("started_at").notNull(),
    firstTokenAt: tstz("first_token_at"),
    finishedAt: tstz("finished_at").notNull(),
    ttftMs: integer("ttft_ms"),
    durationMs: integer("duration_ms").notNull(),
    providerGenerationId: text("provider_generation_id"),
    /** When the row was committed: request end → here is the ledger lag. */
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ name: "spend_ledger_pkey", columns: [t.requestId, t.startedAt] }),
    index("spend_ledger_tenant_started_idx").on(t.tenantId, t.startedAt),
    check(
      "spend_ledger_nonnegative",
      sql`${t.costMicro} >= 0 and ${t.promptTokens} >= 0 and ${t.completionTokens} >= 0 and ${t.cachedTokens} >= 0`,
    ),
  ],
);

export type LedgerRow = typeof spendLedger.$inferSelect;
export type NewLedgerRow = typeof spendLedger.$inferInsert;

// Finance views, created in the custom migration. `day` is the tenant's day in
// its budget time zone (UTC without a budget row); money sums are bigint
// micro-cents plus exact numeric USD for people.

/** Spend per tenant × day × backend × model. */
export const spendDaily = pgView("spend_daily", {
  tenantId: bigint("tenant_id", { mode: "number" }).notNull(),
  tenantName: text("tenant_name"),
  day: date("day", { mode: "string" }).notNull(),
  backend: text("backend").notNull(),
  model: text("model").notNull(),
  requests: bigint("requests", { mode: "number" }).notNull(),
  promptTokens: bigint("prompt_tokens", { mode: "number" }).notNull(),
  completionTokens: bigint("completion_tokens", { mode: "number" }).notNull(),
  cachedTokens: bigint("cached_tokens", { mode: "number" }).notNull(),
  costMicro: bigint("cost_micro", { mode: "bigint" }).notNull(),
  costUsd: numeric("cost_usd").notNull(),
  /** Rows finished by another router after the serving one died (migration 0007). */
  crashFinishedRequests: bigint("crash_finished_requests", { mode: "number" }).notNull(),
  crashFinishedCostMicro: bigint("crash_finished_cost_micro", { mode: "bigint" }).notNull(),
  /** Of those, rows at the hold (nothing was known about the cost). */
  holdOnCrashRequests: bigint("hold_on_crash_requests", { mode: "number" }).notNull(),
  /**
   * Rows of paid attempts a provider accepted and the request failed over
   * from (migration 0013): their cost is in costMicro, they are not counted
   * in `requests` (the request's own row is, on the backend it ended on).
   */
  abandonedAttempts: bigint("abandoned_attempts", { mode: "number" }).notNull(),
}).existing();

/** Spend per tenant × day against the tenant's daily limit. */
export const spendVsBudget = pgView("spend_vs_budget", {
  tenantId: bigint("tenant_id", { mode: "number" }).notNull(),
  tenantName: text("tenant_name"),
  day: date("day", { mode: "string" }).notNull(),
  requests: bigint("requests", { mode: "number" }).notNull(),
  costMicro: bigint("cost_micro", { mode: "bigint" }).notNull(),
  costUsd: numeric("cost_usd").notNull(),
  dailyLimitCents: bigint("daily_limit_cents", { mode: "bigint" }),
  limitMicro: bigint("limit_micro", { mode: "bigint" }),
  remainingMicro: bigint("remaining_micro", { mode: "bigint" }),
  percentUsed: numeric("percent_used"),
  crashFinishedRequests: bigint("crash_finished_requests", { mode: "number" }).notNull(),
  crashFinishedCostMicro: bigint("crash_finished_cost_micro", { mode: "bigint" }).notNull(),
}).existing();
