// Where lease fencing tokens come from and where lease events are audited:
// Postgres (the sequence and lease_events), or memory for in-process tests.
import { leaseHistory, liveLeaseEvents, nextFencingToken, recordLeaseEvents, type Db, type LeaseEventKind } from "@switchyard/db";
import type { Lease } from "@switchyard/state";

export interface LeaseAuditEvent {
  tenantId: number;
  leaseId: string;
  worker: string;
  fencingToken: number;
  event: LeaseEventKind;
  /** Store clock (Redis TIME), ms. */
  atMs: number;
  expiresAtMs: number;
}

export interface LeaseAudit {
  /** A token larger than any handed out before, also across Redis restarts. */
  nextToken(): Promise<number>;
  record(events: readonly LeaseAuditEvent[]): Promise<void>;
  /** A lease's events, oldest first. */
  history(leaseId: string): Promise<LeaseAuditEvent[]>;
  /**
   * The leases the audit knows as granted and not ended (released, or seen
   * expired), with their latest expiry, for those whose expiry is within a
   * minute of now or later: what is put back in a lease store that lost its
   * data (RedisLeaseStore's restore, which judges liveness on its own clock).
   */
  liveLeases(): Promise<Lease[]>;
}

/** How far before now a lease's audited expiry may lie and still be handed to a restore (clocks differ; the store decides). */
const RESTORE_SLACK_MS = 60_000;

/** A lease per lease id from its events (oldest first): granted and not ended, at its latest expiry. */
export function leasesFromEvents(events: readonly LeaseAuditEvent[]): Lease[] {
  const byId = new Map<string, { lease: Lease | undefined; ended: boolean }>();
  for (const e of events) {
    const cur = byId.get(e.leaseId) ?? { lease: undefined, ended: false };
    byId.set(e.leaseId, cur);
    if (e.event === "released" || e.event === "expired") cur.ended = true;
    else if (e.event === "granted") cur.lease = { id: e.leaseId, workerId: e.worker, tenantId: e.tenantId, fencingToken: e.fencingToken, grantedAtMs: e.atMs, expiresAtMs: e.expiresAtMs };
    else if (cur.lease) cur.lease.expiresAtMs = Math.max(cur.lease.expiresAtMs, e.expiresAtMs);
  }
  const out: Lease[] = [];
  for (const { lease, ended } of byId.values()) if (lease && !ended) out.push(lease);
  // Newest token first: where the audit shows two leases live on one worker
  // (a release whose audit row failed), the restore keeps the first it is
  // given, and it must be the one the worker now accepts.
  return out.sort((a, b) => b.fencingToken - a.fencingToken);
}

export class PostgresLeaseAudit implements LeaseAudit {
  constructor(private readonly db: Db) {}

  nextToken(): Promise<number> {
    return nextFencingToken(this.db);
  }

  record(events: readonly LeaseAuditEvent[]): Promise<void> {
    return recordLeaseEvents(
      this.db,
      events.map((e) => ({
        tenantId: e.tenantId,
        leaseId: e.leaseId,
        worker: e.worker,
        fencingToken: e.fencingToken,
        event: e.event,
        at: new Date(e.atMs),
        expiresAt: new Date(e.expiresAtMs),
      })),
    );
  }

  async history(leaseId: string): Promise<LeaseAuditEvent[]> {
    return (await leaseHistory(this.db, leaseId)).map(fromRow);
  }

  async liveLeases(): Promise<Lease[]> {
    return leasesFromEvents((await liveLeaseEvents(this.db, Date.now() - RESTORE_SLACK_MS)).map(fromRow));
  }
}

function fromRow(r: Awaited<ReturnType<typeof leaseHistory>>[number]): LeaseAuditEvent {
  return {
    tenantId: r.tenantId,
    leaseId: r.leaseId,
    worker: r.worker,
    fencingToken: r.fencingToken,
    event: r.event,
    atMs: r.at.getTime(),
    expiresAtMs: r.expiresAt.getTime(),
  };
}

export class MemoryLeaseAudit implements LeaseAudit {
  readonly events: LeaseAuditEvent[] = [];
  private token = 0;

  async nextToken(): Promise<number> {
    return ++this.token;
  }

  async record(events: readonly LeaseAuditEvent[]): Promise<void> {
    this.events.push(...events);
  }

  async history(leaseId: string): Promise<LeaseAuditEvent[]> {
    return this.events.filter((e) => e.leaseId === leaseId);
  }

  async liveLeases(): Promise<Lease[]> {
    const since = Date.now() - RESTORE_SLACK_MS;
    const ids = new Set(this.events.filter((e) => e.expiresAtMs > since).map((e) => e.leaseId));
    return leasesFromEvents(this.events.filter((e) => ids.has(e.leaseId)));
  }
}
