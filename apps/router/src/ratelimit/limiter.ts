// The rate-limit stage of an inference request: its tenant's and key's
// limits (limits.ts), one take in the shared store (one Redis round trip,
// none for a tenant without limits), OpenAI's x-ratelimit-* headers on the
// answer, 429 with Retry-After when over. The ticket corrects the reserved
// tokens (the prompt's upper bound) to the real usage when the request ends.
import type { KeyOwner } from "@switchyard/db";
import type { RateLimitStore, RateScope, RateScopeState, RateTakeResult } from "@switchyard/state";
import type { Usage } from "../backends/usage.ts";
import { ApiError } from "../errors.ts";
import type { Logger } from "../observability/log.ts";
import type { RateLimitDirectory, TenantRateLimits } from "./limits.ts";

export interface RateLimiterDeps {
  store: RateLimitStore;
  limits: RateLimitDirectory;
  windowMs: number;
  log: Logger;
}

/** What a request took: its headers, and the settle that corrects its tokens (once). */
export interface RateTicket {
  headers: Record<string, string>;
  /** The usage it ended with (none: it produced nothing, unless it streamed something, then the reservation stands). */
  settle(usage: Usage | undefined, produced?: boolean): void;
}

/** OpenAI's duration format for x-ratelimit-reset-*: "20ms", "1.5s", "6m0s". */
export function resetText(ms: number): string {
  if (ms <= 0) return "0s";
  if (ms < 1000) return `${Math.ceil(ms)}ms`;
  const s = ms / 1000;
  if (s < 60) return `${Math.round(s * 1000) / 1000}s`;
  const m = Math.floor(s / 60);
  return `${m}m${Math.round(s - m * 60)}s`;
}

/** The binding scope of one dimension: the one with the fewest left. */
function binding(states: RateScopeState[], dim: "requests" | "tokens") {
  let best: { limit: number; remaining: number; resetMs: number } | undefined;
  for (const s of states) {
    const limit = s.scope[dim];
    if (limit === undefined) continue;
    const remaining = Math.max(0, limit - s[dim]);
    if (!best || remaining < best.remaining) best = { limit, remaining, resetMs: s.resetMs };
  }
  return best;
}

export function rateHeaders(r: RateTakeResult): Record<string, string> {
  const out: Record<string, string> = {};
  for (const dim of ["requests", "tokens"] as const) {
    const b = binding(r.states, dim);
    if (!b) continue;
    out[`x-ratelimit-limit-${dim}`] = String(b.limit);
    out[`x-ratelimit-remaining-${dim}`] = String(b.remaining);
    out[`x-ratelimit-reset-${dim}`] = resetText(b.resetMs);
  }
  return out;
}

export class RateLimiter {
  constructor(private readonly deps: RateLimiterDeps) {}

  /**
   * Counts the request against its tenant's and key's limits; undefined when
   * neither has one — answered at once, not as a promise, when the limits
   * are cached (every request asks). Throws 429 rate_limit_exceeded when over.
   */
  take(owner: KeyOwner, requestId: string, promptTokens: () => number): RateTicket | undefined | Promise<RateTicket | undefined> {
    const limits = this.deps.limits.limitsOf(owner.tenantId);
    if (limits instanceof Promise) return limits.then((l) => (l ? this.takeWithin(l, owner, requestId, promptTokens) : undefined));
    return limits ? this.takeWithin(limits, owner, requestId, promptTokens) : undefined;
  }

  private async takeWithin(limits: TenantRateLimits, owner: KeyOwner, requestId: string, promptTokens: () => number): Promise<RateTicket | undefined> {
    const { deps } = this;
    const scopes: RateScope[] = [];
    if (limits.tenant) scopes.push({ name: "tenant", ...limits.tenant });
    const own = limits.keys.get(owner.prefix);
    if (own) scopes.push({ name: `key:${owner.prefix}`, ...own });
    if (scopes.length === 0) return undefined;
    const tokens = promptTokens();
    let r: RateTakeResult;
    try {
      r = await deps.store.take({ tenantId: owner.tenantId, requestId, tokens, scopes, windowMs: deps.windowMs });
    } catch (err) {
      // A rate limit is protection, not money: with its store down, requests go on (budgets still hold).
      deps.log.warn("rate limit store unavailable; request not counted", { error: (err as Error).message });
      return undefined;
    }
    const headers = rateHeaders(r);
    if (!r.ok) {
      const which = r.scope.name === "tenant" ? `tenant ${owner.tenantName}` : `API key ${owner.prefix}`;
      const limit = r.scope[r.dimension]!;
      if (r.retryAfterMs === undefined) {
        throw new ApiError(
          "rate_limit_exceeded",
          r.dimension === "tokens" ? `request needs ${tokens} tokens, more than the ${limit} per window ${which} may use` : `${which} may send no requests`,
          null,
          { ...headers, "x-should-retry": "false" },
        );
      }
      const retry = { "retry-after": String(Math.max(1, Math.ceil(r.retryAfterMs / 1000))), "retry-after-ms": String(r.retryAfterMs) };
      throw new ApiError("rate_limit_exceeded", `rate limit reached for ${which}: ${limit} ${r.dimension} per ${resetText(deps.windowMs)}; retry in ${resetText(r.retryAfterMs)}`, null, { ...headers, ...retry });
    }
    let settled = false;
    return {
      headers,
      settle: (usage, produced = false) => {
        if (settled) return;
        settled = true;
        const used = usage ? usage.prompt + usage.completion : produced ? undefined : 0;
        if (used === undefined || used === tokens) return;
        deps.store.settle({ tenantId: owner.tenantId, requestId, scopes, tokens: Math.max(0, Math.min(used, 10_000_000_000)), windowMs: deps.windowMs }).catch((err: unknown) => {
          deps.log.warn("rate limit settle failed; the reservation stands until it leaves the window", { error: (err as Error).message });
        });
      },
    };
  }
}
