// Rate limits shared by every router: requests and tokens per window, per
// scope (the tenant, one of its keys). A request is taken against all its
// scopes at once, or against none: one atomic step (one Lua script on Redis).
// Twins: Redis (redis.ts) and in-process (memory.ts), one contract suite.

/** One scope's limits; undefined on a dimension: unlimited there. */
export interface RateScope {
  /** "tenant", or "key:<prefix>" for one API key's own limit. */
  name: string;
  requests?: number;
  tokens?: number;
}

export interface RateTakeInput {
  tenantId: number;
  /** The router-minted request id: taking it twice counts it once. */
  requestId: string;
  /** Tokens reserved for it now (an upper bound of its prompt), corrected by settle. */
  tokens: number;
  /** One or two scopes (the tenant's, a key's); all or none are counted. */
  scopes: RateScope[];
  windowMs: number;
}

/** A scope after the take (counts include the request when it was admitted). */
export interface RateScopeState {
  scope: RateScope;
  requests: number;
  tokens: number;
  /** When the oldest request still counted leaves the window (ms from now; 0: none counted). */
  resetMs: number;
}

export type RateTakeResult =
  | { ok: true; states: RateScopeState[] }
  | {
      ok: false;
      /** The scope and dimension that refused it. */
      scope: RateScope;
      dimension: "requests" | "tokens";
      /** How long until it would fit; undefined: never (the request alone is over the limit). */
      retryAfterMs: number | undefined;
      states: RateScopeState[];
    };

export interface RateSettleInput {
  tenantId: number;
  requestId: string;
  /** The scopes it was taken against. */
  scopes: RateScope[];
  /** The tokens it really used (prompt + completion; 0 when it produced nothing). */
  tokens: number;
  windowMs: number;
}

export interface RateLimitStore {
  take(input: RateTakeInput): Promise<RateTakeResult>;
  /** Corrects the request's reserved tokens to what it used (nothing once it has left the window). */
  settle(input: RateSettleInput): Promise<void>;
}

/** Largest limits a store accepts (the CLI refuses more). */
export const MAX_RATE_REQUESTS = 10_000_000;
export const MAX_RATE_TOKENS = 10_000_000_000;
/** Longest window (a day). */
export const MAX_RATE_WINDOW_MS = 86_400_000;

export class RateLimitInputError extends Error {
  override name = "RateLimitInputError";
}

const scopeName = /^(tenant|key:[A-Za-z0-9_-]{1,64})$/;

export function checkRateInput(i: { tenantId: number; requestId: string; tokens: number; scopes: RateScope[]; windowMs: number }): void {
  if (!Number.isSafeInteger(i.tenantId) || i.tenantId < 0) throw new RateLimitInputError(`tenant id ${i.tenantId} is not a non-negative integer`);
  if (!/^[A-Za-z0-9_.:-]{1,128}$/.test(i.requestId)) throw new RateLimitInputError("request id is not a token");
  if (!Number.isSafeInteger(i.tokens) || i.tokens < 0 || i.tokens > MAX_RATE_TOKENS) throw new RateLimitInputError(`tokens ${i.tokens} out of range`);
  if (!Number.isSafeInteger(i.windowMs) || i.windowMs < 1 || i.windowMs > MAX_RATE_WINDOW_MS) throw new RateLimitInputError(`window ${i.windowMs} ms out of range`);
  if (i.scopes.length < 1 || i.scopes.length > 2) throw new RateLimitInputError("one or two scopes");
  for (const s of i.scopes) {
    if (!scopeName.test(s.name)) throw new RateLimitInputError(`scope '${s.name}' is not tenant or key:<prefix>`);
    if (s.requests !== undefined && (!Number.isSafeInteger(s.requests) || s.requests < 0 || s.requests > MAX_RATE_REQUESTS)) throw new RateLimitInputError(`requests limit ${s.requests} out of range`);
    if (s.tokens !== undefined && (!Number.isSafeInteger(s.tokens) || s.tokens < 0 || s.tokens > MAX_RATE_TOKENS)) throw new RateLimitInputError(`tokens limit ${s.tokens} out of range`);
  }
}
