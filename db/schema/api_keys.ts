// API keys: only the SHA-256 of the key is stored, plus a short visible prefix
// so humans can tell keys apart and revoke one without ever seeing it again.
import { bigint, bigserial, index, pgTable, text } from "drizzle-orm/pg-core";
import { createdAt, tstz } from "./columns.ts";
import { tenants } from "./tenants.ts";

export const apiKeys = pgTable(
  "api_keys",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    tenantId: bigint("tenant_id", { mode: "number" })
      .notNull()
      .references(() => tenants.id, { onDelete: "cascade" }),
    /** e.g. "sy_3f9a2c1b" — unique, shown in listings. */
    prefix: text("prefix").notNull().unique(),
    /** Hex SHA-256 of the whole key. */
    keyHash: text("key_hash").notNull().unique(),
    name: text("name"),
    createdAt: createdAt(),
    revokedAt: tstz("revoked_at"),
    lastUsedAt: tstz("last_used_at"),
  },
  (t) => [index("api_keys_tenant_idx").on(t.tenantId)],
);

export type ApiKey = typeof apiKeys.$inferSelect;
export type NewApiKey = typeof apiKeys.$inferInsert;
