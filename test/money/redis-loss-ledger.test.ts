// Redis comes back empty (a private redis-server, restarted without
// persistence) while ledger rows wait in its stream — Postgres is down, so
// nothing could drain them — and while a paid stream is still being
// answered. The rows were acknowledged by Redis and are gone from it; each
// router kept the rows it appended until they left the stream and appends
// them again (ledger_watch.lua), and the request still streaming writes its
// row although its intent went with the data (budget_intent_finish.lua).
// Once Postgres is back every request has its row, each once, at the cost
// the fake OpenRouter reported.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectDb, runMigrations, usdToMicro, type DbHandle } from "@switchyard/db";
import type { RouterHandle } from "@switchyard/router";
import type { RedisLedgerBuffer } from "../../apps/router/src/billing/ledger-stream.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { budgetDay } from "@switchyard/state";
import { startPrivatePostgres, type PrivatePostgres } from "../helpers/pg-server.ts";
import { waitFor } from "../helpers/env.ts";
import { budgetedTenant, PAID_MODEL, pricePaidModel, startPaidRouter } from "../helpers/paid.ts";

const MODEL = PAID_MODEL;

let redis: PrivateRedis;
let pg: PrivatePostgres;
let db: DbHandle;
let fake: FakeOpenRouter;
let router: RouterHandle;
let key: string;
let tenantId: number;

beforeAll(async () => {
  redis = await startPrivateRedis();
  pg = await startPrivatePostgres();
  await runMigrations(pg.url);
  db = connectDb(pg.url, { max: 5 });
  fake = await new FakeOpenRouter({ apiKey: "sk-or-lost-rows" }).start();
  ({ tenantId, key } = await budgetedTenant(db, "rows-in-redis", 100_000n));
  await pricePaidModel(db);
  // Keys and budgets read again within half a second: served from the cache while Postgres is down.
  router = await startPaidRouter({ db, redisUrl: redis.url, prefix: "lost:", fake, overrides: { "router.keyCacheMs": 500, "billing.refreshMs": 500 } });
}, 120_000);

afterAll(async () => {
  await router?.close();
  await fake?.stop();
  await db?.close();
  await pg?.destroy();
  await redis?.stop();
});

/** Rows the router keeps against a loss of Redis' data. */
const kept = () => (router.deps.guard.deps.ledger as RedisLedgerBuffer).keptCount;

const post = (stream: boolean, content: string) =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, max_tokens: 20, stream, messages: [{ role: "user", content }] }),
  });

describe("Redis back empty with ledger rows not yet drained", () => {
  it("every row lands once Postgres is back: the stream's rows appended again by their router, the streaming request's row written without its intent", async () => {
    // Warm: keys, budgets and prices cached, so requests are served while Postgres is down.
    const warm = await post(false, "warm");
    expect(warm.status).toBe(200);
    const ids = [warm.headers.get("x-request-id")!];
    await warm.text();
    await router.deps.guard.flush();

    await pg.stop();
    // Rows that only Redis holds: Postgres is away, so they wait in the stream.
    for (let i = 0; i < 6; i++) {
      const res = await post(i % 2 === 0, `waiting ${i}`);
      expect(res.status).toBe(200);
      ids.push(res.headers.get("x-request-id")!);
      await res.text();
    }
    // A paid stream still being answered when Redis goes: 20 tokens, 100 ms apart.
    fake.enqueue({ kind: "ok", completionTokens: 20, interTokenMs: 100, costUsd: "0.0042" });
    const streaming = await post(true, "across the loss");
    expect(streaming.status).toBe(200);
    ids.push(streaming.headers.get("x-request-id")!);
    const body = streaming.text();
    await waitFor(() => kept() >= 6, { what: "the waiting rows appended" });

    await redis.stop();
    redis = await startPrivateRedis([], { port: redis.port });
    expect(await body).toContain("[DONE]");

    await pg.start();
    await waitFor(
      async () => {
        const [row] = await db.sql`select count(*)::int as n from spend_ledger where request_id = any(${ids})`;
        return row!.n === ids.length;
      },
      { timeoutMs: 30_000, intervalMs: 250, what: "every request's ledger row" },
    );
    const rows = await db.sql`select request_id, cost_micro from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows.map((r) => r.request_id).sort()).toEqual([...ids].sort());
    const ledger = rows.reduce((acc, r) => acc + BigInt(r.cost_micro), 0n);
    const reported = fake.reportedCostsUsd.reduce((acc, c) => acc + usdToMicro(c), 0n);
    expect(ledger).toBe(reported);
    expect(fake.reportedCostsUsd).toContain("0.0042");
    const m = router.deps.metrics;
    expect(m.ledgerRows.get({ outcome: "replayed" })).toBeGreaterThanOrEqual(6);
    expect(m.ledgerRows.get({ outcome: "intent_lost" })).toBe(1);
    // Let go once drained.
    await waitFor(() => kept() === 0, { timeoutMs: 10_000, what: "the kept rows let go" });
    // The day's counters went with Redis: the next paid request rebuilds them from the ledger, the rows appended again included.
    const after = await post(false, "after");
    expect(after.status).toBe(200);
    await after.text();
    await router.deps.guard.flush();
    const [sum] = await db.sql`select coalesce(sum(cost_micro), 0)::text as micro from spend_ledger where tenant_id = ${tenantId}`;
    const snap = await router.deps.guard.deps.store.snapshot(tenantId, budgetDay(Date.now(), "UTC"));
    expect(snap).toMatchObject({ spentMicro: BigInt(sum!.micro), heldMicro: 0n, checked: true });
  }, 120_000);
});
