// Loads the lease Lua scripts from packages/state/lua/ and registers them on
// a Redis connection once, with ioredis defineCommand (EVALSHA, falling back
// to EVAL after NOSCRIPT). lease_lib.lua is prepended to each script.
import { luaSource } from "../lua.ts";
import type { RedisLike } from "../redis.ts";

const scriptNames = ["acquire", "get", "extend", "release", "list", "restore"] as const;
export type LeaseScript = (typeof scriptNames)[number];

/** Every lease script takes the same six keys; see lease_lib.lua. */
export const LEASE_SCRIPT_KEYS = 6;

export type LeaseCommands = {
  [K in LeaseScript as `syLease_${K}`]: (...keysThenArgs: string[]) => Promise<unknown>;
};

let sources: Record<LeaseScript, string> | undefined;

function loadSources(): Record<LeaseScript, string> {
  if (sources) return sources;
  const lib = luaSource("lease_lib.lua");
  const out = {} as Record<LeaseScript, string>;
  for (const name of scriptNames) out[name] = `${lib}\n${luaSource(`lease_${name}.lua`)}`;
  return (sources = out);
}

const registered = new WeakSet<RedisLike>();

/** The connection, with the lease commands defined on it (once per connection). */
export function leaseCommands(redis: RedisLike): RedisLike & LeaseCommands {
  if (!registered.has(redis)) {
    const src = loadSources();
    for (const name of scriptNames) redis.defineCommand(`syLease_${name}`, { numberOfKeys: LEASE_SCRIPT_KEYS, lua: src[name] });
    registered.add(redis);
  }
  return redis as RedisLike & LeaseCommands;
}
