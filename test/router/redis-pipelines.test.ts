// Issue 14: the router's Redis connection (server.ts ROUTER_REDIS)
// auto-pipelines what a turn of requests sends together, but commands that
// always go one at a time are sent as they are: an auto-pipeline of one is an
// ioredis Pipeline built for nothing (~13 KB, a copy of every script's
// methods). The registry and lease polls (4/s each) and the ledger's XADD and
// drain read are such commands; before, their Pipelines were 7.5 % of an idle
// router's CPU. Real Redis; Pipelines are counted where ioredis builds them.
import type { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { openRedis, RedisLeaseStore, RedisRegistryStore, duplicateRedis, ledgerMarkKey, ledgerWatchCommands, watchLedgerStream, type RedisLike } from "@switchyard/state";
import { ROUTER_REDIS } from "../../apps/router/src/server.ts";
import { ledgerStreamKey } from "../../apps/router/src/billing/ledger-stream.ts";
import { record } from "../contract/registry.contract.ts";
import { REDIS_URL, uniqueName } from "../helpers/env.ts";

const prefix = `${uniqueName("pipelines")}:`;
const opened: RedisLike[] = [];

/** A connection with these options, and how many Pipelines it has built so far (auto-pipelines included). */
async function counted(opts: Parameters<typeof openRedis>[1]): Promise<{ redis: RedisLike; pipelines: () => number }> {
  const redis = await openRedis(REDIS_URL, opts);
  opened.push(redis);
  let n = 0;
  const r = redis as Redis;
  const build = r.pipeline.bind(r);
  r.pipeline = ((...args: Parameters<Redis["pipeline"]>) => {
    n++;
    return build(...args);
  }) as Redis["pipeline"];
  return { redis, pipelines: () => n };
}

/**
 * Pipelines built by what a router's polls and ledger send, once started: a
 * registry listing, a lease list, an XADD, a drain read and a look at where
 * the stream starts (ledger_watch.lua, every 0.5 s). (A store's first
 * listing also SCANs for older workers' keys, the lease store restores
 * itself once, and the drain creates its group once: all before the count.)
 */
async function pollsAndLedger(redis: RedisLike, pipelines: () => number): Promise<number> {
  const registry = new RedisRegistryStore(redis, prefix);
  const leases = new RedisLeaseStore(redis, prefix);
  const key = ledgerStreamKey(prefix);
  await registry.listing();
  // A lease store's first call finds it without its restored mark and restores it (lease_restore.lua): once, before the count.
  await leases.list();
  await redis.xgroup("CREATE", key, "ledger", "0", "MKSTREAM").catch(() => {});
  ledgerWatchCommands(redis);
  const before = pipelines();
  expect((await registry.listing()).workers.map((w) => w.id)).toEqual(["w1"]);
  expect((await leases.list()).leases).toEqual([]);
  await redis.xadd(key, "*", "r", "row");
  await redis.xreadgroup("GROUP", "ledger", "c1", "COUNT", 10, "STREAMS", key, ">");
  expect((await watchLedgerStream(redis, key, ledgerMarkKey(prefix))).length).toBeGreaterThanOrEqual(1);
  return pipelines() - before;
}

beforeAll(async () => {
  const seed = await openRedis(REDIS_URL);
  opened.push(seed);
  await new RedisRegistryStore(seed, prefix).publish(record("w1"), 30_000);
});

afterAll(async () => {
  const admin = opened[0]!;
  const keys = await admin.keys(`${prefix}*`);
  if (keys.length) await admin.del(...keys);
  for (const r of opened) r.disconnect();
});

describe("the router's Redis connection", () => {
  it("sends the polls' and the ledger's one-at-a-time commands without an auto-pipeline each", async () => {
    const { redis, pipelines } = await counted(ROUTER_REDIS);
    expect(await pollsAndLedger(redis, pipelines)).toBe(0);
  });

  it("(the same calls on an auto-pipelined connection without the list build one Pipeline per command)", async () => {
    const { redis, pipelines } = await counted({ autoPipelining: true });
    // The registry's ids, its read, the lease list, XADD, XREADGROUP, the ledger's watch.
    expect(await pollsAndLedger(redis, pipelines)).toBe(6);
  });

  it("keeps auto-pipelining for the rest, and the drain's own connection (a duplicate) keeps the list", async () => {
    const { redis, pipelines } = await counted(ROUTER_REDIS);
    await Promise.all([redis.get(`${prefix}a`), redis.get(`${prefix}b`)]);
    expect(pipelines()).toBe(1);
    const reader = duplicateRedis(redis);
    opened.push(reader);
    expect((reader as Redis).options.autoPipeliningIgnoredCommands).toEqual(expect.arrayContaining(["xreadgroup", "syRegistry_read", "syLease_list"]));
  });
});
