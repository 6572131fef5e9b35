// Lease queries: fencing tokens from the Postgres sequence (so they keep
// growing whatever happens to Redis) and the append-only lease audit.
import { and, asc, eq, gt, inArray, sql } from "drizzle-orm";
import type { Db } from "./client.ts";
import { leaseEvents, type LeaseEvent, type NewLeaseEvent } from "./schema/index.ts";

/** A fresh fencing token (nextval of lease_fencing_token_seq): larger than every token handed out before, never reused. */
export async function nextFencingToken(db: Db): Promise<number> {
  const rows = await db.execute<{ token: string }>(sql`select nextval('lease_fencing_token_seq') as token`);
  const token = Number(rows[0]!.token);
  if (!Number.isSafeInteger(token)) throw new RangeError(`fencing token ${rows[0]!.token} is beyond 2^53`);
  return token;
}

/** Appends audit rows (one INSERT). */
export async function recordLeaseEvents(db: Db, events: readonly NewLeaseEvent[]): Promise<void> {
  if (events.length === 0) return;
  await db.insert(leaseEvents).values(events as NewLeaseEvent[]);
}

/** A lease's audit trail, oldest first (empty for an id never granted). */
export async function leaseHistory(db: Db, leaseId: string): Promise<LeaseEvent[]> {
  return db.select().from(leaseEvents).where(eq(leaseEvents.leaseId, leaseId)).orderBy(asc(leaseEvents.at), asc(leaseEvents.id));
}

/** Audit rows, oldest first, by tenant and/or worker. */
export async function listLeaseEvents(db: Db, filter: { tenantId?: number; worker?: string } = {}): Promise<LeaseEvent[]> {
  const where = and(
    filter.tenantId === undefined ? undefined : eq(leaseEvents.tenantId, filter.tenantId),
    filter.worker === undefined ? undefined : eq(leaseEvents.worker, filter.worker),
  );
  return db.select().from(leaseEvents).where(where).orderBy(asc(leaseEvents.at), asc(leaseEvents.id));
}

/**
 * Every audit row of the leases that may still be live: those with a grant
 * or extend whose expiry is after `sinceMs` (by Postgres' clock; callers
 * leave slack for Redis' and judge liveness on it), oldest first per lease.
 * What a router puts back when Redis lost the live leases.
 */
export async function liveLeaseEvents(db: Db, sinceMs: number): Promise<LeaseEvent[]> {
  const candidates = db.selectDistinct({ id: leaseEvents.leaseId }).from(leaseEvents).where(gt(leaseEvents.expiresAt, new Date(sinceMs)));
  return db.select().from(leaseEvents).where(inArray(leaseEvents.leaseId, candidates)).orderBy(asc(leaseEvents.leaseId), asc(leaseEvents.at), asc(leaseEvents.id));
}
