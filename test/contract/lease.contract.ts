// One contract for every LeaseStore: the Redis scripts and the in-process
// store must grant, refuse, extend, release and expire leases the same way.
import { describe, expect, it } from "vitest";
import { newLeaseId, type LeaseStore } from "@switchyard/state";
import type { ClockedHarness } from "./twins.ts";

export type LeaseHarness = ClockedHarness<LeaseStore>;

/** The fenceIdleMs every twin under this contract is built with: short, since the Redis twins wait it out for real. */
export const CONTRACT_FENCE_IDLE_MS = 1_000;

const HOUR = 3_600_000;
let n = 0;
const wid = (what = "gpu") => `${what}-${++n}-${Math.random().toString(36).slice(2, 8)}`;

export function leaseContract(name: string, make: () => Promise<LeaseHarness>, cleanup: (h: LeaseHarness) => Promise<void>) {
  describe(`LeaseStore contract: ${name}`, () => {
    const withStore = (fn: (h: LeaseHarness) => Promise<void>) => async () => {
      const h = await make();
      try {
        await fn(h);
      } finally {
        await cleanup(h);
      }
    };

    it(
      "more leases expiring at once than one prune takes (1000): none of them reads as live, none holds its worker or counts for its tenant",
      withStore(async ({ store, elapse }) => {
        const workers = Array.from({ length: 1_005 }, () => wid("many"));
        let token = 100;
        for (const w of workers) {
          const r = await store.acquire({ leaseId: newLeaseId(), workerId: w, tenantId: 9, durationMs: 5_000, fencingToken: ++token });
          expect(r.ok).toBe(true);
        }
        // All of them still live now (none pruned while the others were granted), all expired after this.
        expect((await store.list()).leases).toHaveLength(workers.length);
        await elapse(5_100);
        // One call prunes (and reports) at most 1000; the rest are ended all the same.
        expect((await store.list()).leases).toEqual([]);
        const again = await store.acquire({ leaseId: newLeaseId(), workerId: workers.at(-1)!, tenantId: 9, durationMs: HOUR, fencingToken: ++token, maxPerTenant: 1 });
        expect(again.ok).toBe(true);
      }),
      60_000,
    );

    it(
      "the same grant asked again (ioredis resends a command whose reply a dropped connection lost) answers that grant, not 'held'",
      withStore(async ({ store }) => {
        const worker = wid();
        const ask = { leaseId: newLeaseId(), workerId: worker, tenantId: 7, durationMs: HOUR, fencingToken: 10 };
        const first = await store.acquire(ask);
        const again = await store.acquire(ask);
        expect(again.ok).toBe(true);
        if (!first.ok || !again.ok) return;
        expect(again.lease).toEqual(first.lease);
        // Another lease id on the same worker is still refused.
        expect(await store.acquire({ ...ask, leaseId: newLeaseId(), fencingToken: 11 })).toMatchObject({ ok: false, reason: "held" });
        expect((await store.list()).leases).toHaveLength(1);
      }),
    );

    it(
      "grants a free worker, and get/list show the lease",
      withStore(async ({ store, now }) => {
        const worker = wid();
        const leaseId = newLeaseId();
        const before = await now();
        const r = await store.acquire({ leaseId, workerId: worker, tenantId: 7, durationMs: HOUR, fencingToken: 10 });
        expect(r.ok).toBe(true);
        if (!r.ok) return;
        expect(r.lease).toMatchObject({ id: leaseId, workerId: worker, tenantId: 7, fencingToken: 10 });
        expect(r.lease.grantedAtMs).toBeGreaterThanOrEqual(before);
        expect(r.lease.expiresAtMs).toBe(r.lease.grantedAtMs + HOUR);
        expect(r.nowMs).toBe(r.lease.grantedAtMs);
        expect((await store.get(leaseId)).lease).toEqual(r.lease);
        const list = await store.list();
        expect(list.leases).toEqual([r.lease]);
        expect(list.nowMs).toBeGreaterThanOrEqual(r.nowMs);
        expect((await store.get(newLeaseId())).lease).toBeUndefined();
      }),
    );

    it(
      "one live lease per worker: a second acquire fails with the holder's expiry, other workers are unaffected",
      withStore(async ({ store }) => {
        const worker = wid();
        const first = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: HOUR, fencingToken: 1 });
        expect(first.ok).toBe(true);
        if (!first.ok) return;
        for (const tenantId of [1, 2]) {
          const again = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId, durationMs: HOUR, fencingToken: 2 + tenantId });
          expect(again).toMatchObject({ ok: false, reason: "held", holderExpiresAtMs: first.lease.expiresAtMs });
        }
        const other = await store.acquire({ leaseId: newLeaseId(), workerId: wid(), tenantId: 2, durationMs: HOUR, fencingToken: 5 });
        expect(other.ok).toBe(true);
        expect((await store.list()).leases).toHaveLength(2);
      }),
    );

    it(
      "200 concurrent acquires of one worker: exactly one is granted",
      withStore(async ({ store }) => {
        const worker = wid();
        const results = await Promise.all(
          Array.from({ length: 200 }, (_, i) => store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: i, durationMs: HOUR, fencingToken: 1000 + i })),
        );
        const granted = results.filter((r) => r.ok);
        expect(granted).toHaveLength(1);
        // Those that lost either saw the holder or came with a token older than the grant's.
        for (const r of results) if (!r.ok) expect(["held", "stale_token"]).toContain(r.reason);
      }),
    );

    it(
      "tokens only grow per worker: a token not larger than the last grant's is refused, even after release",
      withStore(async ({ store }) => {
        const worker = wid();
        const a = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: HOUR, fencingToken: 50 });
        expect(a.ok).toBe(true);
        if (!a.ok) return;
        expect((await store.release({ leaseId: a.lease.id, tenantId: 1 })).ok).toBe(true);
        for (const token of [49, 50]) {
          const stale = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: HOUR, fencingToken: token });
          expect(stale).toMatchObject({ ok: false, reason: "stale_token", highestToken: 50 });
        }
        const fresh = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: HOUR, fencingToken: 51 });
        expect(fresh).toMatchObject({ ok: true, lease: { fencingToken: 51 } });
        // Tokens are per worker: another worker takes a smaller one.
        expect((await store.acquire({ leaseId: newLeaseId(), workerId: wid(), tenantId: 1, durationMs: HOUR, fencingToken: 3 })).ok).toBe(true);
      }),
    );

    it(
      "maxPerTenant: a tenant at its cap is refused (others are not); a release or an expiry makes room; 0 is no cap",
      withStore(async ({ store, elapse }) => {
        const grant = (tenantId: number, fencingToken: number, maxPerTenant: number, durationMs = HOUR) =>
          store.acquire({ leaseId: newLeaseId(), workerId: wid(), tenantId, durationMs, fencingToken, maxPerTenant });
        const a = await grant(1, 1, 2);
        const short = await grant(1, 2, 2, 300);
        if (!a.ok || !short.ok) throw new Error("grants under the cap");
        expect(await grant(1, 3, 2)).toMatchObject({ ok: false, reason: "tenant_limit", held: 2 });
        expect((await grant(2, 4, 2)).ok).toBe(true);
        expect((await grant(1, 5, 0)).ok).toBe(true); // no cap
        expect(await grant(1, 6, 3)).toMatchObject({ ok: false, reason: "tenant_limit", held: 3 });
        expect((await store.release({ leaseId: a.lease.id, tenantId: 1 })).ok).toBe(true);
        expect((await grant(1, 7, 3)).ok).toBe(true);
        expect(await grant(1, 8, 3)).toMatchObject({ ok: false, reason: "tenant_limit", held: 3 });
        await elapse(400); // the short lease has ended
        expect((await grant(1, 9, 3)).ok).toBe(true);
      }),
    );

    it(
      "a lease expires by itself: the worker frees, exactly one call reports the expiry",
      withStore(async ({ store, elapse }) => {
        const worker = wid();
        const a = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: 150, fencingToken: 1 });
        expect(a.ok).toBe(true);
        if (!a.ok) return;
        expect((await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 2, durationMs: 150, fencingToken: 2 })).ok).toBe(false);
        await elapse(250);
        const seen = await Promise.all([store.get(a.lease.id), store.list(), store.get(a.lease.id)]);
        expect(seen[0].lease).toBeUndefined();
        expect(seen[1].leases).toEqual([]);
        const reports = seen.flatMap((s) => s.expired);
        expect(reports).toEqual([a.lease]);
        const b = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 2, durationMs: HOUR, fencingToken: 3 });
        expect(b).toMatchObject({ ok: true, expired: [] });
        // The expired holder can neither extend nor release any more.
        expect(await store.extend({ leaseId: a.lease.id, tenantId: 1, durationMs: HOUR })).toMatchObject({ ok: false, reason: "not_found" });
        expect(await store.release({ leaseId: a.lease.id, tenantId: 1 })).toMatchObject({ ok: false, reason: "not_found" });
      }),
    );

    it(
      "an acquire over an expired lease reports that expiry and grants",
      withStore(async ({ store, elapse }) => {
        const worker = wid();
        const a = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: 100, fencingToken: 1 });
        await elapse(200);
        const b = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 2, durationMs: HOUR, fencingToken: 2 });
        expect(b.ok).toBe(true);
        expect(b.expired).toEqual(a.ok ? [a.lease] : []);
        if (b.ok && a.ok) expect(b.lease.grantedAtMs).toBeGreaterThanOrEqual(a.lease.expiresAtMs);
      }),
    );

    it(
      "extend: only the holder, only while live; it never shortens a lease",
      withStore(async ({ store, elapse, now }) => {
        const worker = wid();
        const a = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: 300, fencingToken: 9 });
        expect(a.ok).toBe(true);
        if (!a.ok) return;
        expect(await store.extend({ leaseId: a.lease.id, tenantId: 2, durationMs: HOUR })).toMatchObject({ ok: false, reason: "not_found" });
        const longer = await store.extend({ leaseId: a.lease.id, tenantId: 1, durationMs: 60_000 });
        expect(longer.ok).toBe(true);
        if (!longer.ok) return;
        expect(longer.lease.expiresAtMs).toBe(longer.nowMs + 60_000);
        expect(longer.lease).toMatchObject({ fencingToken: 9, grantedAtMs: a.lease.grantedAtMs, tenantId: 1, workerId: worker });
        const shorter = await store.extend({ leaseId: a.lease.id, tenantId: 1, durationMs: 10 });
        expect(shorter).toMatchObject({ ok: true, lease: { expiresAtMs: longer.lease.expiresAtMs } });
        // Past the original 300 ms the extended lease still holds the worker.
        await elapse(400);
        expect((await store.get(a.lease.id)).lease?.expiresAtMs).toBe(longer.lease.expiresAtMs);
        expect(await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 2, durationMs: HOUR, fencingToken: 10 })).toMatchObject({
          ok: false,
          reason: "held",
          holderExpiresAtMs: longer.lease.expiresAtMs,
        });
        expect(longer.lease.expiresAtMs).toBeGreaterThan(await now());
      }),
    );

    it(
      "release: only the holder; the worker is free at once",
      withStore(async ({ store }) => {
        const worker = wid();
        const a = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: HOUR, fencingToken: 1 });
        expect(a.ok).toBe(true);
        if (!a.ok) return;
        expect(await store.release({ leaseId: a.lease.id, tenantId: 2 })).toMatchObject({ ok: false, reason: "not_found" });
        expect((await store.get(a.lease.id)).lease).toBeDefined();
        const r = await store.release({ leaseId: a.lease.id, tenantId: 1 });
        expect(r).toMatchObject({ ok: true, lease: a.lease });
        expect(await store.release({ leaseId: a.lease.id, tenantId: 1 })).toMatchObject({ ok: false, reason: "not_found" });
        expect((await store.get(a.lease.id)).lease).toBeUndefined();
        expect((await store.list()).leases).toEqual([]);
        expect((await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 2, durationMs: HOUR, fencingToken: 2 })).ok).toBe(true);
      }),
    );

    it(
      "contended churn: grants of one worker never overlap and their tokens strictly increase",
      withStore(async ({ store }) => {
        const workers = [wid(), wid(), wid()];
        let token = 0;
        const grants: Array<{ worker: string; token: number; from: number; to: number }> = [];
        await Promise.all(
          Array.from({ length: 30 }, async (_, c) => {
            for (let i = 0; i < 20; i++) {
              const worker = workers[(c + i) % workers.length]!;
              const r = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: c, durationMs: HOUR, fencingToken: ++token });
              if (!r.ok) continue;
              const rel = await store.release({ leaseId: r.lease.id, tenantId: c });
              expect(rel.ok).toBe(true);
              grants.push({ worker, token: r.lease.fencingToken, from: r.lease.grantedAtMs, to: rel.nowMs });
            }
          }),
        );
        expect(grants.length).toBeGreaterThan(10);
        for (const w of workers) {
          const mine = grants.filter((g) => g.worker === w).sort((a, b) => a.token - b.token);
          for (let i = 1; i < mine.length; i++) expect(mine[i]!.from).toBeGreaterThanOrEqual(mine[i - 1]!.to);
        }
      }),
    );

    it(
      "the poll (list) forgets the fence of workers idle longer than fenceIdleMs; a live, extended or recently leased worker's is kept",
      withStore(async ({ store, elapse }) => {
        let token = 1_000;
        const grant = (workerId: string, durationMs: number, tenantId = 1) => store.acquire({ leaseId: newLeaseId(), workerId, tenantId, durationMs, fencingToken: ++token });
        const live = wid("live");
        const held = await grant(live, HOUR);
        const extended = wid("ext");
        const ext = await grant(extended, 200);
        if (!held.ok || !ext.ok) throw new Error("grants");
        expect((await store.extend({ leaseId: ext.lease.id, tenantId: 1, durationMs: HOUR })).ok).toBe(true);
        // Many workers leased once: half released at once, half left to expire.
        const idle = Array.from({ length: 40 }, () => wid("idle"));
        for (const [i, w] of idle.entries()) {
          const r = await grant(w, 100);
          if (!r.ok) throw new Error("grant");
          if (i % 2 === 0) expect((await store.release({ leaseId: r.lease.id, tenantId: 1 })).ok).toBe(true);
        }
        const recent = wid("recent");
        expect((await grant(recent, 100)).ok).toBe(true);
        await elapse(CONTRACT_FENCE_IDLE_MS + 300);
        // Leased again just now: its last lease ended less than fenceIdleMs ago.
        const again = await grant(recent, 50);
        if (!again.ok) throw new Error("grant");
        await elapse(60);
        expect((await store.list()).leases.map((l) => l.id).sort()).toEqual([held.lease.id, ext.lease.id].sort());
        // Forgotten: a token below the one each had is no longer refused.
        for (const w of idle) expect(await store.acquire({ leaseId: newLeaseId(), workerId: w, tenantId: 2, durationMs: HOUR, fencingToken: 1 })).toMatchObject({ ok: true });
        // Kept: the live (granted longer than fenceIdleMs ago), the extended and the recent ones.
        expect((await store.release({ leaseId: held.lease.id, tenantId: 1 })).ok).toBe(true);
        expect((await store.release({ leaseId: ext.lease.id, tenantId: 1 })).ok).toBe(true);
        for (const [w, highest] of [
          [live, held.lease.fencingToken],
          [extended, ext.lease.fencingToken],
          [recent, again.lease.fencingToken],
        ] as const) {
          expect(await store.acquire({ leaseId: newLeaseId(), workerId: w, tenantId: 2, durationMs: HOUR, fencingToken: 1 })).toMatchObject({ ok: false, reason: "stale_token", highestToken: highest });
        }
      }),
      30_000,
    );

    it(
      "after a worker's fence is forgotten, its next grant fences it again: the superseded holders' tokens are refused, their leases stay ended",
      withStore(async ({ store, elapse }) => {
        const worker = wid();
        const a = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: 100, fencingToken: 10 });
        await elapse(150);
        const b = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 2, durationMs: HOUR, fencingToken: 20 });
        if (!a.ok || !b.ok) throw new Error("grants");
        expect((await store.release({ leaseId: b.lease.id, tenantId: 2 })).ok).toBe(true);
        await elapse(CONTRACT_FENCE_IDLE_MS + 300);
        await store.list();
        // The superseded holder cannot bring its lease back.
        expect(await store.extend({ leaseId: a.lease.id, tenantId: 1, durationMs: HOUR })).toMatchObject({ ok: false, reason: "not_found" });
        expect((await store.get(a.lease.id)).lease).toBeUndefined();
        // The next grant (a fresh token from the sequence) fences the worker again.
        const c = await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 3, durationMs: HOUR, fencingToken: 30 });
        if (!c.ok) throw new Error("grant after the prune");
        expect(await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: HOUR, fencingToken: 10 })).toMatchObject({ ok: false, reason: "held" });
        expect((await store.release({ leaseId: c.lease.id, tenantId: 3 })).ok).toBe(true);
        for (const token of [10, 20, 29, 30]) {
          expect(await store.acquire({ leaseId: newLeaseId(), workerId: worker, tenantId: 1, durationMs: HOUR, fencingToken: token })).toMatchObject({ ok: false, reason: "stale_token", highestToken: 30 });
        }
      }),
      30_000,
    );

    it(
      "rejects malformed input",
      withStore(async ({ store }) => {
        await expect(store.acquire({ leaseId: "nope", workerId: wid(), tenantId: 1, durationMs: HOUR, fencingToken: 1 })).rejects.toThrow(RangeError);
        await expect(store.acquire({ leaseId: newLeaseId(), workerId: "a|b", tenantId: 1, durationMs: HOUR, fencingToken: 1 })).rejects.toThrow(RangeError);
        await expect(store.acquire({ leaseId: newLeaseId(), workerId: wid(), tenantId: 1, durationMs: 0, fencingToken: 1 })).rejects.toThrow(RangeError);
        await expect(store.acquire({ leaseId: newLeaseId(), workerId: wid(), tenantId: 1, durationMs: HOUR, fencingToken: 1.5 })).rejects.toThrow(RangeError);
        await expect(store.extend({ leaseId: newLeaseId(), tenantId: 1, durationMs: -1 })).rejects.toThrow(RangeError);
        await expect(store.get("lease_a|b")).rejects.toThrow(RangeError);
      }),
    );
  });
}
