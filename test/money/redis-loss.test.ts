// Redis comes back empty (a private redis-server, restarted without
// persistence) after a tenant has spent its whole day's budget. Its day's
// counters went with the data: read as unspent, they would admit a second
// day's budget of paid inference. The router sees the registry's epoch
// change (registry_ids.lua), rebuilds every budgeted tenant's day from the
// ledger in Postgres by itself, and keeps refusing.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import { budgetDay } from "@switchyard/state";
import { loadConfig, silentLogger, startRouter, type RouterHandle } from "@switchyard/router";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { createTestDb, waitFor, type TestDb } from "../helpers/env.ts";

const MODEL = "openai/gpt-4o-mini";

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
  const t = await createTenant(db.db, "spent-up");
  if (!t.ok) throw new Error("tenant");
  tenantId = t.tenant.id;
  key = (await createKey(db.db, tenantId)).key;
  // One cent a day.
  await setBudget(db.db, { tenantId, dailyLimitCents: 1n });
  await setPrice(db.db, { backend: "openrouter", model: MODEL, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n });
  const config = loadConfig({
    env: {},
    overrides: {
      "router.port": 0,
      "router.adminPort": 0,
      "redis.url": redis.url,
      "redis.keyPrefix": "loss:",
      "registry.pollMs": 50,
      "billing.refreshMs": 100,
      "billing.ledgerFlushMs": 50,
      "providers.openrouter": { apiKey: "sk-or-loss", baseUrl: fake.url },
    },
  });
  router = await startRouter(config, { db, log: silentLogger });
  await waitFor(() => router.deps.guard.deps.prices.price("openrouter", MODEL), { what: "the price" });
}, 60_000);

afterAll(async () => {
  await router?.close();
  await fake?.stop();
  await db?.drop();
  await redis?.stop();
});

const post = () =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] }),
  });

const snapshot = () => router.deps.guard.deps.store.snapshot(tenantId, budgetDay(Date.now(), "UTC"));

describe("Redis back empty after a tenant spent its day", () => {
  it("the router rebuilds the day from the ledger by itself: the budget still refuses", async () => {
    // 0.9 cent, then 0.1 cent: the day is spent to the micro-cent.
    fake.enqueue({ kind: "ok", costUsd: "0.009" }, { kind: "ok", costUsd: "0.001" });
    for (let i = 0; i < 2; i++) {
      const r = await post();
      expect(r.status).toBe(200);
      await r.text();
      await router.deps.guard.flush();
    }
    expect((await snapshot()).spentMicro).toBe(1_000_000n);
    const refused = await post();
    expect(refused.status).toBe(402);
    await refused.text();
    // Both rows in Postgres (drained from the stream) before Redis goes.
    await waitFor(async () => (await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${tenantId}`)[0]!.n === 2, { what: "the rows in the ledger" });

    await redis.stop();
    redis = await startPrivateRedis([], { port: redis.port });
    await waitFor(() => router.deps.metrics.budgetRebuilds.get({ outcome: "rebuilt" }) >= 1, { timeoutMs: 10_000, what: "the router to rebuild the budgets" });
    expect(router.deps.metrics.budgetRebuilds.get({ outcome: "failed" })).toBe(0);
    expect(router.deps.metrics.registryLosses.get()).toBe(1);

    // The day stays closed, and the counters are the ledger's again.
    const seen = fake.requests.length;
    const after = await post();
    expect(after.status).toBe(402);
    expect(((await after.json()) as { error: { code: string } }).error.code).toBe("budget_exceeded");
    expect(fake.requests.length).toBe(seen);
    const s = await snapshot();
    expect(s.spentMicro).toBe(1_000_000n);
    expect(s.heldMicro).toBe(0n);
  }, 60_000);
});
