// A failover from a paid attempt its provider accepted (2xx headers, then no
// token past the first-token deadline) to a next paid attempt that goes
// wrong itself, through a real router (Redis budget counters, ledger stream
// and intent journal, Postgres) with the OpenRouter and Anthropic fakes and a
// sim worker. The next attempt refused (429, 5xx) with nothing after it, or
// with a free worker answering after it, or its hold refused by the budget,
// or accepted and stalled as well: the first attempt's estimate is booked
// exactly once, on a row of its own under OpenRouter (`<id>/a1`), beside the
// request's row under the backend it ended on (the stalled second's own
// estimate on that one); the day's spend rises by exactly the two, the
// views count one request, and no hold and no intent is left behind.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { budgetDay, intentStreamKey } from "@switchyard/state";
import { createKey, createTenant, schema, setBudget, setPrice, spendByDay, usageCostMicro, type TokenPrice } from "@switchyard/db";
import { eq } from "drizzle-orm";
import { SimWorker } from "#testkit/sim-worker";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-haiku-latest";
const OR_PRICE: TokenPrice = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };
const AN_PRICE: TokenPrice = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n };
/** Long enough for a loaded 2-core machine to relay a normal first token, short enough to wait out. */
const FIRST_TOKEN_MS = 1_500;
/** The fakes stall well past it: the router's deadline, not the fake, ends the attempt. */
const STALL_MS = FIRST_TOKEN_MS + 2_500;

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let anthropic: FakeAnthropic;
let worker: SimWorker;

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-test" }).start();
  anthropic = await new FakeAnthropic("sk-ant-test").start();
  fx = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-test", baseUrl: openrouter.url },
    "providers.anthropic": { apiKey: "sk-ant-test", baseUrl: anthropic.url },
    "billing.refreshMs": 100,
    "deadlines.firstTokenMs": FIRST_TOKEN_MS,
    // Paid first, OpenRouter then Anthropic, workers last: a free worker is the third attempt of `paid-then-free`.
    "routing.chain": ["openrouter", "anthropic", "local", "remote"],
    // The chain's order as it stands: scoring would put an idle free worker ahead of the paid steps.
    "routing.scorer.mode": "round_robin",
    "routing.models": {
      paid: { openrouter: OR_MODEL, anthropic: AN_MODEL },
      "paid-then-free": { openrouter: OR_MODEL, anthropic: AN_MODEL, worker: "sim-chat" },
    },
  });
  await setPrice(fx.db.db, { backend: "openrouter", model: OR_MODEL, ...OR_PRICE });
  await setPrice(fx.db.db, { backend: "anthropic", model: AN_MODEL, ...AN_PRICE });
  // A limit, so every paid attempt is held: "no hold left" means something.
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100n });
  worker = await new SimWorker({ id: "failover-w1", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 3 } }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "the worker registered" });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", AN_MODEL) && fx.router.deps.guard.deps.prices.price("openrouter", OR_MODEL), { what: "the prices" });
  await waitFor(async () => (await fx.router.deps.guard.deps.budgets.budgetOf(fx.tenantId)) !== null, { what: "the budget" });
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
  await openrouter?.stop();
  await anthropic?.stop();
});

/** Each request's own prompt: its estimate is worked out from it below, independently of the router. */
function bodyOf(model: string, content: string): Record<string, unknown> {
  return { model, stream: true, max_tokens: 50, messages: [{ role: "user", content }] };
}

const chat = (body: Record<string, unknown>, key = fx.key) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

/**
 * What a paid attempt accepted and cut before its first token owes, as
 * FINANCE.md defines it: the prompt's byte bound ÷ 3 rounded up, at the
 * table's input price, nothing generated (at least 1 micro-cent).
 */
function promptEstimate(body: Record<string, unknown>, price: TokenPrice): bigint {
  const promptTokens = Math.ceil(promptTokensUpperBound("/v1/chat/completions", body) / 3);
  const micro = usageCostMicro({ promptTokens, completionTokens: 0 }, price);
  return micro > 0n ? micro : 1n;
}

/** The request's rows: its own, then its abandoned attempts' (`<id>/a<n>`). */
async function rowsOf(id: string) {
  await waitFor(
    async () => {
      await fx.router.deps.guard.flush();
      return (await fx.db.sql`select 1 from spend_ledger where request_id = ${id}`).length > 0;
    },
    { what: `the ledger row of ${id}` },
  );
  // Settles run off the request path: give a second row (there must be none) the time to land too.
  await fx.router.deps.guard.drain();
  await fx.router.deps.guard.flush();
  return fx.db.sql`select * from spend_ledger where request_id = ${id} or request_id like ${id + "/%"} order by request_id`;
}

const today = () => budgetDay(Date.now(), "UTC");
const snapshot = () => fx.router.deps.guard.deps.store.snapshot(fx.tenantId, today());
/** Intents still in the journal (retired and finished ones are deleted from it): a request settled leaves none. */
const intentsLeft = () => fx.redis.redis.xlen(intentStreamKey(fx.redis.prefix));

/**
 * The request is settled: its row costs `own`, and each abandoned attempt's
 * row (`<id>/a<n>`, in order) the estimate given; the day up by exactly
 * their sum, no hold, no intent. Returns the rows, the request's first.
 */
async function expectSettledOnce(id: string, before: bigint, own: bigint, attempts: bigint[] = []) {
  const rows = await rowsOf(id);
  expect(rows.map((r) => r.request_id)).toEqual([id, ...attempts.map((_, i) => `${id}/a${i + 1}`)]);
  expect(rows.map((r) => BigInt(r.cost_micro as string))).toEqual([own, ...attempts]);
  // Every row of the request is on its day: the same started_at.
  for (const r of rows) expect(r.started_at).toEqual(rows[0]!.started_at);
  await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
  expect((await snapshot()).spentMicro - before).toBe(attempts.reduce((a, b) => a + b, own));
  await waitFor(async () => (await intentsLeft()) === 0, { what: "no intent left" });
  return rows;
}

describe("failed over from an accepted paid attempt, the next attempt's admission fails (the budget store throws)", () => {
  it("the request still settles: one row, OpenRouter's prompt estimate, the day up by it, no hold or intent left", async () => {
    const before = (await snapshot()).spentMicro;
    const body = bodyOf("paid", "an accepted stall, then a budget store that fails");
    openrouter.enqueue({ kind: "stall", stallMs: STALL_MS });
    const store = fx.router.deps.guard.deps.store;
    const reserve = store.reserve.bind(store);
    const seen = openrouter.requests.length;
    let failed = 0;
    // OpenRouter's hold goes through (its request reaches the fake after it); Anthropic's meets a Redis that fails.
    store.reserve = (input) => (openrouter.requests.length > seen ? (failed++, Promise.reject(new Error("connect ECONNREFUSED (the test's)"))) : reserve(input));
    let id: string;
    try {
      const r = await chat(body);
      expect(r.status).toBe(500);
      await r.text();
      id = r.headers.get("x-request-id")!;
    } finally {
      store.reserve = reserve;
    }
    expect(failed).toBe(1);
    await expectSettledOnce(id, before, promptEstimate(body, OR_PRICE));
  });
});

describe("failed over from an accepted paid attempt, the next paid attempt is refused before any response", () => {
  it.each([429, 503])("Anthropic answers %i and nothing follows: the request's row is Anthropic's, at nothing; OpenRouter's prompt estimate has a row of its own under OpenRouter, once; no hold left", async (status) => {
    const before = (await snapshot()).spentMicro;
    const body = bodyOf("paid", `refused ${status} after an accepted stall`);
    const seen = { or: openrouter.requests.length, an: anthropic.requests.length };
    openrouter.enqueue({ kind: "stall", stallMs: STALL_MS });
    anthropic.enqueue({ kind: "status", status });
    const r = await chat(body);
    // The last attempt's failure is the answer; the request is not a success.
    expect(r.ok).toBe(false);
    await r.text();
    // Both providers were tried, once each.
    expect([openrouter.requests.length - seen.or, anthropic.requests.length - seen.an]).toEqual([1, 1]);
    const owed = promptEstimate(body, OR_PRICE);
    const [row, attempt] = await expectSettledOnce(r.headers.get("x-request-id")!, before, 0n, [owed]);
    // The request's row names the attempt it ended on, which, refused, costs $0 …
    expect(row).toMatchObject({ backend: "anthropic", model: AN_MODEL, status: "error", cost_source: "price_table", completion_tokens: 0 });
    // … and OpenRouter's estimate is booked under OpenRouter, as it ended (its first-token deadline).
    expect(attempt).toMatchObject({ backend: "openrouter", model: OR_MODEL, status: "timeout", cost_source: "estimate", completion_tokens: 0, prompt_tokens: Math.ceil(promptTokensUpperBound("/v1/chat/completions", body) / 3), provider_generation_id: null });
  });

  it("Anthropic answers 429, then a free worker answers: the worker's row costs $0, OpenRouter's prompt estimate has a row of its own under OpenRouter, once; no hold left", async () => {
    const before = (await snapshot()).spentMicro;
    const body = bodyOf("paid-then-free", "a worker answers after a refusal after an accepted stall");
    const seen = { or: openrouter.requests.length, an: anthropic.requests.length };
    openrouter.enqueue({ kind: "stall", stallMs: STALL_MS });
    anthropic.enqueue({ kind: "status", status: 429 });
    const r = await chat(body);
    expect(r.status).toBe(200);
    expect(r.headers.get("x-switchyard-backend")).toBe("worker:failover-w1");
    expect(await r.text()).toContain("data: [DONE]");
    expect([openrouter.requests.length - seen.or, anthropic.requests.length - seen.an]).toEqual([1, 1]);
    const owed = promptEstimate(body, OR_PRICE);
    const [row, attempt] = await expectSettledOnce(r.headers.get("x-request-id")!, before, 0n, [owed]);
    expect(row).toMatchObject({ backend: "worker", status: "ok", cost_source: "price_table" });
    expect(attempt).toMatchObject({ backend: "openrouter", model: OR_MODEL, status: "timeout", cost_source: "estimate" });
  });
});

describe("failed over from an accepted paid attempt, the next paid attempt is refused by the budget", () => {
  it("Anthropic's hold (its worst case plus what OpenRouter is owed) does not fit: OpenRouter's row is its prompt estimate, once; its hold and intent are not left behind", async () => {
    // 1 cent a day: OpenRouter's worst case for 4,000 output tokens fits (~240,000 micro-cents), Anthropic's (~1,600,000) does not.
    const t = await createTenant(fx.db.db, "tight");
    if (!t.ok) throw new Error("tenant");
    await setBudget(fx.db.db, { tenantId: t.tenant.id, dailyLimitCents: 1n });
    const { key } = await createKey(fx.db.db, t.tenant.id);
    await waitFor(async () => (await fx.router.deps.guard.deps.budgets.budgetOf(t.tenant.id)) !== null, { what: "the budget" });
    const tight = () => fx.router.deps.guard.deps.store.snapshot(t.tenant.id, today());
    const before = (await tight()).spentMicro;
    const body = { ...bodyOf("paid", "a stall, then a hold the budget refuses"), max_tokens: 4_000 };
    const seen = { or: openrouter.requests.length, an: anthropic.requests.length };
    openrouter.enqueue({ kind: "stall", stallMs: STALL_MS });
    const r = await chat(body, key);
    expect(r.ok).toBe(false);
    await r.text();
    // Anthropic was never asked: the budget refused its hold.
    expect([openrouter.requests.length - seen.or, anthropic.requests.length - seen.an]).toEqual([1, 0]);
    const owed = promptEstimate(body, OR_PRICE);
    const rows = await rowsOf(r.headers.get("x-request-id")!);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ backend: "openrouter", model: OR_MODEL, status: "timeout", cost_source: "estimate", completion_tokens: 0 });
    expect(BigInt(rows[0]!.cost_micro as string)).toBe(owed);
    await waitFor(async () => (await tight()).heldMicro === 0n, { what: "no hold left" });
    expect((await tight()).spentMicro - before).toBe(owed);
    await waitFor(async () => (await intentsLeft()) === 0, { what: "no intent left" });
  });
});

describe("failed over from an accepted paid attempt, the next paid attempt is accepted and stalls too", () => {
  it("both prompts are owed, each under its own backend, once; no hold left", async () => {
    const before = (await snapshot()).spentMicro;
    const body = bodyOf("paid", "two accepted stalls in a row");
    const seen = { or: openrouter.requests.length, an: anthropic.requests.length };
    openrouter.enqueue({ kind: "stall", stallMs: STALL_MS });
    anthropic.enqueue({ kind: "stall", stallMs: STALL_MS });
    const r = await chat(body);
    expect(r.status).toBe(504);
    await r.text();
    expect([openrouter.requests.length - seen.or, anthropic.requests.length - seen.an]).toEqual([1, 1]);
    const [row, attempt] = await expectSettledOnce(r.headers.get("x-request-id")!, before, promptEstimate(body, AN_PRICE), [promptEstimate(body, OR_PRICE)]);
    expect(row).toMatchObject({ backend: "anthropic", model: AN_MODEL, status: "timeout", cost_source: "estimate", completion_tokens: 0 });
    expect(attempt).toMatchObject({ backend: "openrouter", model: OR_MODEL, status: "timeout", cost_source: "estimate", completion_tokens: 0 });
    // Each row's tokens are its own attempt's estimate, not the two summed.
    expect(row!.prompt_tokens).toBe(Math.ceil(promptTokensUpperBound("/v1/chat/completions", body) / 3));
    expect(attempt!.prompt_tokens).toBe(row!.prompt_tokens);
  });
});

describe("spend per backend after a failover from an accepted OpenRouter attempt to a free worker", () => {
  it("OpenRouter's line carries its estimate and no request, the worker's line the request at $0; the tenant's totals count one request and the estimate once", async () => {
    const t = await createTenant(fx.db.db, "by-backend");
    if (!t.ok) throw new Error("tenant");
    const tenantId = t.tenant.id;
    await setBudget(fx.db.db, { tenantId, dailyLimitCents: 100n });
    const { key } = await createKey(fx.db.db, tenantId);
    await waitFor(async () => (await fx.router.deps.guard.deps.budgets.budgetOf(tenantId)) !== null, { what: "the budget" });
    const body = bodyOf("paid-then-free", "what each backend is owed, by backend");
    openrouter.enqueue({ kind: "stall", stallMs: STALL_MS });
    anthropic.enqueue({ kind: "status", status: 429 });
    const r = await chat(body, key);
    expect(r.status).toBe(200);
    await r.text();
    const owed = promptEstimate(body, OR_PRICE);
    await rowsOf(r.headers.get("x-request-id")!);
    const day = today();

    const daily = await fx.db.db.select().from(schema.spendDaily).where(eq(schema.spendDaily.tenantId, tenantId)).orderBy(schema.spendDaily.backend);
    // Anthropic refused its attempt (429): no line. OpenRouter accepted its own and bills its prompt.
    expect(daily.map((d) => ({ backend: d.backend, model: d.model, requests: d.requests, abandonedAttempts: d.abandonedAttempts, costMicro: d.costMicro }))).toEqual([
      { backend: "openrouter", model: OR_MODEL, requests: 0, abandonedAttempts: 1, costMicro: owed },
      { backend: "worker", model: "paid-then-free", requests: 1, abandonedAttempts: 0, costMicro: 0n },
    ]);
    const [vs] = await fx.db.db.select().from(schema.spendVsBudget).where(eq(schema.spendVsBudget.tenantId, tenantId));
    expect(vs).toMatchObject({ day, requests: 1, costMicro: owed });

    const byBackend = await spendByDay(fx.db.db, { from: day, to: day, tenantId, by: "backend" });
    expect(byBackend.map((b) => ({ backend: b.backend, requests: b.requests, abandonedAttempts: b.abandonedAttempts, costMicro: b.costMicro }))).toEqual([
      { backend: "openrouter", requests: 0, abandonedAttempts: 1, costMicro: owed },
      { backend: "worker", requests: 1, abandonedAttempts: 0, costMicro: 0n },
    ]);
    const [perDay] = await spendByDay(fx.db.db, { from: day, to: day, tenantId, by: "day" });
    expect(perDay).toMatchObject({ requests: 1, abandonedAttempts: 1, costMicro: owed });
    // The day's counters equal the ledger: the estimate counted once.
    expect((await fx.router.deps.guard.deps.store.snapshot(tenantId, day)).spentMicro).toBe(owed);
  });
});
