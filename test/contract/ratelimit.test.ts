import { describe, expect, it } from "vitest";
import { MemoryRateLimitStore, rateLimitKeys, RedisRateLimitStore } from "@switchyard/state";
import { createTestRedis } from "../helpers/env.ts";
import { rateLimitContract } from "./ratelimit.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins(rateLimitContract, {
  redis: (r) => new RedisRateLimitStore(r.redis, r.prefix),
  memory: (clock) => new MemoryRateLimitStore(clock),
});

describe("RedisRateLimitStore keys", () => {
  it("a tenant's scopes share its hash tag and expire", async () => {
    const r = await createTestRedis();
    try {
      const store = new RedisRateLimitStore(r.redis, r.prefix);
      await store.take({ tenantId: 7, requestId: "req_a", tokens: 3, windowMs: 10_000, scopes: [{ name: "tenant", requests: 5 }, { name: "key:sy_0123abcd", tokens: 50 }] });
      const keys = (await r.redis.keys(`${r.prefix}*`)).sort();
      expect(keys).toEqual([...rateLimitKeys(r.prefix, 7, "tenant"), ...rateLimitKeys(r.prefix, 7, "key:sy_0123abcd")].sort());
      for (const k of keys) {
        expect(k.startsWith(`${r.prefix}{rl:7}:`)).toBe(true);
        expect(await r.redis.pttl(k)).toBeGreaterThan(0);
      }
    } finally {
      await r.cleanup();
    }
  });
});
