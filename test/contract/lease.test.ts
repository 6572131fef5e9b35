import { describe, expect, it } from "vitest";
import { leaseKeys, MemoryLeaseStore, newLeaseId, RedisLeaseStore } from "@switchyard/state";
import { createTestRedis } from "../helpers/env.ts";
import { leaseContract } from "./lease.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins(leaseContract, {
  redis: (r) => new RedisLeaseStore(r.redis, r.prefix),
  memory: (clock) => new MemoryLeaseStore(clock),
});

describe("RedisLeaseStore keys", () => {
  it("every lease key carries the {leases} hash tag; an empty store leaves only the fence", async () => {
    const r = await createTestRedis();
    try {
      const store = new RedisLeaseStore(r.redis, r.prefix);
      const a = await store.acquire({ leaseId: newLeaseId(), workerId: "w1", tenantId: 3, durationMs: 60_000, fencingToken: 4 });
      expect(a.ok).toBe(true);
      const keys = (await r.redis.keys(`${r.prefix}*`)).sort();
      expect(keys).toEqual(leaseKeys(r.prefix).sort());
      for (const k of keys) expect(k.startsWith(`${r.prefix}{leases}:`)).toBe(true);
      if (a.ok) await store.release({ leaseId: a.lease.id, tenantId: 3 });
      expect(await r.redis.keys(`${r.prefix}*`)).toEqual([leaseKeys(r.prefix)[3]]);
      // Two stores on one connection share the script registration.
      const again = new RedisLeaseStore(r.redis, r.prefix);
      expect((await again.list()).leases).toEqual([]);
    } finally {
      await r.cleanup();
    }
  });
});
