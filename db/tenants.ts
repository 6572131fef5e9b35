// Tenant and key queries used by the CLI and the router's auth.
import { and, asc, eq, inArray, isNull, sql } from "drizzle-orm";
import type { Db } from "./client.ts";
import { generateKey, hashKey } from "./keys.ts";
import { apiKeys, tenants, type Tenant } from "./schema/index.ts";

export type CreateTenantResult = { ok: true; tenant: Tenant } | { ok: false; reason: "exists" | "invalid_name" };

export const tenantNamePattern = /^[a-z0-9][a-z0-9_-]{0,62}$/;

export async function createTenant(db: Db, name: string): Promise<CreateTenantResult> {
  if (!tenantNamePattern.test(name)) return { ok: false, reason: "invalid_name" };
  const rows = await db.insert(tenants).values({ name }).onConflictDoNothing().returning();
  const row = rows[0];
  return row ? { ok: true, tenant: row } : { ok: false, reason: "exists" };
}

export async function findTenant(db: Db, name: string): Promise<Tenant | undefined> {
  const rows = await db.select().from(tenants).where(eq(tenants.name, name)).limit(1);
  return rows[0];
}

export async function listTenants(db: Db) {
  return db
    .select({
      id: tenants.id,
      name: tenants.name,
      createdAt: tenants.createdAt,
      activeKeys: sql<number>`count(${apiKeys.id}) filter (where ${apiKeys.revokedAt} is null)`.mapWith(Number),
    })
    .from(tenants)
    .leftJoin(apiKeys, eq(apiKeys.tenantId, tenants.id))
    .groupBy(tenants.id)
    .orderBy(asc(tenants.name));
}

export async function createKey(db: Db, tenantId: number, name?: string) {
  const material = generateKey();
  const rows = await db
    .insert(apiKeys)
    .values({ tenantId, prefix: material.prefix, keyHash: material.hash, name: name ?? null })
    .returning();
  return { key: material.key, row: rows[0]! };
}

/** Keys of one tenant only: never another tenant's. */
export async function listKeys(db: Db, tenantId: number) {
  return db
    .select({
      prefix: apiKeys.prefix,
      name: apiKeys.name,
      createdAt: apiKeys.createdAt,
      revokedAt: apiKeys.revokedAt,
      lastUsedAt: apiKeys.lastUsedAt,
    })
    .from(apiKeys)
    .where(eq(apiKeys.tenantId, tenantId))
    .orderBy(asc(apiKeys.createdAt));
}

/** Revokes the key with this prefix; with `tenantId`, only if it is that tenant's (another tenant's is "not_found"). */
export async function revokeKey(db: Db, prefix: string, tenantId?: number): Promise<"revoked" | "not_found" | "already_revoked"> {
  const ours = tenantId === undefined ? eq(apiKeys.prefix, prefix) : and(eq(apiKeys.prefix, prefix), eq(apiKeys.tenantId, tenantId));
  const rows = await db
    .update(apiKeys)
    .set({ revokedAt: new Date() })
    .where(and(ours, isNull(apiKeys.revokedAt)))
    .returning({ id: apiKeys.id });
  if (rows.length > 0) return "revoked";
  const exists = await db.select({ id: apiKeys.id }).from(apiKeys).where(ours).limit(1);
  return exists.length > 0 ? "already_revoked" : "not_found";
}

export interface KeyOwner {
  keyId: number;
  prefix: string;
  tenantId: number;
  tenantName: string;
  revoked: boolean;
}

export async function lookupKeyByHash(db: Db, keyHash: string): Promise<KeyOwner | undefined> {
  const rows = await db
    .select({
      keyId: apiKeys.id,
      prefix: apiKeys.prefix,
      tenantId: tenants.id,
      tenantName: tenants.name,
      revokedAt: apiKeys.revokedAt,
    })
    .from(apiKeys)
    .innerJoin(tenants, eq(tenants.id, apiKeys.tenantId))
    .where(eq(apiKeys.keyHash, keyHash))
    .limit(1);
  const r = rows[0];
  return r ? { keyId: r.keyId, prefix: r.prefix, tenantId: r.tenantId, tenantName: r.tenantName, revoked: r.revokedAt !== null } : undefined;
}

export async function touchKeys(db: Db, keyIds: number[]): Promise<void> {
  if (keyIds.length === 0) return;
  await db.update(apiKeys).set({ lastUsedAt: new Date() }).where(inArray(apiKeys.id, keyIds));
}

export { hashKey };
