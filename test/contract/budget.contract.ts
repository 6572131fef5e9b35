// One contract for every BudgetStore: the Redis scripts and the in-process
// store must hold, settle, release and rebuild money the same way.
import { describe, expect, it } from "vitest";
import type { BudgetStore } from "@switchyard/state";
import type { ClockedHarness } from "./twins.ts";

export type BudgetHarness = ClockedHarness<BudgetStore>;

const DAY = "2026-11-30";
const HOUR = 3_600_000;
let n = 0;
const rid = (what = "req") => `${what}-${++n}-${Math.random().toString(36).slice(2, 8)}`;

export function budgetContract(name: string, make: () => Promise<BudgetHarness>, cleanup: (h: BudgetHarness) => Promise<void>) {
  describe(`BudgetStore contract: ${name}`, () => {
    const withStore = (fn: (h: BudgetHarness, tenantId: number) => Promise<void>) => async () => {
      const h = await make();
      try {
        await fn(h, 1000 + (++n % 100_000));
      } finally {
        await cleanup(h);
      }
    };

    it(
      "reserves within the limit",
      withStore(async ({ store }, tenantId) => {
        const r = await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 300n, limitMicro: 1000n, ttlMs: HOUR });
        expect(r).toEqual({ ok: true, spentMicro: 0n, heldMicro: 300n });
        const r2 = await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 700n, limitMicro: 1000n, ttlMs: HOUR });
        expect(r2).toEqual({ ok: true, spentMicro: 0n, heldMicro: 1000n }); // exactly the limit is allowed
        expect(await store.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 0n, heldMicro: 1000n });
      }),
    );

    it(
      "refuses a hold that would pass the limit, and says what is left",
      withStore(async ({ store }, tenantId) => {
        await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 600n, limitMicro: 1000n, ttlMs: HOUR });
        const settledId = rid();
        await store.reserve({ tenantId, day: DAY, requestId: settledId, amountMicro: 100n, limitMicro: 1000n, ttlMs: HOUR });
        await store.settle({ tenantId, day: DAY, requestId: settledId, actualMicro: 150n });
        const before = await store.snapshot(tenantId, DAY);
        const r = await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 300n, limitMicro: 1000n, ttlMs: HOUR });
        expect(r).toEqual({ ok: false, reason: "budget_exhausted", availableMicro: 250n, spentMicro: 150n, heldMicro: 600n });
        expect(await store.snapshot(tenantId, DAY)).toEqual(before);
      }),
    );

    it(
      "200 concurrent reserves against a limit worth 50: exactly 50 succeed",
      withStore(async ({ store }, tenantId) => {
        const results = await Promise.all(
          Array.from({ length: 200 }, () => store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 12_345n, limitMicro: 50n * 12_345n, ttlMs: HOUR })),
        );
        expect(results.filter((r) => r.ok)).toHaveLength(50);
        expect(results.filter((r) => !r.ok).every((r) => !r.ok && r.reason === "budget_exhausted" && r.availableMicro === 0n)).toBe(true);
        expect(await store.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 0n, heldMicro: 50n * 12_345n });
      }),
    );

    it(
      "settle is idempotent: 5 settles (in turn and at once) count once",
      withStore(async ({ store }, tenantId) => {
        const requestId = rid();
        await store.reserve({ tenantId, day: DAY, requestId, amountMicro: 500n, limitMicro: 1000n, ttlMs: HOUR });
        const first = await store.settle({ tenantId, day: DAY, requestId, actualMicro: 321n });
        expect(first).toEqual({ ok: true, alreadySettled: false, spentMicro: 321n, heldMicro: 0n });
        for (let i = 0; i < 4; i++) {
          expect(await store.settle({ tenantId, day: DAY, requestId, actualMicro: 321n })).toMatchObject({ alreadySettled: true, spentMicro: 321n });
        }
        const other = rid();
        await store.reserve({ tenantId, day: DAY, requestId: other, amountMicro: 100n, limitMicro: 1000n, ttlMs: HOUR });
        const parallel = await Promise.all(Array.from({ length: 5 }, () => store.settle({ tenantId, day: DAY, requestId: other, actualMicro: 99n })));
        expect(parallel.filter((r) => !r.alreadySettled)).toHaveLength(1);
        expect(await store.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 420n, heldMicro: 0n });
      }),
    );

    it(
      "settle without a live hold (unknown or expired) still records the spend once",
      withStore(async ({ store, elapse }, tenantId) => {
        const unknown = rid();
        expect(await store.settle({ tenantId, day: DAY, requestId: unknown, actualMicro: 70n })).toMatchObject({ alreadySettled: false, spentMicro: 70n });
        expect(await store.settle({ tenantId, day: DAY, requestId: unknown, actualMicro: 70n })).toMatchObject({ alreadySettled: true, spentMicro: 70n });
        const expiring = rid();
        await store.reserve({ tenantId, day: DAY, requestId: expiring, amountMicro: 500n, limitMicro: 1000n, ttlMs: 150 });
        await elapse(300);
        expect(await store.settle({ tenantId, day: DAY, requestId: expiring, actualMicro: 400n })).toEqual({
          ok: true,
          alreadySettled: false,
          spentMicro: 470n,
          heldMicro: 0n,
        });
        expect(await store.settle({ tenantId, day: DAY, requestId: expiring, actualMicro: 400n })).toMatchObject({ alreadySettled: true });
        // A settle may exceed its hold (and the limit): the provider has charged; the next hold is refused.
        const over = rid();
        await store.reserve({ tenantId, day: DAY, requestId: over, amountMicro: 100n, limitMicro: 1000n, ttlMs: HOUR });
        expect(await store.settle({ tenantId, day: DAY, requestId: over, actualMicro: 900n })).toMatchObject({ spentMicro: 1370n, heldMicro: 0n });
        expect(await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 0n, limitMicro: 1000n, ttlMs: HOUR })).toMatchObject({
          ok: false,
          availableMicro: 0n,
        });
      }),
    );

    it(
      "an expired hold stops counting and frees the budget",
      withStore(async ({ store, elapse }, tenantId) => {
        expect((await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 1000n, limitMicro: 1000n, ttlMs: 150 })).ok).toBe(true);
        expect((await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 1n, limitMicro: 1000n, ttlMs: HOUR })).ok).toBe(false);
        await elapse(300);
        expect(await store.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 0n, heldMicro: 0n });
        expect(await store.holds(tenantId, DAY)).toEqual([]);
        expect(await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 1000n, limitMicro: 1000n, ttlMs: HOUR })).toEqual({
          ok: true,
          spentMicro: 0n,
          heldMicro: 1000n,
        });
      }),
    );

    it(
      "release frees the hold at once, and only once",
      withStore(async ({ store }, tenantId) => {
        const requestId = rid();
        await store.reserve({ tenantId, day: DAY, requestId, amountMicro: 1000n, limitMicro: 1000n, ttlMs: HOUR });
        expect(await store.release({ tenantId, day: DAY, requestId })).toEqual({ ok: true, released: true, spentMicro: 0n, heldMicro: 0n });
        expect(await store.release({ tenantId, day: DAY, requestId })).toMatchObject({ released: false, heldMicro: 0n });
        expect((await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 1000n, limitMicro: 1000n, ttlMs: HOUR })).ok).toBe(true);
      }),
    );

    it(
      "a repeated reserve for one request replaces its hold instead of stacking",
      withStore(async ({ store }, tenantId) => {
        const requestId = rid();
        await store.reserve({ tenantId, day: DAY, requestId, amountMicro: 800n, limitMicro: 1000n, ttlMs: HOUR });
        expect(await store.reserve({ tenantId, day: DAY, requestId, amountMicro: 900n, limitMicro: 1000n, ttlMs: HOUR })).toEqual({
          ok: true,
          spentMicro: 0n,
          heldMicro: 900n,
        });
        expect(await store.reserve({ tenantId, day: DAY, requestId, amountMicro: 1001n, limitMicro: 1000n, ttlMs: HOUR })).toMatchObject({
          ok: false,
          availableMicro: 1000n,
          heldMicro: 900n,
        });
        expect((await store.holds(tenantId, DAY)).map((h) => [h.requestId, h.amountMicro])).toEqual([[requestId, 900n]]);
      }),
    );

    it(
      "tenants and days are kept apart",
      withStore(async ({ store }, tenantId) => {
        await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 1000n, limitMicro: 1000n, ttlMs: HOUR });
        expect((await store.reserve({ tenantId: tenantId + 500_000, day: DAY, requestId: rid(), amountMicro: 1000n, limitMicro: 1000n, ttlMs: HOUR })).ok).toBe(true);
        expect((await store.reserve({ tenantId, day: "2026-12-01", requestId: rid(), amountMicro: 1000n, limitMicro: 1000n, ttlMs: HOUR })).ok).toBe(true);
        expect(await store.snapshot(tenantId, "2026-12-02")).toMatchObject({ spentMicro: 0n, heldMicro: 0n });
      }),
    );

    it(
      "counts exactly up to 2^53 - 1 micro-cents",
      withStore(async ({ store }, tenantId) => {
        const limit = 2n ** 53n - 1n;
        expect(await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: limit - 1n, limitMicro: limit, ttlMs: HOUR })).toMatchObject({ ok: true });
        const last = rid();
        expect(await store.reserve({ tenantId, day: DAY, requestId: last, amountMicro: 1n, limitMicro: limit, ttlMs: HOUR })).toMatchObject({ ok: true, heldMicro: limit });
        expect(await store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 1n, limitMicro: limit, ttlMs: HOUR })).toMatchObject({ ok: false, availableMicro: 0n });
        expect(await store.settle({ tenantId, day: DAY, requestId: last, actualMicro: 1n })).toMatchObject({ spentMicro: 1n, heldMicro: limit - 1n });
        await expect(store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: 2n ** 53n, limitMicro: 2n ** 53n, ttlMs: HOUR })).rejects.toThrow(RangeError);
        await expect(store.reserve({ tenantId, day: DAY, requestId: rid(), amountMicro: -1n, limitMicro: 10n, ttlMs: HOUR })).rejects.toThrow(RangeError);
        await expect(store.snapshot(tenantId, "30/11/2026")).rejects.toThrow(RangeError);
      }),
    );

    it(
      "lists live holds with their expiry",
      withStore(async ({ store, now }, tenantId) => {
        const a = rid("a");
        const t0 = await now();
        await store.reserve({ tenantId, day: DAY, requestId: a, amountMicro: 5n, limitMicro: 100n, ttlMs: HOUR });
        const [hold, ...rest] = await store.holds(tenantId, DAY);
        expect(rest).toEqual([]);
        expect(hold).toMatchObject({ requestId: a, amountMicro: 5n });
        expect(hold!.expiresAtMs).toBeGreaterThanOrEqual(t0 + HOUR);
        expect(hold!.expiresAtMs).toBeLessThan(t0 + HOUR + 5_000);
      }),
    );

    it(
      "rebuild replaces the counters (never adds), drops settled and expired holds, and honours ifVersion",
      withStore(async ({ store, now }, tenantId) => {
        const live = rid("live");
        const ledgered = rid("ledgered");
        await store.reserve({ tenantId, day: DAY, requestId: live, amountMicro: 200n, limitMicro: 10_000n, ttlMs: HOUR });
        await store.reserve({ tenantId, day: DAY, requestId: ledgered, amountMicro: 300n, limitMicro: 10_000n, ttlMs: HOUR });
        await store.settle({ tenantId, day: DAY, requestId: rid(), actualMicro: 999n });
        const snap = await store.snapshot(tenantId, DAY);
        expect(snap).toMatchObject({ spentMicro: 999n, heldMicro: 500n });
        const holds = await store.holds(tenantId, DAY);
        const t = await now();
        const input = {
          tenantId,
          day: DAY,
          spentMicro: 4_000n, // what the ledger says, including `ledgered`
          holds: [...holds, { requestId: "gone", amountMicro: 50n, expiresAtMs: t - 1 }],
          settledRequestIds: [ledgered],
        };
        const first = await store.rebuild({ ...input, ifVersion: snap.version });
        expect(first.ok).toBe(true);
        const after = await store.snapshot(tenantId, DAY);
        expect(after).toMatchObject({ spentMicro: 4_000n, heldMicro: 200n });
        expect(after.version).toBeGreaterThan(snap.version);
        // The same rebuild again changes nothing: a set, not an increment.
        expect((await store.rebuild(input)).ok).toBe(true);
        expect(await store.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 4_000n, heldMicro: 200n });
        // A late settle of a request the ledger already had is not counted twice.
        expect(await store.settle({ tenantId, day: DAY, requestId: ledgered, actualMicro: 300n })).toMatchObject({ alreadySettled: true, spentMicro: 4_000n });
        // The live hold still settles normally.
        expect(await store.settle({ tenantId, day: DAY, requestId: live, actualMicro: 150n })).toMatchObject({ alreadySettled: false, spentMicro: 4_150n, heldMicro: 0n });
        // A rebuild computed from an older read is refused.
        const stale = await store.rebuild({ ...input, holds: [], ifVersion: snap.version });
        expect(stale).toMatchObject({ ok: false, reason: "version_conflict" });
        expect(await store.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 4_150n, heldMicro: 0n });
        // Rebuilding a day Redis has lost entirely.
        expect(await store.rebuild({ tenantId, day: "2026-11-01", spentMicro: 42n, holds: [], ifVersion: 0 })).toEqual({ ok: true, version: 1 });
        expect(await store.snapshot(tenantId, "2026-11-01")).toEqual({ spentMicro: 42n, heldMicro: 0n, version: 1, checked: true });
      }),
    );

    it(
      "a day is unchecked until a rebuild: requireChecked holds nothing there, and reserves, settles and releases never check it",
      withStore(async ({ store }, tenantId) => {
        const ask = (requireChecked?: boolean) => ({ tenantId, day: DAY, requestId: rid(), amountMicro: 100n, limitMicro: 1000n, ttlMs: HOUR, ...(requireChecked === undefined ? {} : { requireChecked }) });
        expect(await store.snapshot(tenantId, DAY)).toEqual({ spentMicro: 0n, heldMicro: 0n, version: 0, checked: false });
        // A new day and a day whose counters were lost look alike: nothing is held, nothing changes.
        expect(await store.reserve(ask(true))).toEqual({ ok: false, reason: "day_unchecked", spentMicro: 0n, heldMicro: 0n });
        expect(await store.snapshot(tenantId, DAY)).toEqual({ spentMicro: 0n, heldMicro: 0n, version: 0, checked: false });
        expect(await store.holds(tenantId, DAY)).toEqual([]);
        // Without the flag (and by default) the counters are trusted as they are.
        const held = ask();
        expect(await store.reserve(held)).toEqual({ ok: true, spentMicro: 0n, heldMicro: 100n });
        expect(await store.reserve(ask(false))).toEqual({ ok: true, spentMicro: 0n, heldMicro: 200n });
        await store.settle({ tenantId, day: DAY, requestId: held.requestId, actualMicro: 70n });
        await store.release({ tenantId, day: DAY, requestId: rid() });
        const before = await store.snapshot(tenantId, DAY);
        expect(before).toMatchObject({ spentMicro: 70n, heldMicro: 100n, checked: false });
        expect(await store.reserve(ask(true))).toEqual({ ok: false, reason: "day_unchecked", spentMicro: 70n, heldMicro: 100n });
        expect((await store.snapshot(tenantId, DAY)).version).toBe(before.version);
        // Rebuilt from the ledger: checked, and requireChecked holds as any reserve does, limit included.
        expect((await store.rebuild({ tenantId, day: DAY, spentMicro: 500n, holds: await store.holds(tenantId, DAY), ifVersion: before.version })).ok).toBe(true);
        expect(await store.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 500n, heldMicro: 100n, checked: true });
        expect(await store.reserve(ask(true))).toEqual({ ok: true, spentMicro: 500n, heldMicro: 200n });
        expect(await store.reserve({ ...ask(true), amountMicro: 301n })).toMatchObject({ ok: false, reason: "budget_exhausted", availableMicro: 300n });
        // Later writes keep the mark; another day of the same tenant has its own.
        await store.settle({ tenantId, day: DAY, requestId: rid(), actualMicro: 1n });
        expect((await store.snapshot(tenantId, DAY)).checked).toBe(true);
        expect((await store.reserve({ ...ask(true), day: "2026-12-01" })).ok).toBe(false);
      }),
    );
  });
}
