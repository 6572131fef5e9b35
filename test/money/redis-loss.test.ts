// Redis comes back empty (a private redis-server, restarted without
// persistence) after a tenant has spent its whole day's budget. Its day's
// counters went with the data: read as unspent, they would admit a second
// day's budget of paid inference. The router sees the registry's epoch
// change (registry_ids.lua), rebuilds every budgeted tenant's day from the
// ledger in Postgres by itself, and keeps refusing.
//
// Counters lost while the registry keeps its epoch (a hand DEL, an evicted
// key, a Redis Cluster budget shard back empty alone, a restarted router
// without Redis) are caught by the day's `checked` mark instead: a hold on
// a day no rebuild has checked makes the router rebuild it from the ledger
// first (budget_reserve.lua, BudgetGuard.checkDay).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import { budgetDay, budgetKeys } from "@switchyard/state";
import { loadConfig, silentLogger, startRouter, type RouterHandle } from "@switchyard/router";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { budgetedTenant, PAID_MODEL, pricePaidModel, startPaidRouter } from "../helpers/paid.ts";
import { createTestDb, waitFor, type TestDb } from "../helpers/env.ts";

const MODEL = PAID_MODEL;

let redis: PrivateRedis;
let db: TestDb;
let fake: FakeOpenRouter;
let router: RouterHandle;
let key: string;
let tenantId: number;

beforeAll(async () => {
  redis = await startPrivateRedis();
  db = await createTestDb();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-loss" }).start();
  // One cent a day.
  ({ tenantId, key } = await budgetedTenant(db, "spent-up", 1n));
  await pricePaidModel(db);
  router = await startPaidRouter({ db, redisUrl: redis.url, prefix: "loss:", fake });
}, 60_000);

afterAll(async () => {
  await router?.close();
  await fake?.stop();
  await db?.drop();
  await redis?.stop();
});

const post = (r = router, k = key) =>
  fetch(`${r.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${k}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] }),
  });

const snapshot = (r = router, t = tenantId) => r.deps.guard.deps.store.snapshot(t, budgetDay(Date.now(), "UTC"));

/** A new tenant with a budget of one cent a day, and its key. */
const centTenant = (name: string) => budgetedTenant(db, name, 1n);

/** Spends the tenant's cent through router `r` (0.9 + 0.1), sees the 402, and waits for both rows in Postgres. */
async function spendTheDay(r: RouterHandle, t: { tenantId: number; key: string }): Promise<void> {
  fake.enqueue({ kind: "ok", costUsd: "0.009" }, { kind: "ok", costUsd: "0.001" });
  for (let i = 0; i < 2; i++) {
    const res = await post(r, t.key);
    expect(res.status).toBe(200);
    await res.text();
    await r.deps.guard.flush();
  }
  expect((await snapshot(r, t.tenantId)).spentMicro).toBe(1_000_000n);
  const refused = await post(r, t.key);
  expect(refused.status).toBe(402);
  await refused.text();
  await waitFor(async () => (await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${t.tenantId}`)[0]!.n === 2, { what: "the rows in the ledger" });
}

/** The next request is refused with 402 budget_exceeded without reaching the upstream, and the counters are the ledger's. */
async function stillRefused(r: RouterHandle, t: { tenantId: number; key: string }): Promise<void> {
  const seen = fake.requests.length;
  const after = await post(r, t.key);
  expect(after.status).toBe(402);
  expect(((await after.json()) as { error: { code: string } }).error.code).toBe("budget_exceeded");
  expect(fake.requests.length).toBe(seen);
  expect(await snapshot(r, t.tenantId)).toMatchObject({ spentMicro: 1_000_000n, heldMicro: 0n, checked: true });
}

describe("Redis back empty after a tenant spent its day", () => {
  it("the router rebuilds the day from the ledger by itself: the budget still refuses", async () => {
    const t = { tenantId, key };
    await spendTheDay(router, t);

    await redis.stop();
    redis = await startPrivateRedis([], { port: redis.port });
    await waitFor(() => router.deps.metrics.budgetRebuilds.get({ outcome: "rebuilt" }) >= 1, { timeoutMs: 10_000, what: "the router to rebuild the budgets" });
    expect(router.deps.metrics.budgetRebuilds.get({ outcome: "failed" })).toBe(0);
    expect(router.deps.metrics.registryLosses.get()).toBe(1);
    // Rebuilt before any request asked: checked already.
    expect((await snapshot()).checked).toBe(true);

    // The day stays closed, and the counters are the ledger's again.
    await stillRefused(router, t);
  }, 60_000);
});

describe("a tenant's counters lost while the rest of Redis stays (a hand DEL, an eviction, a Cluster budget shard back empty alone)", () => {
  it("the next hold finds the day unchecked and rebuilds it from the ledger first: still refused", async () => {
    const t = await centTenant("deleted-counters");
    await spendTheDay(router, t);
    const losses = router.deps.metrics.registryLosses.get();
    const rebuilt = router.deps.metrics.budgetDayChecks.get({ outcome: "rebuilt" });
    const client = new Redis(redis.url);
    try {
      expect(await client.del(...budgetKeys("loss:", t.tenantId, budgetDay(Date.now(), "UTC")))).toBeGreaterThanOrEqual(2);
    } finally {
      client.disconnect();
    }
    expect(await snapshot(router, t.tenantId)).toMatchObject({ spentMicro: 0n, checked: false });
    await stillRefused(router, t);
    expect(router.deps.metrics.budgetDayChecks.get({ outcome: "rebuilt" })).toBe(rebuilt + 1);
    // Not a loss of the registry: nothing else was rebuilt.
    expect(router.deps.metrics.registryLosses.get()).toBe(losses);
  }, 60_000);
});

describe("a router without Redis restarted (its in-process counters start empty)", () => {
  it("the first hold after the restart rebuilds the day from the ledger: still refused", async () => {
    const t = await centTenant("restarted-alone");
    const config = loadConfig({
      env: {},
      overrides: {
        "router.port": 0,
        "router.adminPort": 0,
        "billing.refreshMs": 100,
        "providers.openrouter": { apiKey: "sk-or-loss", baseUrl: fake.url },
      },
    });
    let alone = await startRouter(config, { db, log: silentLogger });
    try {
      await waitFor(() => alone.deps.guard.deps.prices.price("openrouter", MODEL), { what: "the price" });
      await spendTheDay(alone, t);
      await alone.close();
      alone = await startRouter(config, { db, log: silentLogger });
      await waitFor(() => alone.deps.guard.deps.prices.price("openrouter", MODEL), { what: "the price" });
      expect(await snapshot(alone, t.tenantId)).toMatchObject({ spentMicro: 0n, checked: false });
      await stillRefused(alone, t);
    } finally {
      await alone.close();
    }
  }, 60_000);
});
