export * from "./store.ts";
export { MemoryRateLimitStore } from "./memory.ts";
export { RedisRateLimitStore, rateLimitKeys } from "./redis.ts";
