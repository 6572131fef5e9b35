// The tab's intents, in process against real Redis and Postgres: written with
// every paid hold (also for tenants without a limit), retired with no row when
// the attempt is refused or fails before its first byte, noted with the
// generation id and the usage seen — and an Anthropic orphan whose final
// usage had arrived is finished at price × that usage (usage_on_crash).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { usageCostMicro, type KeyOwner } from "@switchyard/db";
import { budgetDay, intentProgressKey, RedisBudgetStore } from "@switchyard/state";
import { AnthropicCostLookup } from "../../apps/router/src/backends/anthropic/cost-lookup.ts";
import type { Backend } from "../../apps/router/src/backends/types.ts";
import type { Usage } from "../../apps/router/src/backends/usage.ts";
import { StaticBudgets } from "../../apps/router/src/billing/budgets.ts";
import { bodyFacts, type TabInput } from "../../apps/router/src/billing/guard.ts";
import { OrphanFinisher, type PaidIntent } from "../../apps/router/src/billing/orphans.ts";
import { StaticPriceBook } from "../../apps/router/src/billing/prices.ts";
import { createTestDb, createTestRedis, sleep, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { journalGuard, ledgerBuffer, seedOwner } from "../helpers/journal-guard.ts";

const HOLD_TTL_MS = 600;
const CLAIM_IDLE_MS = 150;
const AN_MODEL = "claude-3-5-haiku-latest";
// An audio price too: Anthropic takes no audio today, but a noted usage's audio tokens are priced by the row whichever provider reported them.
const AN_PRICE = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n, cachedInputMicroPerMtok: 8_000_000n, cacheWriteMicroPerMtok: 100_000_000n, audioInputMicroPerMtok: 1_280_000_000n };

let db: TestDb;
let redis: TestRedis;
let owner: KeyOwner;
let unlimited: KeyOwner;

const backend = (kind: "openrouter" | "anthropic", model: string): Backend => ({ id: `${kind}:${model}`, kind, paid: true, model, supports: () => true, open: () => Promise.reject(new Error("not called")) });
const openrouter = backend("openrouter", "openai/gpt-4o-mini");
const anthropic = backend("anthropic", AN_MODEL);

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  owner = await seedOwner(db, "intents");
  unlimited = await seedOwner(db, "intents-unlimited");
}, 120_000);

afterAll(async () => {
  await db?.drop();
  await redis?.cleanup();
});

function setup(consumer: string, limitMicro: bigint) {
  const store = new RedisBudgetStore(redis.redis, redis.prefix);
  const budgets = new StaticBudgets();
  budgets.budgets.set(owner.tenantId, { limitMicro, timeZone: "UTC", thresholds: [] });
  const prices = new StaticPriceBook([
    { backend: "openrouter", model: "openai/gpt-4o-mini", inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n },
    { backend: "anthropic", model: AN_MODEL, ...AN_PRICE },
  ]);
  const ledger = ledgerBuffer(db, redis, `${consumer}-drain`);
  const { intents, guard } = journalGuard(redis, { consumer, store, budgets, prices, ledger, holdTtlMs: HOLD_TTL_MS, claimIdleMs: CLAIM_IDLE_MS });
  return { store, ledger, intents, guard };
}

let n = 0;
const input = (tenant: KeyOwner, model: string, content = "hello"): TabInput => ({
  requestId: `req_intents_${n++}`,
  tenant,
  path: "/v1/chat/completions",
  facts: bodyFacts("/v1/chat/completions", { model, max_tokens: 100, messages: [{ role: "user", content }] }),
  model,
  arrivedAtMs: Date.now(),
  startedAtPerf: performance.now(),
});

/**
 * An Anthropic attempt whose router noted its generation and `usage`, then
 * died before its settle, finished by another router once the hold's TTL
 * passed: the intent's id, the note as it stood, both routers and the finisher.
 */
async function anthropicOrphan(name: string, generationId: string, usage: Usage, noted: string) {
  const dead = setup(`${name}-dead`, 10n ** 12n);
  const i = input(owner, AN_MODEL);
  const admission = await dead.guard.open(i).admit(anthropic);
  if (!admission.ok || !admission.progress) throw new Error("paid attempt with an intent");
  admission.progress({ generationId });
  admission.progress({ usage });
  const id = (await redis.redis.xrange(dead.intents.key, "-", "+"))[0]?.[0];
  await waitFor(async () => ((await redis.redis.get(intentProgressKey(redis.prefix, id!))) ?? "").includes(noted), { what: "the usage note" });
  const note = await redis.redis.get(intentProgressKey(redis.prefix, id!));
  // The router dies here, before its settle.
  const alive = setup(`${name}-alive`, 10n ** 12n);
  const finisher = new OrphanFinisher(alive.intents, alive.guard, { anthropic: new AnthropicCostLookup() }, { scanMs: 60_000, concurrency: 2 });
  await sleep(CLAIM_IDLE_MS + 50);
  await finisher.scan();
  await sleep(Math.max(0, i.arrivedAtMs + HOLD_TTL_MS + 50 - Date.now()));
  expect((await finisher.scan()).finished).toBe(1);
  await alive.ledger.flush();
  return { i, id, note, dead, alive, finisher };
}

describe("intents beside paid holds", () => {
  it("a refused hold and an attempt failed before its first byte leave no intent and no row", async () => {
    const { intents, guard, ledger } = setup("refusals", 1n); // nothing fits
    await intents.ensureGroup();
    const refused = guard.open(input(owner, "openai/gpt-4o-mini"));
    expect(await refused.admit(openrouter)).toEqual({ ok: false, reason: "budget_exhausted" });
    await guard.drain();
    expect(await intents.depth()).toBe(0);

    const roomy = setup("release", 10n ** 12n);
    const tab = roomy.guard.open(input(owner, "openai/gpt-4o-mini"));
    expect((await tab.admit(openrouter)).ok).toBe(true);
    expect(await intents.depth()).toBe(1);
    tab.release(openrouter);
    await roomy.guard.drain();
    expect(await intents.depth()).toBe(0);
    await Promise.all([ledger.close(), roomy.ledger.close()]);
  });

  it("a tenant without a limit still gets an intent (the worst case, no hold) and one row", async () => {
    const { intents, guard, ledger } = setup("unlimited", 10n ** 12n);
    const i = input(unlimited, "openai/gpt-4o-mini");
    const tab = guard.open(i);
    const admission = await tab.admit(openrouter);
    expect(admission.ok && typeof admission.progress).toBe("function");
    const entries = await redis.redis.xrange(intents.key, "-", "+");
    expect(entries).toHaveLength(1);
    expect(JSON.parse(entries[0]![1][1]!)).toMatchObject({ requestId: i.requestId, tenantId: unlimited.tenantId, backend: "openrouter", model: "openai/gpt-4o-mini", held: false });
    tab.settle({ backend: openrouter, status: "ok", usage: { prompt: 3, completion: 4, cached: 0, cacheWrite: 0, providerCostMicro: 11n } });
    await guard.drain();
    expect(await intents.depth()).toBe(0);
    await ledger.flush();
    expect(await db.sql`select cost_micro::text, cost_source from spend_ledger where request_id = ${i.requestId}`).toEqual([{ cost_micro: "11", cost_source: "provider" }]);
    await ledger.close();
  });

  it("an Anthropic orphan whose final usage had arrived is finished at price × that usage", async () => {
    const { i, id, dead, alive, finisher, note } = await anthropicOrphan("anthropic", "chatcmpl-msg_01", { prompt: 1_000, completion: 37, cached: 200, cacheWrite: 300 }, '"completion":37');
    // A note as routers wrote them before one-hour writes were counted apart: it is read as none.
    expect(note).not.toContain("cacheWrite1h");
    const expected = usageCostMicro({ promptTokens: 1_000, completionTokens: 37, cachedTokens: 200, cacheWriteTokens: 300 }, AN_PRICE);
    expect(await db.sql`select cost_micro::text, cost_source, prompt_tokens, completion_tokens, cache_write_1h_tokens, provider_generation_id from spend_ledger where request_id = ${i.requestId}`).toEqual([
      { cost_micro: expected.toString(), cost_source: "usage_on_crash", prompt_tokens: 1_000, completion_tokens: 37, cache_write_1h_tokens: 0, provider_generation_id: "chatcmpl-msg_01" },
    ]);
    const snap = await alive.store.snapshot(owner.tenantId, budgetDay(i.arrivedAtMs, "UTC"));
    expect(snap.heldMicro).toBe(0n);
    expect(await redis.redis.exists(intentProgressKey(redis.prefix, id!))).toBe(0);
    await Promise.all([finisher.close(), dead.ledger.close(), alive.ledger.close()]);
  });

  it("an orphan's intent written before abandoned attempts were listed (their sum alone) is finished as it was: one row, the sum added to its cost", async () => {
    const dead = setup("pre-list-dead", 10n ** 12n);
    const requestId = `req_intents_prelist_${n++}`;
    const startedAtMs = Date.now();
    const usage = { prompt: 1_000, completion: 37, cached: 0, cacheWrite: 0 };
    const intent: PaidIntent = { requestId, tenantId: owner.tenantId, keyId: owner.keyId ?? null, day: budgetDay(startedAtMs, "UTC"), backend: "anthropic", model: AN_MODEL, holdMicro: "9000000", abandonedMicro: "270", held: false, startedAtMs, attemptAtMs: startedAtMs, holdTtlMs: HOLD_TTL_MS };
    const id = await dead.intents.open(JSON.stringify(intent), `${requestId}:1`, HOLD_TTL_MS);
    await dead.intents.note(id, JSON.stringify({ generationId: "chatcmpl-msg_pre", usage }));
    const alive = setup("pre-list-alive", 10n ** 12n);
    const finisher = new OrphanFinisher(alive.intents, alive.guard, { anthropic: new AnthropicCostLookup() }, { scanMs: 60_000, concurrency: 2 });
    await sleep(CLAIM_IDLE_MS + 50);
    await finisher.scan();
    await sleep(Math.max(0, startedAtMs + HOLD_TTL_MS + 50 - Date.now()));
    expect((await finisher.scan()).finished).toBe(1);
    await alive.ledger.flush();
    const expected = usageCostMicro({ promptTokens: 1_000, completionTokens: 37 }, AN_PRICE) + 270n;
    // Nothing says which backend the 270 is owed to: it stays on the request's row, an estimate.
    expect(await db.sql`select request_id, backend, cost_micro::text, cost_source from spend_ledger where request_id like ${requestId + "%"}`).toEqual([
      { request_id: requestId, backend: "anthropic", cost_micro: expected.toString(), cost_source: "estimate" },
    ]);
    await Promise.all([finisher.close(), dead.ledger.close(), alive.ledger.close()]);
  });

  it("an Anthropic orphan's one-hour cache writes are noted with its usage and priced apart when it is finished", async () => {
    const { i, dead, alive, finisher } = await anthropicOrphan("anthropic-1h", "chatcmpl-msg_1h", { prompt: 1_000, completion: 37, cached: 200, cacheWrite: 300, cacheWrite1h: 200 }, '"cacheWrite1h":200');
    // Micro-cents per token: 500 input × 80 + 200 read × 8 + 100 5-minute writes × 100 + 200 1-hour writes × 160 (2 × input) + 37 output × 400.
    // The row keeps the split: 300 writes in all, 200 of them for one hour.
    expect(await db.sql`select cost_micro::text, cost_source, cache_write_tokens, cache_write_1h_tokens from spend_ledger where request_id = ${i.requestId}`).toEqual([
      { cost_micro: String(500 * 80 + 200 * 8 + 100 * 100 + 200 * 160 + 37 * 400), cost_source: "usage_on_crash", cache_write_tokens: 300, cache_write_1h_tokens: 200 },
    ]);
    await Promise.all([finisher.close(), dead.ledger.close(), alive.ledger.close()]);
  });

  it("an orphan's audio prompt tokens are noted with its usage and priced at the audio price when it is finished", async () => {
    const { i, note, dead, alive, finisher } = await anthropicOrphan("anthropic-audio", "chatcmpl-msg_au", { prompt: 1_000, completion: 37, cached: 200, cacheWrite: 100, audio: 300 }, '"audio":300');
    expect(note).toContain('"audio":300');
    // Micro-cents per token: 400 text × 80 + 200 read × 8 + 100 written × 100 + 300 audio × 1,280 + 37 output × 400.
    expect(await db.sql`select cost_micro::text, cost_source, prompt_tokens, cached_tokens, cache_write_tokens from spend_ledger where request_id = ${i.requestId}`).toEqual([
      { cost_micro: String(400 * 80 + 200 * 8 + 100 * 100 + 300 * 1_280 + 37 * 400), cost_source: "usage_on_crash", prompt_tokens: 1_000, cached_tokens: 200, cache_write_tokens: 100 },
    ]);
    await Promise.all([finisher.close(), dead.ledger.close(), alive.ledger.close()]);
  });
});
