export * from "./clock.ts";
export * from "./redis.ts";
export * from "./registry/record.ts";
export * from "./registry/store.ts";
export { MemoryRegistryStore } from "./registry/memory.ts";
export { RedisRegistryStore, workerKey } from "./registry/redis.ts";
export * from "./registry/invites.ts";
export * from "./budget/index.ts";
export * from "./lease/index.ts";
