// Budgets: one row per tenant, its daily limit for paid inference and the time
// zone whose midnight starts the tenant's day.
import { sql } from "drizzle-orm";
import { bigint, check, integer, pgTable, text } from "drizzle-orm/pg-core";
import { tstz } from "./columns.ts";
import { tenants } from "./tenants.ts";

export const budgets = pgTable(
  "budgets",
  {
    tenantId: bigint("tenant_id", { mode: "number" })
      .primaryKey()
      .references(() => tenants.id, { onDelete: "cascade" }),
    /** Whole cents per day; the router holds and spends in micro-cents (× 1,000,000). */
    dailyLimitCents: bigint("daily_limit_cents", { mode: "bigint" }).notNull(),
    /** IANA zone, e.g. "Europe/Paris": the day rolls over at this zone's midnight. */
    timeZone: text("time_zone").notNull().default("UTC"),
    /** Percentages of the daily limit that raise one alert per day each. */
    alertThresholds: integer("alert_thresholds").array().notNull().default([80, 100]),
    updatedAt: tstz("updated_at").notNull().defaultNow(),
  },
  (t) => [check("budgets_daily_limit_nonnegative", sql`${t.dailyLimitCents} >= 0`)],
);

export type Budget = typeof budgets.$inferSelect;
export type NewBudget = typeof budgets.$inferInsert;
