// Loads the registry's Lua script from packages/state/lua/ and registers it on
// a Redis connection once, with ioredis defineCommand (EVALSHA, falling back
// to EVAL after NOSCRIPT).
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { RedisLike } from "../redis.ts";

export type RegistryCommands = {
  /** registry_read.lua: index key, invited key, keys…, maxBytes, heartbeat key count, heartbeat key prefix length → per key after the index false | -1 | -2 | length | value. */
  syRegistry_read(...keysThenArgs: string[]): Promise<Array<string | number | null>>;
};

function loadSource(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    for (const candidate of [path.join(dir, "lua"), path.join(dir, "packages", "state", "lua")]) {
      const file = path.join(candidate, "registry_read.lua");
      if (existsSync(file)) return readFileSync(file, "utf8");
    }
    dir = path.dirname(dir);
  }
  throw new Error("cannot find packages/state/lua/registry_read.lua");
}

let source: string | undefined;
const registered = new WeakSet<RedisLike>();

/** The connection, with the registry command defined on it (once per connection). */
export function registryCommands(redis: RedisLike): RedisLike & RegistryCommands {
  if (!registered.has(redis)) {
    redis.defineCommand("syRegistry_read", { lua: (source ??= loadSource()) });
    registered.add(redis);
  }
  return redis as RedisLike & RegistryCommands;
}
