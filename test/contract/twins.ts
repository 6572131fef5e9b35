// The twins of a clocked store (registry, budgets, leases) under one
// contract: the Redis implementation on a fresh key prefix of the real
// single-node Redis and of a real 3-master + 3-replica Redis Cluster (started
// for the file, removed after it), both timed by Redis's own clock, and the
// in-process one on a manual clock.
import { afterAll } from "vitest";
import { ManualClock, openRedis, scanKeys, type RedisLike } from "@switchyard/state";
import { createTestRedis, sleep, uniqueName } from "../helpers/env.ts";
import { startRedisCluster, type TestCluster } from "../helpers/redis-cluster.ts";

export interface ClockedHarness<S> {
  store: S;
  /** Let `ms` of store time pass (real sleep for Redis, manual clock for memory). */
  elapse(ms: number): Promise<void>;
  /** The store's clock now, in the unit of its expiresAtMs fields. */
  now(): Promise<number>;
}

/** What a Redis twin is built from: a connection (one node or a Cluster) and a key prefix of its own. */
export interface RedisTwinInput {
  redis: RedisLike;
  prefix: string;
}

type Contract<S> = (name: string, make: () => Promise<ClockedHarness<S>>, cleanup: (h: ClockedHarness<S>) => Promise<void>) => void;

async function redisNow(r: RedisLike): Promise<number> {
  const [sec, usec] = await r.time();
  return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
}

let cluster: Promise<TestCluster> | undefined;
// Registered when a test file imports this module (a hook registered inside a
// running test would never run, and the cluster's servers would outlive it).
afterAll(async () => {
  const c = cluster;
  cluster = undefined;
  await (await c?.catch(() => undefined))?.stop();
}, 60_000);

/** One cluster per test file, started on first use, stopped after the file. */
export function fileCluster(): Promise<TestCluster> {
  cluster ??= startRedisCluster();
  return cluster;
}

/** A fresh prefix on the file's cluster; cleanup deletes its keys on every master. */
export async function createClusterRedis(): Promise<RedisTwinInput & { cleanup(): Promise<void> }> {
  const c = await fileCluster();
  const redis = await openRedis({ cluster: c.seeds });
  const prefix = `${uniqueName("c")}:`;
  return {
    redis,
    prefix,
    cleanup: async () => {
      // Keys of several slots: one DEL each (a multi-key DEL must stay in one slot).
      for (const k of await scanKeys(redis, `${prefix}*`)) await redis.del(k);
      redis.disconnect();
    },
  };
}

export function runOnBothTwins<S>(contract: Contract<S>, twins: { redis: (r: RedisTwinInput) => S; memory: (clock: ManualClock) => S }): void {
  const cleanups = new WeakMap<ClockedHarness<S>, () => Promise<void>>();
  for (const [name, open] of [
    ["redis", createTestRedis],
    ["redis cluster", createClusterRedis],
  ] as const) {
    contract(
      name,
      async () => {
        const r = await open();
        const h: ClockedHarness<S> = { store: twins.redis(r), elapse: sleep, now: () => redisNow(r.redis) };
        cleanups.set(h, r.cleanup);
        return h;
      },
      async (h) => cleanups.get(h)!(),
    );
  }
  contract(
    "in-process",
    async () => {
      const clock = new ManualClock();
      return { store: twins.memory(clock), elapse: async (ms) => clock.advance(ms), now: async () => clock.now() };
    },
    async () => {},
  );
}
