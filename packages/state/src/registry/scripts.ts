// Loads the registry's Lua scripts from packages/state/lua/ and registers them
// on a Redis connection once, with ioredis defineCommand (EVALSHA, falling
// back to EVAL after NOSCRIPT).
import { luaSource } from "../lua.ts";
import type { RedisLike } from "../redis.ts";

export type RegistryCommands = {
  /** registry_read.lua: index key, invited key, keys…, maxBytes, heartbeat key count, heartbeat key prefix length → per key after the index false | -1 | -2 | length | value. */
  syRegistry_read(...keysThenArgs: string[]): Promise<Array<string | number | null>>;
  /** registry_ids.lua: index key, invited key, epoch key, epoch to write if none → [epoch, ...ids]. */
  syRegistry_ids(index: string, invited: string, epochKey: string, candidate: string): Promise<string[]>;
};

const scripts = { syRegistry_read: "registry_read.lua", syRegistry_ids: "registry_ids.lua" } as const;

const sources = new Map<string, string>();
const registered = new WeakSet<RedisLike>();

/** The connection, with the registry commands defined on it (once per connection). */
export function registryCommands(redis: RedisLike): RedisLike & RegistryCommands {
  if (!registered.has(redis)) {
    redis.defineCommand("syRegistry_read", { lua: source("syRegistry_read") });
    redis.defineCommand("syRegistry_ids", { numberOfKeys: 3, lua: source("syRegistry_ids") });
    registered.add(redis);
  }
  return redis as RedisLike & RegistryCommands;
}

function source(name: keyof typeof scripts): string {
  let s = sources.get(name);
  if (s === undefined) sources.set(name, (s = luaSource(scripts[name])));
  return s;
}
