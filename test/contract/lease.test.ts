import { describe, expect, it } from "vitest";
import { leaseKeys, MemoryLeaseStore, newLeaseId, RedisLeaseStore, type Lease } from "@switchyard/state";
import { createTestRedis, sleep } from "../helpers/env.ts";
import { CONTRACT_FENCE_IDLE_MS, leaseContract } from "./lease.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins(leaseContract, {
  redis: (r) => new RedisLeaseStore(r.redis, r.prefix, { fenceIdleMs: CONTRACT_FENCE_IDLE_MS }),
  memory: (clock) => new MemoryLeaseStore(clock, { fenceIdleMs: CONTRACT_FENCE_IDLE_MS }),
});

describe("RedisLeaseStore keys", () => {
  it("every lease key carries the {leases} hash tag; an empty store leaves only the fence (and its index) and the restored mark", async () => {
    const r = await createTestRedis();
    try {
      const store = new RedisLeaseStore(r.redis, r.prefix);
      const a = await store.acquire({ leaseId: newLeaseId(), workerId: "w1", tenantId: 3, durationMs: 60_000, fencingToken: 4 });
      expect(a.ok).toBe(true);
      const keys = (await r.redis.keys(`${r.prefix}*`)).sort();
      expect(keys).toEqual(leaseKeys(r.prefix).sort());
      for (const k of keys) expect(k.startsWith(`${r.prefix}{leases}:`)).toBe(true);
      if (a.ok) await store.release({ leaseId: a.lease.id, tenantId: 3 });
      expect((await r.redis.keys(`${r.prefix}*`)).sort()).toEqual([leaseKeys(r.prefix)[3], leaseKeys(r.prefix)[4], leaseKeys(r.prefix)[5]].sort());
      // Two stores on one connection share the script registration.
      const again = new RedisLeaseStore(r.redis, r.prefix);
      expect((await again.list()).leases).toEqual([]);
    } finally {
      await r.cleanup();
    }
  });

  it("the fence hash shrinks: many worker ids leased once are forgotten by the poll once idle past fenceIdleMs, fields from before the index included; a live worker's stays", async () => {
    const r = await createTestRedis();
    try {
      const store = new RedisLeaseStore(r.redis, r.prefix, { fenceIdleMs: 500 });
      const [, , , fence, , fenced] = leaseKeys(r.prefix);
      const held = await store.acquire({ leaseId: newLeaseId(), workerId: "kept", tenantId: 1, durationMs: 60_000, fencingToken: 1 });
      expect(held.ok).toBe(true);
      for (let i = 0; i < 300; i++) {
        const l = await store.acquire({ leaseId: newLeaseId(), workerId: `once-${i}`, tenantId: 1, durationMs: 50, fencingToken: 10 + i });
        if (l.ok && i % 2 === 0) await store.release({ leaseId: l.lease.id, tenantId: 1 });
      }
      // A field written before the index existed (an older router).
      await r.redis.hset(fence, "legacy", "5");
      expect(await r.redis.hlen(fence)).toBe(302);
      await store.list();
      expect(await r.redis.hlen(fence)).toBe(302);
      expect(await r.redis.zcard(fenced)).toBe(302);
      // (The legacy field was indexed by that poll: it ages from then.)
      await sleep(600);
      await store.list();
      expect(await r.redis.hgetall(fence)).toEqual({ kept: "1" });
      expect(await r.redis.zrange(fenced, "0", "-1")).toEqual(["kept"]);
    } finally {
      await r.cleanup();
    }
  });

  it("a store that lost its data refuses until its live leases are put back from the source: once for all waiting callers, an ended one reported expired once", async () => {
    const r = await createTestRedis();
    try {
      let asked = 0;
      const restored: Array<[number, number]> = [];
      let source: Lease[] = [];
      const store = new RedisLeaseStore(r.redis, r.prefix, {
        restoreFrom: async () => {
          asked++;
          await new Promise((done) => setTimeout(done, 50));
          return source;
        },
        onRestored: (n, ended) => restored.push([n, ended]),
      });
      // A new store: restored from an empty source at its first call.
      expect((await store.list()).leases).toEqual([]);
      expect(asked).toBe(1);
      const a = await store.acquire({ leaseId: newLeaseId(), workerId: "w1", tenantId: 3, durationMs: 60_000, fencingToken: 10 });
      const b = await store.acquire({ leaseId: newLeaseId(), workerId: "w2", tenantId: 4, durationMs: 60_000, fencingToken: 11 });
      if (!a.ok || !b.ok) throw new Error("grants");
      const gone: Lease = { ...b.lease, id: newLeaseId(), workerId: "w3", expiresAtMs: b.nowMs - 1 };
      // Redis loses everything; the audit still knows a's and b's leases, and one that has ended since.
      await r.redis.del(...leaseKeys(r.prefix));
      source = [a.lease, b.lease, gone];
      const [list, other, get] = await Promise.all([
        store.list(),
        store.acquire({ leaseId: newLeaseId(), workerId: "w1", tenantId: 5, durationMs: 60_000, fencingToken: 12 }),
        store.get(b.lease.id),
      ]);
      expect(asked).toBe(2);
      expect(restored).toEqual([
        [0, 0],
        [2, 1],
      ]);
      expect(list.leases.map((l) => l.id).sort()).toEqual([a.lease.id, b.lease.id].sort());
      expect(list.leases.find((l) => l.id === a.lease.id)).toEqual(a.lease);
      // Nobody else gets a restored worker; the holder's lease is found.
      expect(other).toMatchObject({ ok: false, reason: "held", holderExpiresAtMs: a.lease.expiresAtMs });
      expect(get.lease).toEqual(b.lease);
      // The ended lease is reported once, to one caller.
      const expired = [list, other, get].flatMap((x) => x.expired.map((l) => l.id));
      expect(expired).toEqual([gone.id]);
      // A token below a restored one is stale on its worker.
      expect(await store.release({ leaseId: a.lease.id, tenantId: 3 })).toMatchObject({ ok: true });
      expect(await store.acquire({ leaseId: newLeaseId(), workerId: "w1", tenantId: 5, durationMs: 1_000, fencingToken: 9 })).toMatchObject({ ok: false, reason: "stale_token", highestToken: 10 });
      // A source that cannot be read: the call fails (the router answers 503);
      // calls within restoreRetryMs get that error without asking it again; then it is asked again.
      await r.redis.del(...leaseKeys(r.prefix));
      let failedAsks = 0;
      const failing = new RedisLeaseStore(r.redis, r.prefix, {
        restoreRetryMs: 300,
        restoreFrom: async () => {
          failedAsks++;
          throw new Error(`Postgres away ${failedAsks}`);
        },
      });
      await expect(failing.list()).rejects.toThrow("Postgres away 1");
      await expect(failing.get(a.lease.id)).rejects.toThrow("Postgres away 1");
      expect(failedAsks).toBe(1);
      await new Promise((done) => setTimeout(done, 350));
      await expect(failing.list()).rejects.toThrow("Postgres away 2");
      expect(failedAsks).toBe(2);
      source = [a.lease];
      expect((await store.list()).leases.map((l) => l.id)).toEqual([a.lease.id]);
      expect(asked).toBe(3);
    } finally {
      await r.cleanup();
    }
  });
});
