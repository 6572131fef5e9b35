// The two twins of a clocked store (registry, budgets, leases) under one
// contract: the Redis implementation on a fresh key prefix of the real
// Redis, timed by Redis's own clock, and the in-process one on a manual
// clock.
import { ManualClock } from "@switchyard/state";
import { createTestRedis, sleep, type TestRedis } from "../helpers/env.ts";

export interface ClockedHarness<S> {
  store: S;
  /** Let `ms` of store time pass (real sleep for Redis, manual clock for memory). */
  elapse(ms: number): Promise<void>;
  /** The store's clock now, in the unit of its expiresAtMs fields. */
  now(): Promise<number>;
}

type Contract<S> = (name: string, make: () => Promise<ClockedHarness<S>>, cleanup: (h: ClockedHarness<S>) => Promise<void>) => void;

export function runOnBothTwins<S>(contract: Contract<S>, twins: { redis: (r: TestRedis) => S; memory: (clock: ManualClock) => S }): void {
  const redisOf = new WeakMap<ClockedHarness<S>, TestRedis>();
  contract(
    "redis",
    async () => {
      const r = await createTestRedis();
      const h: ClockedHarness<S> = {
        store: twins.redis(r),
        elapse: sleep,
        now: async () => {
          const [sec, usec] = await r.redis.time();
          return Number(sec) * 1000 + Math.floor(Number(usec) / 1000);
        },
      };
      redisOf.set(h, r);
      return h;
    },
    async (h) => redisOf.get(h)!.cleanup(),
  );
  contract(
    "in-process",
    async () => {
      const clock = new ManualClock();
      return { store: twins.memory(clock), elapse: async (ms) => clock.advance(ms), now: async () => clock.now() };
    },
    async () => {},
  );
}
