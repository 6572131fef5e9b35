// kill -9 of a router mid-stream while OpenRouter's generation lookup fails
// (404: unknown; 503: down): the surviving router finishes every orphan at
// its hold — the worst case, marked hold_on_crash, never below what the
// provider charged — once, and the tenant's day counts it once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { worstCaseMicro } from "@switchyard/db";
import { budgetDay, RedisBudgetStore } from "@switchyard/state";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestDb, createTestRedis, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { CLAIM_IDLE_MS, HOLD_TTL_MS, openStream, reconcileCli, routerEnv, seedTenant } from "./crash-helpers.ts";

const STREAMS = 20;
const PRICE = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };

let db: TestDb;
let redis: TestRedis;
let fake: FakeOpenRouter;
let env: Record<string, string>;
let survivor: RouterProc;
const victims: RouterProc[] = [];

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-lost" }).start();
  fake.defaultScenario = { kind: "slow", interTokenMs: 100, completionTokens: 40 };
  env = routerEnv(db, redis, fake, "sk-or-lost");
  survivor = await spawnRouter(env, "survivor");
}, 180_000);

afterAll(async () => {
  await Promise.all(victims.map((v) => v.kill9()));
  await survivor?.stop();
  await fake?.stop();
  await db?.drop();
  await redis?.cleanup();
});

describe.each([404, 503])("the generation lookup answers %i", (status) => {
  it("each orphan gets one row at its hold, marked hold_on_crash; the sum is at least what was charged", async () => {
    const name = `lost-${status}`;
    const { tenantId, key } = await seedTenant(db, name);
    fake.generationLookup = status;
    const victim = await spawnRouter(env, `victim-${status}`);
    victims.push(victim);
    const contents = Array.from({ length: STREAMS }, (_, i) => `lost ${status} ${i} ${"y".repeat(i * 3)}`);
    const streams = await Promise.all(contents.map((c) => openStream(victim.url, key, c)));
    const t0 = Date.now();
    await victim.kill9();
    await Promise.all(streams.map((s) => s.rest));
    const ids = streams.map((s) => s.requestId);
    // The lookup retries 5xx before giving up: allow for its backoff too.
    await waitFor(async () => (await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${tenantId}`)[0]!.n >= STREAMS, {
      timeoutMs: HOLD_TTL_MS + CLAIM_IDLE_MS + 20_000,
      intervalMs: 100,
      what: "a ledger row for each killed request",
    });
    console.log(`lookup ${status}: ${STREAMS} orphans finished at their holds ${Date.now() - t0} ms after the kill`);
    const rows = await db.sql<{ request_id: string; cost_micro: string; cost_source: string; provider_generation_id: string | null }[]>`
      select request_id, cost_micro::text, cost_source, provider_generation_id from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows).toHaveLength(STREAMS);
    expect(new Set(rows.map((r) => r.request_id))).toEqual(new Set(ids));
    const holdOf = (content: string) => worstCaseMicro(promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content }] }), 100, PRICE);
    const byId = new Map(streams.map((s, i) => [s.requestId, contents[i]!]));
    const charged: string[] = [];
    for (const r of rows) {
      expect(r.cost_source).toBe("hold_on_crash");
      expect(BigInt(r.cost_micro)).toBe(holdOf(byId.get(r.request_id)!));
      // The generation id still names the invoice line.
      expect(fake.generations.has(r.provider_generation_id ?? "")).toBe(true);
      charged.push(r.provider_generation_id!);
    }
    const ledger = rows.reduce((s, r) => s + BigInt(r.cost_micro), 0n);
    expect(ledger).toBeGreaterThanOrEqual(fake.chargedMicro(charged)); // never below the invoice
    expect(fake.chargedMicro(charged)).toBeGreaterThan(0n);

    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    const day = budgetDay(Date.now(), "UTC");
    expect(await store.snapshot(tenantId, day)).toMatchObject({ spentMicro: ledger, heldMicro: 0n });
    const rec = await reconcileCli(db, redis, name);
    expect(rec.code, rec.out).toBe(0);
    expect(await store.snapshot(tenantId, day)).toMatchObject({ spentMicro: ledger, heldMicro: 0n });
  }, 120_000);
});
