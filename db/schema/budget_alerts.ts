// Budget alerts: one row per tenant, day and threshold crossed, so an alert
// fires once per day however many routers notice the crossing.
import { bigint, date, integer, pgTable, primaryKey } from "drizzle-orm/pg-core";
import { createdAt } from "./columns.ts";
import { tenants } from "./tenants.ts";

export const budgetAlerts = pgTable(
  "budget_alerts",
  {
    tenantId: bigint("tenant_id", { mode: "number" })
      .notNull()
      .references(() => tenants.id, { onDelete: "cascade" }),
    /** The tenant's day (in its budget time zone). */
    day: date("day", { mode: "string" }).notNull(),
    /** Percentage of the daily limit, e.g. 80 or 100. */
    threshold: integer("threshold").notNull(),
    createdAt: createdAt(),
  },
  (t) => [primaryKey({ name: "budget_alerts_tenant_day_threshold", columns: [t.tenantId, t.day, t.threshold] })],
);

export type BudgetAlert = typeof budgetAlerts.$inferSelect;
export type NewBudgetAlert = typeof budgetAlerts.$inferInsert;
