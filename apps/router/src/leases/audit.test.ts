import { describe, expect, it } from "vitest";
import { leasesFromEvents, MemoryLeaseAudit, type LeaseAuditEvent } from "./audit.ts";

const ev = (leaseId: string, event: LeaseAuditEvent["event"], atMs: number, expiresAtMs: number, fencingToken = 7): LeaseAuditEvent => ({ tenantId: 2, leaseId, worker: `w-${leaseId}`, fencingToken, event, atMs, expiresAtMs });

describe("the leases the audit knows as live (what a lease store that lost its data gets back)", () => {
  it("granted and not ended, at its latest expiry; released, expired, or never granted leases are left out", () => {
    const leases = leasesFromEvents([
      ev("a", "granted", 1_000, 5_000),
      ev("a", "extended", 2_000, 9_000),
      ev("a", "extended", 3_000, 8_000), // an extend never shortens: the latest expiry is the largest
      ev("b", "granted", 1_000, 5_000),
      ev("b", "released", 1_500, 5_000),
      ev("c", "granted", 1_000, 2_000),
      ev("c", "expired", 2_100, 2_000),
      ev("d", "extended", 1_000, 9_000), // its grant's row was never written (a router died between): never handed out
    ]);
    expect(leases).toEqual([{ id: "a", workerId: "w-a", tenantId: 2, fencingToken: 7, grantedAtMs: 1_000, expiresAtMs: 9_000 }]);
  });

  it("newest token first: of two leases the audit shows live on one worker, the restore keeps the one the worker accepts", () => {
    const lease = (id: string, token: number): LeaseAuditEvent => ({ ...ev(id, "granted", 1_000, 9_000, token), worker: "w" });
    // Lease ids are random: the older lease sorts first by id here.
    const leases = leasesFromEvents([lease("a-old", 5), lease("b-new", 7), lease("c-other", 6)]);
    expect(leases.map((l) => [l.id, l.fencingToken])).toEqual([["b-new", 7], ["c-other", 6], ["a-old", 5]]);
  });

  it("the in-process audit answers the same, for leases whose expiry is within a minute of now or later", async () => {
    const audit = new MemoryLeaseAudit();
    const now = Date.now();
    await audit.record([ev("live", "granted", now - 1_000, now + 60_000), ev("old", "granted", now - 600_000, now - 300_000), ev("gone", "granted", now - 1_000, now + 60_000), ev("gone", "released", now, now)]);
    expect((await audit.liveLeases()).map((l) => l.id)).toEqual(["live"]);
  });
});
