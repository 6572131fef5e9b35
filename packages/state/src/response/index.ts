export * from "./store.ts";
export { MemoryResponseStore } from "./memory.ts";
export { RedisResponseStore, responseKey } from "./redis.ts";
