// Postgres stops for 30 s under load (a private server on a spare port, never
// the shared one). Requests keep being served — keys, budgets and prices
// come from the routers' caches — and their ledger rows wait in the Redis
// stream; once Postgres is back every row lands, exactly once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectDb, runMigrations, usdToMicro, type DbHandle } from "@switchyard/db";
import { RedisRegistryStore } from "@switchyard/state";
import { loadConfig, silentLogger, startRouter, createLogger, type RouterHandle } from "@switchyard/router";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestRedis, REDIS_URL, sleep, waitFor, type TestRedis } from "../helpers/env.ts";
import { startPrivatePostgres, type PrivatePostgres } from "../helpers/pg-server.ts";
import { budgetedTenant, PAID_MODEL, pricePaidModel } from "../helpers/paid.ts";

const MODEL = PAID_MODEL;
const OUTAGE_MS = Number(process.env.OUTAGE_MS ?? 30_000);

let pg: PrivatePostgres;
let db: DbHandle;
let redis: TestRedis;
let fake: FakeOpenRouter;
let router: RouterHandle;
let key: string;
let tenantId: number;

beforeAll(async () => {
  pg = await startPrivatePostgres();
  await runMigrations(pg.url);
  db = connectDb(pg.url, { max: 5 });
  redis = await createTestRedis();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-outage" }).start();
  ({ tenantId, key } = await budgetedTenant(db, "steady", 10_000n));
  await pricePaidModel(db);
  const config = loadConfig({
    env: {},
    overrides: {
      "router.port": 0,
      "router.adminPort": 0,
      "redis.url": REDIS_URL,
      "redis.keyPrefix": redis.prefix,
      "router.keyCacheMs": 500,
      "billing.refreshMs": 500,
      "providers.openrouter": { apiKey: "sk-or-outage", baseUrl: fake.url },
    },
  });
  router = await startRouter(config, { registry: new RedisRegistryStore(redis.redis, redis.prefix), db, log: process.env.DEBUG_OUTAGE ? createLogger("debug", {}) : silentLogger });
}, 120_000);

afterAll(async () => {
  await router?.close();
  await fake?.stop();
  await db?.close();
  await pg?.destroy();
  await redis?.cleanup();
});

describe("Postgres outage under load", () => {
  it("no ledger row is lost: rows wait in Redis and land once Postgres returns", async () => {
    const results: Array<{ status: number; id: string }> = [];
    let stop = false;
    // Steady load: 4 clients back to back, streams and not.
    const load = Promise.all(
      Array.from({ length: 4 }, async (_, c) => {
        for (let i = 0; !stop; i++) {
          const t0 = performance.now();
          const res = await fetch(`${router.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
            body: JSON.stringify({ model: MODEL, max_tokens: 20, stream: (i + c) % 2 === 0, messages: [{ role: "user", content: `c${c} r${i}` }] }),
          });
          await res.text();
          if (process.env.DEBUG_OUTAGE) console.log(c, i, res.status, Math.round(performance.now() - t0), new Date().toISOString());
          results.push({ status: res.status, id: res.headers.get("x-request-id")! });
          await sleep(50);
        }
      }),
    );
    await sleep(3_000);
    const beforeOutage = results.length;
    await pg.stop();
    const downAt = results.length;
    await sleep(OUTAGE_MS);
    const servedDuringOutage = results.length - downAt;
    await pg.start();
    await sleep(3_000);
    stop = true;
    await load;

    expect(beforeOutage).toBeGreaterThan(10);
    // Serving went on while Postgres was down.
    expect(servedDuringOutage).toBeGreaterThan(50);
    expect(results.every((r) => r.status === 200)).toBe(true);

    const ids = results.map((r) => r.id);
    await waitFor(
      async () => {
        await router.deps.guard.flush().catch(() => {});
        const [row] = await db.sql`select count(*)::int as n from spend_ledger where request_id = any(${ids})`;
        return row!.n === ids.length;
      },
      { timeoutMs: 30_000, intervalMs: 250, what: "every buffered ledger row to land" },
    );
    const rows = await db.sql`select request_id, cost_micro from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows).toHaveLength(ids.length);
    expect(new Set(rows.map((r) => r.request_id))).toEqual(new Set(ids));
    const ledger = rows.reduce((acc, r) => acc + BigInt(r.cost_micro), 0n);
    const reported = fake.reportedCostsUsd.reduce((acc, c) => acc + usdToMicro(c), 0n);
    expect(ledger).toBe(reported);
  }, 120_000);
});
