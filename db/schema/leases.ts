// Lease audit: every grant, extend, release and seen expiry of a GPU lease,
// appended by the routers; and the sequence fencing tokens come from. Redis
// holds the live leases (and may lose them on failover); the sequence lives
// here so a token granted after a Redis restart is still larger than every
// token granted before it.
import { bigint, bigserial, index, pgEnum, pgSequence, pgTable, text } from "drizzle-orm/pg-core";
import { createdAt, tstz } from "./columns.ts";

/** nextval() of this is a lease's fencing token: only grows, never reused. */
export const leaseFencingTokenSeq = pgSequence("lease_fencing_token_seq", { startWith: 1, increment: 1, minValue: 1 });

export const leaseEventKinds = ["granted", "extended", "released", "expired"] as const;
export type LeaseEventKind = (typeof leaseEventKinds)[number];
export const leaseEventKind = pgEnum("lease_event_kind", leaseEventKinds);

export const leaseEvents = pgTable(
  "lease_events",
  {
    id: bigserial("id", { mode: "number" }).primaryKey(),
    /** No foreign key: the audit outlives a deleted tenant. */
    tenantId: bigint("tenant_id", { mode: "number" }).notNull(),
    leaseId: text("lease_id").notNull(),
    worker: text("worker").notNull(),
    fencingToken: bigint("fencing_token", { mode: "number" }).notNull(),
    event: leaseEventKind("event").notNull(),
    /** When it happened, by the lease store's clock (Redis TIME); for `expired`, when a router saw it. */
    at: tstz("at").notNull(),
    /** The lease's expiry after this event (its last expiry for released/expired). */
    expiresAt: tstz("expires_at").notNull(),
    /** When the row was committed. */
    createdAt: createdAt(),
  },
  (t) => [
    index("lease_events_lease_idx").on(t.leaseId),
    index("lease_events_worker_at_idx").on(t.worker, t.at),
    index("lease_events_tenant_at_idx").on(t.tenantId, t.at),
    // The leases that may still be live (a grant or extend whose expiry is
    // ahead): what a router puts back when Redis lost the live leases.
    index("lease_events_expires_at_idx").on(t.expiresAt),
  ],
);

export type LeaseEvent = typeof leaseEvents.$inferSelect;
export type NewLeaseEvent = typeof leaseEvents.$inferInsert;
