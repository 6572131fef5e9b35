// One contract for every RateLimitStore: the Redis script and the in-process
// store count requests and tokens in the same sliding windows.
import { describe, expect, it } from "vitest";
import type { RateLimitStore, RateScope } from "@switchyard/state";
import type { ClockedHarness } from "./twins.ts";

export type RateHarness = ClockedHarness<RateLimitStore>;

const WINDOW = 800;
let n = 0;
const rid = () => `req_${++n}_${Math.random().toString(36).slice(2, 8)}`;

export function rateLimitContract(name: string, make: () => Promise<RateHarness>, cleanup: (h: RateHarness) => Promise<void>) {
  describe(`RateLimitStore contract: ${name}`, () => {
    const withStore = (fn: (h: RateHarness, tenantId: number) => Promise<void>) => async () => {
      const h = await make();
      try {
        await fn(h, 2000 + (++n % 100_000));
      } finally {
        await cleanup(h);
      }
    };
    const take = (h: RateHarness, tenantId: number, scopes: RateScope[], tokens = 1, requestId = rid()) =>
      h.store.take({ tenantId, requestId, tokens, scopes, windowMs: WINDOW });

    it(
      "admits exactly the requests limit in a window, then says when the oldest leaves",
      withStore(async (h, t) => {
        const tenant: RateScope = { name: "tenant", requests: 3 };
        for (let i = 1; i <= 3; i++) {
          const r = await take(h, t, [tenant]);
          expect(r.ok).toBe(true);
          expect(r.states[0]).toMatchObject({ requests: i });
        }
        const refused = await take(h, t, [tenant]);
        expect(refused.ok).toBe(false);
        if (refused.ok) return;
        expect(refused.dimension).toBe("requests");
        expect(refused.scope.name).toBe("tenant");
        expect(refused.retryAfterMs).toBeGreaterThan(0);
        expect(refused.retryAfterMs).toBeLessThanOrEqual(WINDOW);
        expect(refused.states[0]).toMatchObject({ requests: 3 });
        await h.elapse(WINDOW + 50);
        const again = await take(h, t, [tenant]);
        expect(again).toMatchObject({ ok: true, states: [{ requests: 1 }] });
      }),
    );

    it(
      "counts tokens, refuses what would pass the limit, and a request larger than the limit never fits",
      withStore(async (h, t) => {
        const tenant: RateScope = { name: "tenant", tokens: 100 };
        expect((await take(h, t, [tenant], 60)).ok).toBe(true);
        expect((await take(h, t, [tenant], 40)).ok).toBe(true); // exactly the limit
        const over = await take(h, t, [tenant], 1);
        expect(over).toMatchObject({ ok: false, dimension: "tokens" });
        if (!over.ok) expect(over.retryAfterMs).toBeGreaterThan(0);
        const huge = await take(h, t, [tenant], 101);
        expect(huge).toMatchObject({ ok: false, dimension: "tokens", retryAfterMs: undefined });
      }),
    );

    it(
      "settle corrects the reserved tokens to what was used",
      withStore(async (h, t) => {
        const tenant: RateScope = { name: "tenant", tokens: 100 };
        const id = rid();
        expect((await take(h, t, [tenant], 90, id)).ok).toBe(true);
        expect((await take(h, t, [tenant], 20)).ok).toBe(false);
        await h.store.settle({ tenantId: t, requestId: id, scopes: [tenant], tokens: 30, windowMs: WINDOW });
        const r = await take(h, t, [tenant], 20);
        expect(r).toMatchObject({ ok: true, states: [{ tokens: 50 }] });
        // Settling more than reserved (completion tokens) counts them too.
        await h.store.settle({ tenantId: t, requestId: id, scopes: [tenant], tokens: 80, windowMs: WINDOW });
        expect(await take(h, t, [tenant], 1)).toMatchObject({ ok: false, dimension: "tokens" });
      }),
    );

    it(
      "a tenant and a key scope are taken together or not at all",
      withStore(async (h, t) => {
        const tenant: RateScope = { name: "tenant", requests: 3 };
        const keyA: RateScope = { name: "key:sy_aaaaaaaa", requests: 1 };
        const keyB: RateScope = { name: "key:sy_bbbbbbbb" };
        expect((await take(h, t, [tenant, keyA])).ok).toBe(true);
        const refused = await take(h, t, [tenant, keyA]);
        expect(refused).toMatchObject({ ok: false, scope: { name: "key:sy_aaaaaaaa" }, dimension: "requests" });
        // The refusal counted nowhere: the tenant still has two.
        expect(await take(h, t, [tenant, keyB])).toMatchObject({ ok: true, states: [{ requests: 2 }, { requests: 1 }] });
        expect((await take(h, t, [tenant, keyB])).ok).toBe(true);
        expect(await take(h, t, [tenant, keyB])).toMatchObject({ ok: false, scope: { name: "tenant" } });
        // Another tenant's window is its own.
        expect((await take(h, t + 1, [tenant, keyA])).ok).toBe(true);
      }),
    );

    it(
      "the same request id taken twice counts once; a zero limit never admits",
      withStore(async (h, t) => {
        const tenant: RateScope = { name: "tenant", requests: 1 };
        const id = rid();
        expect((await take(h, t, [tenant], 5, id)).ok).toBe(true);
        expect(await take(h, t, [tenant], 5, id)).toMatchObject({ ok: true, states: [{ requests: 1, tokens: 5 }] });
        expect(await take(h, t, [{ name: "key:sy_cccccccc", requests: 0 }])).toMatchObject({ ok: false, retryAfterMs: undefined });
      }),
    );

    it(
      "reports when the oldest counted request leaves the window",
      withStore(async (h, t) => {
        const tenant: RateScope = { name: "tenant", requests: 10 };
        const first = await take(h, t, [tenant]);
        expect(first.ok && first.states[0]!.resetMs).toBeGreaterThan(WINDOW / 2);
        await h.elapse(WINDOW / 2);
        const second = await take(h, t, [tenant]);
        expect(second.ok && second.states[0]!.resetMs).toBeLessThanOrEqual(WINDOW / 2 + 20);
      }),
    );
  });
}
