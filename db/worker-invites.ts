// Worker invites in Postgres: `switchyard workers invite|revoke` write them
// (before Redis), and routers read them to put back in Redis what Redis lost
// (apps/router/src/routing/invite-keeper.ts). Rows are per Redis key prefix.
import { and, eq, inArray, isNull, sql } from "drizzle-orm";
import type { Db } from "./client.ts";
import { workerInvites, type WorkerInviteRow } from "./schema/index.ts";

export type { WorkerInviteRow };

export interface WorkerInviteInput {
  keyPrefix: string;
  workerId: string;
  models: string[];
  passwordSha256: string;
}

/** Records (or renews) an invite: live again even if it was revoked. */
export async function recordWorkerInvite(db: Db, input: WorkerInviteInput): Promise<void> {
  await db
    .insert(workerInvites)
    .values(input)
    .onConflictDoUpdate({ target: [workerInvites.keyPrefix, workerInvites.workerId], set: { models: input.models, passwordSha256: input.passwordSha256, createdAt: sql`now()`, revokedAt: null } });
}

/** Marks the invite revoked, keeping the row as a tombstone (one is written for a worker Postgres never knew). True when it was live. */
export async function revokeWorkerInvite(db: Db, keyPrefix: string, workerId: string): Promise<boolean> {
  const live = await db
    .update(workerInvites)
    .set({ revokedAt: sql`now()` })
    .where(and(eq(workerInvites.keyPrefix, keyPrefix), eq(workerInvites.workerId, workerId), isNull(workerInvites.revokedAt)))
    .returning({ workerId: workerInvites.workerId });
  if (live.length > 0) return true;
  await db.insert(workerInvites).values({ keyPrefix, workerId, models: [], passwordSha256: "", revokedAt: sql`now()` }).onConflictDoNothing();
  return false;
}

/** Every invite under the prefix, live and revoked. */
export async function listWorkerInvites(db: Db, keyPrefix: string): Promise<WorkerInviteRow[]> {
  return db.select().from(workerInvites).where(eq(workerInvites.keyPrefix, keyPrefix));
}

/** The ids whose invite is live now (read again just before a router restores them: a revoke may have landed since the list). */
export async function liveWorkerIds(db: Db, keyPrefix: string, workerIds: readonly string[]): Promise<Set<string>> {
  if (workerIds.length === 0) return new Set();
  const rows = await db
    .select({ workerId: workerInvites.workerId })
    .from(workerInvites)
    .where(and(eq(workerInvites.keyPrefix, keyPrefix), isNull(workerInvites.revokedAt), inArray(workerInvites.workerId, [...workerIds])));
  return new Set(rows.map((r) => r.workerId));
}

/**
 * Records an invite made before invites were kept in Postgres (found in
 * Redis only), unless Postgres has a row for the worker already — a
 * revoke's tombstone included. True when it was recorded.
 */
export async function adoptWorkerInvite(db: Db, input: WorkerInviteInput): Promise<boolean> {
  const rows = await db.insert(workerInvites).values(input).onConflictDoNothing().returning({ workerId: workerInvites.workerId });
  return rows.length > 0;
}
