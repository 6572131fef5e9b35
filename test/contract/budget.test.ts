import { describe, expect, it } from "vitest";
import { budgetKeys, MemoryBudgetStore, RedisBudgetStore } from "@switchyard/state";
import { createTestRedis } from "../helpers/env.ts";
import { budgetContract } from "./budget.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins(budgetContract, {
  redis: (r) => new RedisBudgetStore(r.redis, r.prefix),
  memory: (clock) => new MemoryBudgetStore(clock),
});

describe("RedisBudgetStore keys", () => {
  it("every key of a tenant's day carries the tenant hash tag and a TTL", async () => {
    const r = await createTestRedis();
    try {
      const store = new RedisBudgetStore(r.redis, r.prefix, { keyTtlMs: 60_000 });
      await store.reserve({ tenantId: 42, day: "2026-11-30", requestId: "a", amountMicro: 5n, limitMicro: 10n, ttlMs: 10_000 });
      await store.settle({ tenantId: 42, day: "2026-11-30", requestId: "b", actualMicro: 1n });
      const keys = (await r.redis.keys(`${r.prefix}*`)).sort();
      expect(keys).toEqual(budgetKeys(r.prefix, 42, "2026-11-30").sort());
      for (const k of keys) {
        expect(k.startsWith(`${r.prefix}{tenant:42}:budget:2026-11-30:`)).toBe(true);
        const ttl = await r.redis.pttl(k);
        expect(ttl).toBeGreaterThan(50_000);
        expect(ttl).toBeLessThanOrEqual(60_000);
      }
      // Two stores on one connection share the script registration.
      const again = new RedisBudgetStore(r.redis, r.prefix);
      expect(await again.snapshot(42, "2026-11-30")).toMatchObject({ spentMicro: 1n, heldMicro: 5n });
    } finally {
      await r.cleanup();
    }
  });
});
