// Loads the budget Lua scripts from packages/state/lua/ and registers them on
// a Redis connection once, with ioredis defineCommand (EVALSHA, falling back
// to EVAL after NOSCRIPT). budget_lib.lua is prepended to each script.
import { luaSource } from "../lua.ts";
import type { RedisLike } from "../redis.ts";

const scriptNames = ["reserve", "settle", "release", "snapshot", "holds", "rebuild"] as const;
export type BudgetScript = (typeof scriptNames)[number];

/** Every budget script takes the same four keys; see budget_lib.lua. */
export const BUDGET_SCRIPT_KEYS = 4;

type Reply = Promise<unknown>;
export type BudgetCommands = {
  [K in BudgetScript as `syBudget_${K}`]: (...keysThenArgs: string[]) => Reply;
};

let sources: Record<BudgetScript, string> | undefined;

function loadSources(): Record<BudgetScript, string> {
  if (sources) return sources;
  const lib = luaSource("budget_lib.lua");
  const out = {} as Record<BudgetScript, string>;
  for (const name of scriptNames) out[name] = `${lib}\n${luaSource(`budget_${name}.lua`)}`;
  return (sources = out);
}

const registered = new WeakSet<RedisLike>();

/** The connection, with the budget commands defined on it (once per connection). */
export function budgetCommands(redis: RedisLike): RedisLike & BudgetCommands {
  if (!registered.has(redis)) {
    const src = loadSources();
    for (const name of scriptNames) redis.defineCommand(`syBudget_${name}`, { numberOfKeys: BUDGET_SCRIPT_KEYS, lua: src[name] });
    registered.add(redis);
  }
  return redis as RedisLike & BudgetCommands;
}
