// Loads the lease Lua scripts from packages/state/lua/ and registers them on
// a Redis connection once, with ioredis defineCommand (EVALSHA, falling back
// to EVAL after NOSCRIPT). lease_lib.lua is prepended to each script.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import type { RedisLike } from "../redis.ts";

const scriptNames = ["acquire", "get", "extend", "release", "list"] as const;
export type LeaseScript = (typeof scriptNames)[number];

/** Every lease script takes the same four keys; see lease_lib.lua. */
export const LEASE_SCRIPT_KEYS = 4;

export type LeaseCommands = {
  [K in LeaseScript as `syLease_${K}`]: (...keysThenArgs: string[]) => Promise<unknown>;
};

/** packages/state/lua, found from this module (sources, or a bundle under dist/). */
function findLuaDir(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    for (const candidate of [path.join(dir, "lua"), path.join(dir, "packages", "state", "lua")]) {
      if (existsSync(path.join(candidate, "lease_lib.lua"))) return candidate;
    }
    dir = path.dirname(dir);
  }
  throw new Error("cannot find packages/state/lua (lease Lua scripts)");
}

let sources: Record<LeaseScript, string> | undefined;

function loadSources(): Record<LeaseScript, string> {
  if (sources) return sources;
  const dir = findLuaDir();
  const lib = readFileSync(path.join(dir, "lease_lib.lua"), "utf8");
  const out = {} as Record<LeaseScript, string>;
  for (const name of scriptNames) out[name] = `${lib}\n${readFileSync(path.join(dir, `lease_${name}.lua`), "utf8")}`;
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
