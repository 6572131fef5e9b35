// Redis RateLimitStore: one script (lua/ratelimit.lua) per take or settle,
// over each scope's two keys `${prefix}{rl:<tenant>}:<scope>:{log,tok}`.
// The tenant's hash tag puts its scopes in one Cluster slot.
import { luaSource } from "../lua.ts";
import type { RedisLike } from "../redis.ts";
import { checkRateInput, type RateLimitStore, type RateScope, type RateScopeState, type RateSettleInput, type RateTakeInput, type RateTakeResult } from "./store.ts";

type RateCommands = { syRateLimit: (numKeys: number, ...keysThenArgs: Array<string | number>) => Promise<unknown> };

let source: string | undefined;
const registered = new WeakSet<RedisLike>();

function commands(redis: RedisLike): RedisLike & RateCommands {
  if (!registered.has(redis)) {
    // The number of keys varies (one or two scopes): given on each call.
    redis.defineCommand("syRateLimit", { lua: (source ??= luaSource("ratelimit.lua")) });
    registered.add(redis);
  }
  return redis as RedisLike & RateCommands;
}

/** The two keys of one scope of a tenant (the hash tag is the tenant's). */
export function rateLimitKeys(prefix: string, tenantId: number, scope: string): [log: string, tok: string] {
  const base = `${prefix}{rl:${tenantId}}:${scope}`;
  return [`${base}:log`, `${base}:tok`];
}

export class RedisRateLimitStore implements RateLimitStore {
  private readonly redis: RedisLike & RateCommands;
  constructor(
    redis: RedisLike,
    private readonly prefix: string,
  ) {
    this.redis = commands(redis);
  }

  private keys(tenantId: number, scopes: RateScope[]): string[] {
    return scopes.flatMap((s) => rateLimitKeys(this.prefix, tenantId, s.name));
  }

  async take(input: RateTakeInput): Promise<RateTakeResult> {
    checkRateInput(input);
    const keys = this.keys(input.tenantId, input.scopes);
    const limits = input.scopes.flatMap((s) => [s.requests ?? -1, s.tokens ?? -1]);
    const reply = (await this.redis.syRateLimit(keys.length, ...keys, "take", input.requestId, input.windowMs, input.tokens, ...limits)) as Array<number | string>;
    const now = Number(reply[1]);
    const ok = Number(reply[0]) === 1;
    const from = ok ? 2 : 5;
    const states: RateScopeState[] = input.scopes.map((scope, i) => {
      const oldest = Number(reply[from + 3 * i + 2]);
      return {
        scope,
        requests: Number(reply[from + 3 * i]),
        tokens: Number(reply[from + 3 * i + 1]),
        resetMs: oldest < 0 ? 0 : Math.max(0, oldest + input.windowMs - now),
      };
    });
    if (ok) return { ok: true, states };
    const retry = Number(reply[2]);
    return {
      ok: false,
      scope: input.scopes[Number(reply[4]) - 1]!,
      dimension: reply[3] === "tokens" ? "tokens" : "requests",
      retryAfterMs: retry < 0 ? undefined : retry,
      states,
    };
  }

  async settle(input: RateSettleInput): Promise<void> {
    checkRateInput(input);
    const keys = this.keys(input.tenantId, input.scopes);
    await this.redis.syRateLimit(keys.length, ...keys, "settle", input.requestId, input.windowMs, input.tokens);
  }
}
