// Rate-limit queries: what `switchyard limits` writes and what routers read
// (through their cache) before counting a request in Redis.
import { and, asc, eq } from "drizzle-orm";
import type { Db } from "./client.ts";
import { rateLimits, tenants, type RateLimitRow } from "./schema/index.ts";

export interface RateLimitInput {
  tenantId: number;
  /** '' (or omitted) for the tenant-wide limit. */
  keyPrefix?: string;
  /** Unchanged when omitted on an existing row; null: unlimited. */
  requestsPerMinute?: number | null;
  tokensPerMinute?: number | null;
}

/** Creates or updates one limit row. */
export async function setRateLimit(db: Db, input: RateLimitInput): Promise<RateLimitRow> {
  const set: Partial<RateLimitRow> = { updatedAt: new Date() };
  if (input.requestsPerMinute !== undefined) set.requestsPerMinute = input.requestsPerMinute;
  if (input.tokensPerMinute !== undefined) set.tokensPerMinute = input.tokensPerMinute;
  const rows = await db
    .insert(rateLimits)
    .values({ tenantId: input.tenantId, keyPrefix: input.keyPrefix ?? "", requestsPerMinute: input.requestsPerMinute ?? null, tokensPerMinute: input.tokensPerMinute ?? null })
    .onConflictDoUpdate({ target: [rateLimits.tenantId, rateLimits.keyPrefix], set })
    .returning();
  return rows[0]!;
}

/** The tenant's rows: its own ('' key prefix) and its keys'. */
export async function tenantRateLimits(db: Db, tenantId: number): Promise<RateLimitRow[]> {
  return db.select().from(rateLimits).where(eq(rateLimits.tenantId, tenantId)).orderBy(asc(rateLimits.keyPrefix));
}

/** Removes one row (the tenant's, or a key's); true when there was one. */
export async function clearRateLimit(db: Db, tenantId: number, keyPrefix = ""): Promise<boolean> {
  const rows = await db
    .delete(rateLimits)
    .where(and(eq(rateLimits.tenantId, tenantId), eq(rateLimits.keyPrefix, keyPrefix)))
    .returning({ tenantId: rateLimits.tenantId });
  return rows.length > 0;
}

export async function listRateLimits(db: Db) {
  return db
    .select({ tenantName: tenants.name, keyPrefix: rateLimits.keyPrefix, requestsPerMinute: rateLimits.requestsPerMinute, tokensPerMinute: rateLimits.tokensPerMinute, updatedAt: rateLimits.updatedAt })
    .from(rateLimits)
    .innerJoin(tenants, eq(tenants.id, rateLimits.tenantId))
    .orderBy(asc(tenants.name), asc(rateLimits.keyPrefix));
}
