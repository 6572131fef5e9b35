import { describe, expect, it } from "vitest";
import { MemoryResponseStore, RedisResponseStore, responseKey } from "@switchyard/state";
import { createTestRedis } from "../helpers/env.ts";
import { responseContract } from "./response.contract.ts";
import { runOnBothTwins } from "./twins.ts";

runOnBothTwins(responseContract, {
  redis: (r) => new RedisResponseStore(r.redis, r.prefix),
  memory: (clock) => new MemoryResponseStore(clock),
});

describe("RedisResponseStore keys", () => {
  it("one key per (tenant, id), hash-tagged on the pair, with Redis's own expiry", async () => {
    const r = await createTestRedis();
    try {
      const store = new RedisResponseStore(r.redis, r.prefix);
      const id = `resp_${"ab".repeat(16)}`;
      await store.put(42, id, "{}", 60_000);
      expect(await r.redis.keys(`${r.prefix}*`)).toEqual([responseKey(r.prefix, 42, id)]);
      expect(responseKey(r.prefix, 42, id)).toBe(`${r.prefix}response:{42:${id}}`);
      const ttl = await r.redis.pttl(responseKey(r.prefix, 42, id));
      expect(ttl).toBeGreaterThan(50_000);
      expect(ttl).toBeLessThanOrEqual(60_000);
    } finally {
      await r.cleanup();
    }
  });
});
