import { ManualClock, MemoryRegistryStore, RedisRegistryStore } from "@switchyard/state";
import { createTestRedis, sleep, type TestRedis } from "../helpers/env.ts";
import { registryContract, type RegistryHarness } from "./registry.contract.ts";

const redisOf = new WeakMap<RegistryHarness, TestRedis>();

registryContract(
  "redis",
  async () => {
    const r = await createTestRedis();
    const h: RegistryHarness = { store: new RedisRegistryStore(r.redis, r.prefix), elapse: sleep };
    redisOf.set(h, r);
    return h;
  },
  async (h) => redisOf.get(h)!.cleanup(),
);

registryContract(
  "in-process",
  async () => {
    const clock = new ManualClock();
    return { store: new MemoryRegistryStore(clock), elapse: async (ms) => clock.advance(ms) };
  },
  async () => {},
);
