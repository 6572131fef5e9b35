// Exactly once, in process against real Redis and Postgres: a paid attempt
// whose router "died" (its tab abandoned after the hold and the first
// chunk) is taken over by two routers that both believe they own it and
// finish it at the same moment — one ledger row, one settle. Then the
// "dead" router comes back and settles its own request: nothing happens.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { KeyOwner } from "@switchyard/db";
import { budgetDay, RedisBudgetStore, type BudgetStore } from "@switchyard/state";
import type { Backend } from "../../apps/router/src/backends/types.ts";
import { StaticBudgets } from "../../apps/router/src/billing/budgets.ts";
import { OrphanFinisher, type CrashCostLookup } from "../../apps/router/src/billing/orphans.ts";
import { StaticPriceBook } from "../../apps/router/src/billing/prices.ts";
import { createTestDb, createTestRedis, sleep, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { journalGuard, ledgerBuffer, seedOwner } from "../helpers/journal-guard.ts";
import { bodyFacts } from "../../apps/router/src/billing/guard.ts";

const MODEL = "openai/gpt-4o-mini";
const HOLD_TTL_MS = 1_200;
const CLAIM_IDLE_MS = 200;
/** What "the provider" says the generation cost. */
const LOOKED_UP_MICRO = 4_321n;

let db: TestDb;
let redis: TestRedis;
let owner: KeyOwner;

const paid: Backend = {
  id: `openrouter:${MODEL}`,
  kind: "openrouter",
  paid: true,
  model: MODEL,
  supports: () => true,
  open: () => Promise.reject(new Error("not called")),
};

/** Counts settles that reached the store. */
function countingStore(inner: BudgetStore): BudgetStore & { settles: string[] } {
  const settles: string[] = [];
  return Object.assign(Object.create(inner) as BudgetStore, {
    settles,
    settle: (input: Parameters<BudgetStore["settle"]>[0]) => {
      settles.push(input.requestId);
      return inner.settle(input);
    },
  });
}

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  owner = await seedOwner(db, "racy");
}, 120_000);

afterAll(async () => {
  await db?.drop();
  await redis?.cleanup();
});

describe("two routers finishing the same orphan", () => {
  it("one row, one settle; the silent owner coming back finds it finished and does nothing", async () => {
    const store = countingStore(new RedisBudgetStore(redis.redis, redis.prefix));
    const budgets = new StaticBudgets();
    budgets.budgets.set(owner.tenantId, { limitMicro: 1_000_000_000n, timeZone: "UTC", thresholds: [] });
    const prices = new StaticPriceBook([{ backend: "openrouter", model: MODEL, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n }]);
    const ledger = ledgerBuffer(db, redis, "drain");
    const router = (consumer: string) => journalGuard(redis, { consumer, store, budgets, prices, ledger, holdTtlMs: HOLD_TTL_MS, claimIdleMs: CLAIM_IDLE_MS });

    // The router that will go silent: hold + intent, first chunk seen.
    const dead = router("dead");
    await dead.intents.ensureGroup();
    const arrivedAtMs = Date.now();
    const tab = dead.guard.open({
      requestId: "req_race",
      tenant: owner,
      path: "/v1/chat/completions",
      facts: bodyFacts("/v1/chat/completions", { model: MODEL, max_tokens: 100, messages: [{ role: "user", content: "hi" }] }),
      model: MODEL,
      arrivedAtMs,
      startedAtPerf: performance.now(),
    });
    const admission = await tab.admit(paid);
    expect(admission.ok).toBe(true);
    if (!admission.ok || !admission.progress) throw new Error("a paid attempt with an intent reports progress");
    admission.progress({ generationId: "gen-1-race" });
    const day = budgetDay(arrivedAtMs, "UTC");
    const held = (await store.snapshot(owner.tenantId, day)).heldMicro;
    expect(held).toBeGreaterThan(LOOKED_UP_MICRO);

    const lookedUp: string[] = [];
    const lookup: CrashCostLookup = {
      async cost(input) {
        lookedUp.push(input.generationId ?? "");
        await sleep(30); // both finishers are in flight at once
        return { micro: LOOKED_UP_MICRO, source: "provider_lookup", usage: { prompt: 9, completion: 3, cached: 0, cacheWrite: 0 }, generationId: input.generationId! };
      },
    };
    const r1 = router("r1");
    const r2 = router("r2");
    const f1 = new OrphanFinisher(r1.intents, r1.guard, { openrouter: lookup }, { scanMs: 60_000, concurrency: 4 });
    const f2 = new OrphanFinisher(r2.intents, r2.guard, { openrouter: lookup }, { scanMs: 60_000, concurrency: 4 });

    // r1 takes the silent intent over; it goes silent too; r2 takes it from r1. Both now hold it.
    await sleep(CLAIM_IDLE_MS + 50);
    expect((await f1.scan()).finished).toBe(0); // not due: the hold has not expired
    expect(f1.pending).toBe(1);
    await sleep(CLAIM_IDLE_MS + 50);
    expect((await f2.scan()).finished).toBe(0);
    expect(f2.pending).toBe(1);
    await sleep(Math.max(0, arrivedAtMs + HOLD_TTL_MS + 50 - Date.now()));
    const [a, b] = await Promise.all([f1.scan(), f2.scan()]);
    expect(lookedUp).toEqual(["gen-1-race", "gen-1-race"]); // both raced to the end…
    expect(a.finished + b.finished).toBe(1); // …one finished it
    expect(store.settles).toEqual(["req_race"]);

    await ledger.flush();
    const rows = await db.sql`select request_id, cost_micro, cost_source, provider_generation_id, status from spend_ledger where tenant_id = ${owner.tenantId}`;
    expect(rows).toEqual([{ request_id: "req_race", cost_micro: String(LOOKED_UP_MICRO), cost_source: "provider_lookup", provider_generation_id: "gen-1-race", status: "error" }]);
    const snap = await store.snapshot(owner.tenantId, day);
    expect(snap).toMatchObject({ spentMicro: LOOKED_UP_MICRO, heldMicro: 0n });
    expect(await r1.intents.depth()).toBe(0);

    // The silent owner comes back and settles its request as it ended: nothing is written or settled.
    const before = await redis.redis.xlen(ledger.key);
    tab.settle({ backend: paid, status: "ok", usage: { prompt: 9, completion: 50, cached: 0, cacheWrite: 0, providerCostMicro: 99_999n, generationId: "gen-1-race" }, firstTokenAt: performance.now(), chunks: 50 });
    await dead.guard.drain();
    expect(await redis.redis.xlen(ledger.key)).toBe(before);
    await ledger.flush();
    expect(store.settles).toEqual(["req_race"]);
    expect((await store.snapshot(owner.tenantId, day)).spentMicro).toBe(LOOKED_UP_MICRO);
    expect(await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${owner.tenantId}`).toEqual([{ n: 1 }]);

    // A normal request on the same router: its intent is retired with its row, once.
    const tab2 = dead.guard.open({ requestId: "req_normal", tenant: owner, path: "/v1/chat/completions", facts: bodyFacts("/v1/chat/completions", { model: MODEL, messages: [] }), model: MODEL, arrivedAtMs: Date.now(), startedAtPerf: performance.now() });
    expect((await tab2.admit(paid)).ok).toBe(true);
    expect(await r1.intents.depth()).toBe(1);
    tab2.settle({ backend: paid, status: "ok", usage: { prompt: 1, completion: 1, cached: 0, cacheWrite: 0, providerCostMicro: 7n } });
    await dead.guard.drain();
    expect(await r1.intents.depth()).toBe(0);
    await ledger.flush();
    await waitFor(async () => (await db.sql`select 1 from spend_ledger where request_id = 'req_normal'`).length === 1, { what: "the normal row" });
    expect(store.settles).toEqual(["req_race", "req_normal"]);
    await Promise.all([f1.close(), f2.close(), ledger.close()]);
  }, 60_000);
});
