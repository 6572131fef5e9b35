// A failover whose next paid attempt's intent Redis refuses: the first
// attempt's provider accepted it (it is owed), the request fails over, and
// the second attempt's intent — which would carry that debt — is refused by
// Redis (NOPERM: the router's ACL user lost XADD for that moment; its hold
// and the rest are untouched). The earlier attempt's intent is then the
// only crash record of what is owed: it must stay — retired with the
// request's row when the router settles, or finished by another router
// when this one dies. In process, against real Redis (an ACL user, as a
// router connects) and Postgres.
import { randomBytes } from "node:crypto";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { usageCostMicro, type KeyOwner } from "@switchyard/db";
import { connectRedis, RedisBudgetStore, type RedisLike } from "@switchyard/state";
import type { Backend } from "../../apps/router/src/backends/types.ts";
import { StaticBudgets } from "../../apps/router/src/billing/budgets.ts";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { bodyFacts, type RequestTab, type TabInput } from "../../apps/router/src/billing/guard.ts";
import { OrphanFinisher } from "../../apps/router/src/billing/orphans.ts";
import { StaticPriceBook } from "../../apps/router/src/billing/prices.ts";
import { createTestDb, createTestRedis, REDIS_URL, sleep, type TestDb, type TestRedis } from "../helpers/env.ts";
import { journalGuard, ledgerBuffer, seedOwner } from "../helpers/journal-guard.ts";

const HOLD_TTL_MS = 600;
const CLAIM_IDLE_MS = 150;
const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-haiku-latest";
const OR_PRICE = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };
const AN_PRICE = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n };

const backend = (kind: "openrouter" | "anthropic", model: string): Backend => ({ id: `${kind}:${model}`, kind, paid: true, model, supports: () => true, open: () => Promise.reject(new Error("not called")) });
const openrouter = backend("openrouter", OR_MODEL);
const anthropic = backend("anthropic", AN_MODEL);

let db: TestDb;
let redis: TestRedis;
let owner: KeyOwner;
/** The router's connection: an ACL user of its own, as `redis.url` names one in production. */
let routerRedis: RedisLike;
const user = `sy-intents-test-${randomBytes(4).toString("hex")}`;
const password = randomBytes(12).toString("hex");

const acl = (...rules: string[]) => redis.redis.call("ACL", "SETUSER", user, ...rules);
/**
 * For the failover's admission only, the router's user may not XADD: the
 * intent's append is refused (NOPERM, inside its script) — and nothing else
 * the admission or the tab sends then (the hold's script, an intent's
 * retirement: XACK, XDEL) is.
 */
const refuseXadd = () => acl("-xadd");
const allowXadd = () => acl("+xadd");

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  owner = await seedOwner(db, "intent-refused");
  await acl("reset", "on", `>${password}`, "+@all", `~${redis.prefix}*`);
  const u = new URL(REDIS_URL);
  u.username = user;
  u.password = password;
  routerRedis = connectRedis(u.toString(), { autoPipelining: true });
}, 120_000);

afterAll(async () => {
  routerRedis?.disconnect();
  await redis?.redis.call("ACL", "DELUSER", user);
  await db?.drop();
  await redis?.cleanup();
});

function setup(consumer: string, conn: RedisLike) {
  const store = new RedisBudgetStore(conn, redis.prefix);
  const budgets = new StaticBudgets();
  budgets.budgets.set(owner.tenantId, { limitMicro: 10n ** 12n, timeZone: "UTC", thresholds: [] });
  const prices = new StaticPriceBook([
    { backend: "openrouter", model: OR_MODEL, ...OR_PRICE },
    { backend: "anthropic", model: AN_MODEL, ...AN_PRICE },
  ]);
  const ledger = ledgerBuffer(db, redis, `${consumer}-drain`);
  const { intents, guard } = journalGuard({ ...redis, redis: conn as TestRedis["redis"] }, { consumer, store, budgets, prices, ledger, holdTtlMs: HOLD_TTL_MS, claimIdleMs: CLAIM_IDLE_MS });
  return { store, ledger, intents, guard };
}

let n = 0;
const body = (content: string) => ({ model: "paid", stream: true, max_tokens: 100, messages: [{ role: "user", content }] });
const input = (content: string): TabInput => ({
  requestId: `req_refused_${n++}`,
  tenant: owner,
  path: "/v1/chat/completions",
  facts: bodyFacts("/v1/chat/completions", body(content)),
  model: "paid",
  arrivedAtMs: Date.now(),
  startedAtPerf: performance.now(),
});

/** OpenRouter accepts the request's first attempt and it is cut before a token (owed); the failover to Anthropic is held, but its intent is refused. Returns the first attempt's intent id. */
async function failOverWithIntentRefused(tab: RequestTab, intentsKey: string): Promise<string> {
  expect((await tab.admit(openrouter)).ok).toBe(true);
  const entries = await intentsOf(tab.input.requestId, intentsKey);
  expect(entries).toHaveLength(1);
  const first = entries[0]!;
  tab.release(openrouter, true);
  await refuseXadd();
  let admission;
  try {
    admission = await tab.admit(anthropic);
  } finally {
    await allowXadd();
  }
  // The attempt runs: its hold was taken; only its intent is missing.
  expect(admission.ok).toBe(true);
  return first;
}

/** The ids of the request's intents in the journal. */
async function intentsOf(requestId: string, intentsKey: string): Promise<string[]> {
  const entries = await redis.redis.xrange(intentsKey, "-", "+");
  return entries.filter(([, f]) => (JSON.parse(f[1]!) as { requestId: string }).requestId === requestId).map(([id]) => id);
}

const promptEstimate = (content: string, price: typeof OR_PRICE) => usageCostMicro({ promptTokens: Math.ceil(promptTokensUpperBound("/v1/chat/completions", body(content)) / 3), completionTokens: 0 }, price);

describe("the failed-over attempt's intent is refused by Redis", () => {
  it("the earlier attempt's intent stays, and the request's rows retire it: each attempt's cost under its backend, no intent left", async () => {
    const r = setup("settles", routerRedis);
    const content = "an accepted stall, then an attempt whose intent Redis refuses";
    const i = input(content);
    const tab = r.guard.open(i);
    const first = await failOverWithIntentRefused(tab, r.intents.key);
    await r.guard.drain();
    expect(await intentsOf(i.requestId, r.intents.key)).toEqual([first]);

    tab.settle({ backend: anthropic, status: "ok", usage: { prompt: 10, completion: 3, cached: 0, cacheWrite: 0 } });
    await r.guard.flush();
    const rows = await db.sql`select request_id, backend, cost_micro::text, cost_source from spend_ledger where request_id in (${i.requestId}, ${i.requestId + "/a1"}) order by request_id`;
    expect(rows).toEqual([
      { request_id: i.requestId, backend: "anthropic", cost_micro: String(usageCostMicro({ promptTokens: 10, completionTokens: 3 }, AN_PRICE)), cost_source: "price_table" },
      { request_id: `${i.requestId}/a1`, backend: "openrouter", cost_micro: String(promptEstimate(content, OR_PRICE)), cost_source: "estimate" },
    ]);
    // Retired with the row (not left pending on this router, touched by it for as long as it lives).
    expect(await intentsOf(i.requestId, r.intents.key)).toEqual([]);
    await r.ledger.close();
  });

  it("the router dies before its settle: another router finishes the request from the earlier attempt's intent", async () => {
    const dead = setup("dies", routerRedis);
    const i = input("an accepted stall, a refused intent, then the router dies");
    const first = await failOverWithIntentRefused(dead.guard.open(i), dead.intents.key);
    await dead.guard.drain();
    expect(await intentsOf(i.requestId, dead.intents.key)).toEqual([first]);
    // The router dies here. Another one takes the silent intent over and finishes it once the hold has expired.
    const alive = setup("alive", redis.redis);
    const finisher = new OrphanFinisher(alive.intents, alive.guard, {}, { scanMs: 60_000, concurrency: 2 });
    await sleep(CLAIM_IDLE_MS + 50);
    await finisher.scan();
    await sleep(Math.max(0, Number(first.split("-")[0]) + HOLD_TTL_MS + 50 - Date.now()));
    expect((await finisher.scan()).finished).toBeGreaterThanOrEqual(1);
    await alive.ledger.flush();
    const rows = await db.sql`select backend, cost_source, cost_micro::text from spend_ledger where request_id = ${i.requestId}`;
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ backend: "openrouter", cost_source: "hold_on_crash" });
    expect(BigInt(rows[0]!.cost_micro as string)).toBeGreaterThan(0n);
    expect(await intentsOf(i.requestId, alive.intents.key)).toEqual([]);
    await finisher.close();
    await Promise.all([dead.ledger.close(), alive.ledger.close()]);
  });
});
