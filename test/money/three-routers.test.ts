// The budget holds across replicas: three router processes share one Redis
// and one Postgres; 500 concurrent paid requests meet a budget worth 100 of
// them. Nothing is overspent, and every served request has exactly one
// ledger row.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import { budgetDay, RedisBudgetStore } from "@switchyard/state";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestDb, createTestRedis, REDIS_URL, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";

const MODEL = "openai/gpt-4o-mini";
/** Each request costs exactly $0.0001 = 10,000 micro-cents; the budget (1 cent) is worth 100. */
const COST_USD = "0.0001";
const COST_MICRO = 10_000n;
const LIMIT_MICRO = 1_000_000n;

let db: TestDb;
let redis: TestRedis;
let fake: FakeOpenRouter;
let routers: RouterProc[] = [];
let key: string;
let tenantId: number;

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-3r" }).start();
  fake.defaultScenario = { kind: "ok", costUsd: COST_USD, completionTokens: 5, interTokenMs: 2 };
  const t = await createTenant(db.db, "contended");
  if (!t.ok) throw new Error("tenant");
  tenantId = t.tenant.id;
  key = (await createKey(db.db, tenantId)).key;
  await setBudget(db.db, { tenantId, dailyLimitCents: 1n });
  // $1 / $2 per million tokens: with max_tokens 50 a request holds ≈ 14,000 micro, more than it costs.
  await setPrice(db.db, { backend: "openrouter", model: MODEL, inputMicroPerMtok: 100_000_000n, outputMicroPerMtok: 200_000_000n });
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    OPENROUTER_API_KEY: "sk-or-3r",
    SWITCHYARD_PROVIDERS__OPENROUTER__BASE_URL: fake.url,
  };
  routers = await Promise.all([0, 1, 2].map((i) => spawnRouter(env, `router-${i}`)));
}, 180_000);

afterAll(async () => {
  await Promise.all(routers.map((r) => r.stop()));
  await fake?.stop();
  await db?.drop();
  await redis?.cleanup();
});

describe("three routers, one budget", () => {
  it("500 concurrent paid requests against a budget worth 100: never overspent, one row per served request", async () => {
    const results = await Promise.all(
      Array.from({ length: 500 }, async (_, i) => {
        const router = routers[i % 3]!;
        const res = await fetch(`${router.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, max_tokens: 50, stream: i % 2 === 0, messages: [{ role: "user", content: `request ${i}` }] }),
        });
        const body = await res.text();
        return { status: res.status, id: res.headers.get("x-request-id")!, retry: res.headers.get("x-should-retry"), body };
      }),
    );
    const served = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 402);
    expect(served.length + refused.length).toBe(500);
    for (const r of refused) {
      expect(r.retry).toBe("false");
      expect(r.body).toContain("budget_exceeded");
    }
    // Contention was real: many were refused, and the budget was used, not left idle.
    expect(refused.length).toBeGreaterThanOrEqual(400 - 1);
    expect(served.length).toBeGreaterThanOrEqual(Number(LIMIT_MICRO / 14_400n));
    expect(served.length).toBeLessThanOrEqual(100);

    // SIGTERM: each router settles what is in flight and drains its ledger buffer.
    await Promise.all(routers.map((r) => r.stop()));
    const rows = await db.sql`select request_id, cost_micro, cost_source from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows).toHaveLength(served.length);
    expect(new Set(rows.map((r) => r.request_id))).toEqual(new Set(served.map((r) => r.id)));
    const total = rows.reduce((acc, r) => acc + BigInt(r.cost_micro), 0n);
    expect(total).toBe(COST_MICRO * BigInt(served.length));
    expect(total).toBeLessThanOrEqual(LIMIT_MICRO);
    expect(rows.every((r) => r.cost_source === "provider")).toBe(true);
    // The shared counter agrees with the ledger, and no hold is left behind.
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    const snap = await store.snapshot(tenantId, budgetDay(Date.now(), "UTC"));
    expect(snap.spentMicro).toBe(total);
    expect(snap.heldMicro).toBe(0n);
    // The provider was called only for requests that were served.
    expect(fake.reportedCostsUsd.length).toBe(served.length);
  }, 120_000);
});
