// Rate limits: requests and tokens per window for a tenant, or for one of
// its API keys (key_prefix; '' is the tenant-wide limit). A null column is
// unlimited on that dimension. Routers count in Redis and read these rows
// through a short cache.
import { sql } from "drizzle-orm";
import { bigint, check, pgTable, primaryKey, text } from "drizzle-orm/pg-core";
import { tstz } from "./columns.ts";
import { tenants } from "./tenants.ts";

export const rateLimits = pgTable(
  "rate_limits",
  {
    tenantId: bigint("tenant_id", { mode: "number" })
      .notNull()
      .references(() => tenants.id, { onDelete: "cascade" }),
    /** '' for the tenant-wide limit, else an API key's visible prefix (sy_…). */
    keyPrefix: text("key_prefix").notNull().default(""),
    requestsPerMinute: bigint("requests_per_minute", { mode: "number" }),
    tokensPerMinute: bigint("tokens_per_minute", { mode: "number" }),
    updatedAt: tstz("updated_at").notNull().defaultNow(),
  },
  (t) => [
    primaryKey({ columns: [t.tenantId, t.keyPrefix] }),
    check("rate_limits_requests_nonnegative", sql`${t.requestsPerMinute} >= 0`),
    check("rate_limits_tokens_nonnegative", sql`${t.tokensPerMinute} >= 0`),
  ],
);

export type RateLimitRow = typeof rateLimits.$inferSelect;
