// Switchyard's state must not be evicted: budget counters, holds and
// heartbeats carry TTLs, so under a `volatile-*` policy (ElastiCache's
// default is volatile-lru) they are the first keys Redis drops at its
// memory limit, and a tenant's day whose counters are gone reads as
// unspent. A router started against such a Redis says so; against one
// that never evicts, it says nothing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { spawnRouter } from "../helpers/router-proc.ts";
import { createTestDb, waitFor, type TestDb } from "../helpers/env.ts";

let db: TestDb;
const servers: PrivateRedis[] = [];

beforeAll(async () => {
  db = await createTestDb();
});

afterAll(async () => {
  await Promise.all(servers.map((s) => s.stop()));
  await db?.drop();
});

/** What a router started against a Redis run with `redisArgs` printed by the time it listened (the check is done before it listens; `until`: also waits for that text to be read from its pipe). */
async function routerOutput(redisArgs: string[], until?: string): Promise<string> {
  const redis = await startPrivateRedis(redisArgs);
  servers.push(redis);
  const r = await spawnRouter({ DATABASE_URL: db.url, REDIS_URL: redis.url, SWITCHYARD_REDIS__KEY_PREFIX: "evict:" }, `router on redis ${redisArgs.join(" ")}`);
  try {
    if (until) await waitFor(() => r.proc.output().includes(until), { timeoutMs: 5_000, what: () => `"${until}" in: ${r.proc.output().slice(-400)}` });
    return r.proc.output();
  } finally {
    await r.stop();
  }
}

describe("the router's Redis eviction check", () => {
  it("warns at start when Redis may evict keys at its memory limit, naming the node and its policy", async () => {
    const out = await routerOutput(["--maxmemory", "64mb", "--maxmemory-policy", "volatile-lru"], "set maxmemory-policy noeviction");
    expect(out).toMatch(/127\.0\.0\.1:\d+ volatile-lru maxmemory=67108864/);
  }, 90_000);

  it("says nothing when Redis never evicts, or has no memory limit", async () => {
    for (const args of [["--maxmemory", "64mb", "--maxmemory-policy", "noeviction"], ["--maxmemory-policy", "allkeys-lru"]]) {
      expect(await routerOutput(args)).not.toContain("may evict keys");
    }
  }, 90_000);
});
