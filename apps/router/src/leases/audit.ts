// Where lease fencing tokens come from and where lease events are audited:
// Postgres (the sequence and lease_events), or memory for in-process tests.
import { leaseHistory, nextFencingToken, recordLeaseEvents, type Db, type LeaseEventKind } from "@switchyard/db";

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
    return (await leaseHistory(this.db, leaseId)).map((r) => ({
      tenantId: r.tenantId,
      leaseId: r.leaseId,
      worker: r.worker,
      fencingToken: r.fencingToken,
      event: r.event,
      atMs: r.at.getTime(),
      expiresAtMs: r.expiresAt.getTime(),
    }));
  }
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
}
