// In-process RateLimitStore (one router, `switchyard up`): the same sliding
// windows as ratelimit.lua, on a Clock passed in.
import { systemClock, type Clock } from "../clock.ts";
import { checkRateInput, type RateLimitStore, type RateScope, type RateScopeState, type RateSettleInput, type RateTakeInput, type RateTakeResult } from "./store.ts";

interface Entry {
  id: string;
  at: number;
  tokens: number;
}

/** One scope's window: admitted entries, oldest first. */
class Window {
  entries: Entry[] = [];
  sum = 0;
  prune(cutoff: number): void {
    let n = 0;
    while (n < this.entries.length && this.entries[n]!.at <= cutoff) this.sum -= this.entries[n++]!.tokens;
    if (n) this.entries.splice(0, n);
  }
  find(id: string): Entry | undefined {
    return this.entries.find((e) => e.id === id);
  }
}

export class MemoryRateLimitStore implements RateLimitStore {
  private readonly windows = new Map<string, Window>();
  constructor(private readonly clock: Clock = systemClock) {}

  private window(tenantId: number, scope: RateScope): Window {
    const k = `${tenantId}/${scope.name}`;
    let w = this.windows.get(k);
    if (!w) this.windows.set(k, (w = new Window()));
    return w;
  }

  async take(input: RateTakeInput): Promise<RateTakeResult> {
    checkRateInput(input);
    const now = this.clock.now();
    const ws = input.scopes.map((s) => this.window(input.tenantId, s));
    let refusal: { scope: RateScope; dimension: "requests" | "tokens"; wait: number } | undefined;
    input.scopes.forEach((scope, i) => {
      const w = ws[i]!;
      w.prune(now - input.windowMs);
      if (w.find(input.requestId)) return;
      let wait = -2;
      let dim: "requests" | "tokens" = "requests";
      const count = w.entries.length;
      if (scope.requests !== undefined && count + 1 > scope.requests) {
        wait = scope.requests === 0 ? -1 : w.entries[count - scope.requests]!.at + input.windowMs - now;
      }
      if (scope.tokens !== undefined && w.sum + input.tokens > scope.tokens) {
        let t = -1;
        if (input.tokens <= scope.tokens) {
          let freed = 0;
          for (const e of w.entries) {
            freed += e.tokens;
            if (w.sum - freed + input.tokens <= scope.tokens) {
              t = e.at + input.windowMs - now;
              break;
            }
          }
        }
        if (wait !== -1 && (t === -1 || t > wait)) {
          wait = t;
          dim = "tokens";
        }
      }
      if (wait !== -2 && refusal?.wait !== -1 && (wait === -1 || refusal === undefined || wait > refusal.wait)) refusal = { scope, dimension: dim, wait };
    });
    if (refusal) {
      const wait = refusal.wait === -1 ? undefined : Math.max(1, refusal.wait);
      return { ok: false, scope: refusal.scope, dimension: refusal.dimension, retryAfterMs: wait, states: this.states(input, ws, now) };
    }
    for (const w of ws) {
      if (w.find(input.requestId)) continue;
      w.entries.push({ id: input.requestId, at: now, tokens: input.tokens });
      w.sum += input.tokens;
    }
    return { ok: true, states: this.states(input, ws, now) };
  }

  private states(input: RateTakeInput, ws: Window[], now: number): RateScopeState[] {
    return input.scopes.map((scope, i) => {
      const w = ws[i]!;
      const oldest = w.entries[0];
      return { scope, requests: w.entries.length, tokens: w.sum, resetMs: oldest ? Math.max(0, oldest.at + input.windowMs - now) : 0 };
    });
  }

  async settle(input: RateSettleInput): Promise<void> {
    checkRateInput(input);
    const now = this.clock.now();
    for (const scope of input.scopes) {
      const w = this.window(input.tenantId, scope);
      w.prune(now - input.windowMs);
      const e = w.find(input.requestId);
      if (!e) continue;
      w.sum += input.tokens - e.tokens;
      e.tokens = input.tokens;
    }
  }
}
