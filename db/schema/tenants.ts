// Tenants: who owns API keys (and, later, budgets, priority and a fall-through chain).
import { bigserial, pgTable, text } from "drizzle-orm/pg-core";
import { createdAt } from "./columns.ts";

export const tenants = pgTable("tenants", {
  id: bigserial("id", { mode: "number" }).primaryKey(),
  name: text("name").notNull().unique(),
  createdAt: createdAt(),
});

export type Tenant = typeof tenants.$inferSelect;
export type NewTenant = typeof tenants.$inferInsert;
