export * from "./store.ts";
export { MemoryLeaseStore } from "./memory.ts";
export { RedisLeaseStore, leaseKeys } from "./redis.ts";
