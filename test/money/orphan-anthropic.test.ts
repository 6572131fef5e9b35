// kill -9 of a router in the middle of paid Anthropic streams: Anthropic has
// no per-message cost lookup and no usage had arrived (it comes with the last
// event), so the surviving router finishes each at its hold — once, marked.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice, worstCaseMicro } from "@switchyard/db";
import { budgetDay, RedisBudgetStore } from "@switchyard/state";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { createTestDb, createTestRedis, REDIS_URL, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { CLAIM_IDLE_MS, HOLD_TTL_MS, ORPHAN_SCAN_MS, TOTAL_MS } from "./crash-helpers.ts";

const MODEL = "claude-3-5-haiku-latest";
const PRICE = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n };
const STREAMS = 10;

let db: TestDb;
let redis: TestRedis;
let fake: FakeAnthropic;
let a: RouterProc;
let b: RouterProc;
let key: string;
let tenantId: number;

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  fake = await new FakeAnthropic("sk-ant-crash").start();
  fake.defaultScenario = { kind: "slow", interTokenMs: 100, completionTokens: 40 };
  const t = await createTenant(db.db, "anthropic-crash");
  if (!t.ok) throw new Error("tenant");
  tenantId = t.tenant.id;
  key = (await createKey(db.db, tenantId)).key;
  await setBudget(db.db, { tenantId, dailyLimitCents: 1_000n });
  await setPrice(db.db, { backend: "anthropic", model: MODEL, ...PRICE });
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    ANTHROPIC_API_KEY: "sk-ant-crash",
    SWITCHYARD_PROVIDERS__ANTHROPIC__BASE_URL: fake.url,
    SWITCHYARD_BILLING__HOLD_TTL_MS: String(HOLD_TTL_MS),
    SWITCHYARD_DEADLINES__TOTAL_MS: String(TOTAL_MS),
    SWITCHYARD_BILLING__LEDGER_CLAIM_IDLE_MS: String(CLAIM_IDLE_MS),
    SWITCHYARD_BILLING__ORPHAN_SCAN_MS: String(ORPHAN_SCAN_MS),
  };
  [a, b] = await Promise.all([spawnRouter(env, "router-a"), spawnRouter(env, "router-b")]);
}, 180_000);

afterAll(async () => {
  await a?.kill9();
  await b?.stop();
  await fake?.stop();
  await db?.drop();
  await redis?.cleanup();
});

describe("kill -9 in the middle of paid Anthropic streams", () => {
  it("each request gets one row at its hold, marked hold_on_crash, and the day is charged once", async () => {
    const contents = Array.from({ length: STREAMS }, (_, i) => `anthropic ${i} ${"z".repeat(i * 5)}`);
    const opened = await Promise.all(
      contents.map(async (content) => {
        const res = await fetch(`${a.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, max_tokens: 100, stream: true, messages: [{ role: "user", content }] }),
        });
        expect(res.status).toBe(200);
        const reader = res.body!.getReader();
        let text = "";
        while ((text.match(/^data: /gm) ?? []).length < 3) text += new TextDecoder().decode((await reader.read()).value);
        return { id: res.headers.get("x-request-id")!, content, reader };
      }),
    );
    await a.kill9();
    await Promise.all(opened.map((o) => o.reader.read().then(() => undefined, () => undefined)));
    await waitFor(async () => (await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${tenantId}`)[0]!.n >= STREAMS, {
      timeoutMs: HOLD_TTL_MS + CLAIM_IDLE_MS + 15_000,
      intervalMs: 100,
      what: "a row for each killed Anthropic request",
    });
    const rows = await db.sql<{ request_id: string; cost_micro: string; cost_source: string; backend: string }[]>`
      select request_id, cost_micro::text, cost_source, backend from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows).toHaveLength(STREAMS);
    const byId = new Map(opened.map((o) => [o.id, o.content]));
    for (const r of rows) {
      expect(r.backend).toBe("anthropic");
      expect(r.cost_source).toBe("hold_on_crash");
      const hold = worstCaseMicro(promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: byId.get(r.request_id)! }] }), 100, PRICE);
      expect(BigInt(r.cost_micro)).toBe(hold);
    }
    const ledger = rows.reduce((s, r) => s + BigInt(r.cost_micro), 0n);
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    expect(await store.snapshot(tenantId, budgetDay(Date.now(), "UTC"))).toMatchObject({ spentMicro: ledger, heldMicro: 0n });
  }, 90_000);
});
