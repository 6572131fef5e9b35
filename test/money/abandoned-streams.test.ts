// A paid stream the provider accepted (2xx headers) but that ended before its
// first token — the router's first-token deadline, the client leaving, the
// router's drain — through a real router (Redis budget counters and ledger
// stream, Postgres) with the OpenRouter and Anthropic fakes. The provider had
// the prompt and bills it: the row is an estimate, never $0, and the day's
// spend rises by it. An attempt refused before any response (5xx, 429) stays
// $0. One that is failed over from is charged on the request's one row.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RedisBudgetStore, budgetDay } from "@switchyard/state";
import { setBudget, setPrice, usageCostMicro, type TokenPrice } from "@switchyard/db";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { sleep, waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-haiku-latest";
const OR_PRICE: TokenPrice = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };
const AN_PRICE: TokenPrice = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n };
/** Long enough for a loaded 2-core machine to relay a normal first token, short enough to wait out. */
const FIRST_TOKEN_MS = 1_500;

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let anthropic: FakeAnthropic;

async function pricedRouter(overrides: Record<string, unknown> = {}): Promise<RouterFixture> {
  const f = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-test", baseUrl: openrouter.url },
    "providers.anthropic": { apiKey: "sk-ant-test", baseUrl: anthropic.url },
    "billing.refreshMs": 100,
    // A model both providers serve, OpenRouter first: the failover cases.
    "routing.models": { paid: { openrouter: OR_MODEL, anthropic: AN_MODEL } },
    ...overrides,
  });
  await setPrice(f.db.db, { backend: "openrouter", model: OR_MODEL, ...OR_PRICE });
  await setPrice(f.db.db, { backend: "anthropic", model: AN_MODEL, ...AN_PRICE });
  // A limit, so every paid attempt is held: "no hold left" means something.
  await setBudget(f.db.db, { tenantId: f.tenantId, dailyLimitCents: 100n });
  await waitFor(() => f.router.deps.guard.deps.prices.price("anthropic", AN_MODEL) && f.router.deps.guard.deps.prices.price("openrouter", OR_MODEL));
  await waitFor(async () => (await f.router.deps.guard.deps.budgets.budgetOf(f.tenantId)) !== null);
  return f;
}

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-test" }).start();
  anthropic = await new FakeAnthropic("sk-ant-test").start();
  fx = await pricedRouter({ "deadlines.firstTokenMs": FIRST_TOKEN_MS });
});

afterAll(async () => {
  await fx?.close();
  await openrouter?.stop();
  await anthropic?.stop();
});

const chatOn = (f: RouterFixture, body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${f.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${f.key}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "a prompt the provider reads before its first token" }], stream: true, ...body }),
    signal,
  });
const chat = (body: Record<string, unknown>, signal?: AbortSignal) => chatOn(fx, body, signal);

async function rowOf(f: RouterFixture, id: string) {
  await waitFor(
    async () => {
      await f.router.deps.guard.flush();
      return (await f.db.sql`select 1 from spend_ledger where request_id = ${id}`).length === 1;
    },
    { what: `the ledger row of ${id}` },
  );
  const [row] = await f.db.sql`select * from spend_ledger where request_id = ${id}`;
  return row!;
}

const today = () => budgetDay(Date.now(), "UTC");
const snapshot = () => fx.router.deps.guard.deps.store.snapshot(fx.tenantId, today());

/** A row charged for an accepted prompt alone: an estimate of it, nothing generated, at the table's input price. */
function expectPromptEstimate(row: Record<string, unknown>, price: TokenPrice): bigint {
  expect(row.cost_source).toBe("estimate");
  expect(row.completion_tokens).toBe(0);
  expect(row.prompt_tokens as number).toBeGreaterThan(0);
  const cost = BigInt(row.cost_micro as string);
  expect(cost).toBeGreaterThan(0n);
  expect(cost).toBe(usageCostMicro({ promptTokens: row.prompt_tokens as number, completionTokens: 0 }, price));
  return cost;
}

describe("a paid stream accepted and ended before its first token is charged its prompt", () => {
  it("OpenRouter sends 200 and processing comments past the first-token deadline: an estimate, on the row and the day, no hold left", async () => {
    const before = await snapshot();
    openrouter.enqueue({ kind: "stall", stallMs: FIRST_TOKEN_MS + 2_500 });
    const r = await chat({ model: OR_MODEL });
    expect(r.status).toBe(504);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("upstream_timeout");
    const row = await rowOf(fx, r.headers.get("x-request-id")!);
    expect(row).toMatchObject({ backend: "openrouter", model: OR_MODEL, status: "timeout" });
    const cost = expectPromptEstimate(row, OR_PRICE);
    await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
    expect((await snapshot()).spentMicro - before.spentMicro).toBe(cost);
  });

  it("Anthropic sends message_start and pings past the first-token deadline: the same", async () => {
    const before = await snapshot();
    anthropic.enqueue({ kind: "stall", stallMs: FIRST_TOKEN_MS + 2_500 });
    const r = await chat({ model: AN_MODEL });
    expect(r.status).toBe(504);
    await r.text();
    const row = await rowOf(fx, r.headers.get("x-request-id")!);
    expect(row).toMatchObject({ backend: "anthropic", status: "timeout" });
    const cost = expectPromptEstimate(row, AN_PRICE);
    await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
    expect((await snapshot()).spentMicro - before.spentMicro).toBe(cost);
  });

  it("the client leaves after the provider's headers, before any token: an estimate, and OpenRouter did charge the prompt", async () => {
    const before = await snapshot();
    const generated = openrouter.generations.size;
    const seen = openrouter.requests.length;
    openrouter.enqueue({ kind: "stall", stallMs: 10_000 });
    const ac = new AbortController();
    const answered = chat({ model: OR_MODEL }, ac.signal).catch(() => undefined);
    // The fake wrote its 200 headers as it took the request (its first comment follows within 100 ms).
    await waitFor(() => openrouter.requests.length > seen && openrouter.inFlight > 0, { what: "the request accepted upstream" });
    await sleep(150);
    ac.abort();
    await answered;
    // The router never answered, so the id is the ledger's newest for this tenant.
    const id = await waitFor(async () => {
      await fx.router.deps.guard.flush();
      const [r] = await fx.db.sql`select request_id from spend_ledger where tenant_id = ${fx.tenantId} and status = 'client_cancelled' and started_at > now() - interval '1 minute'`;
      return r?.request_id as string | undefined;
    }, { what: "the cancelled request's row" });
    const row = await rowOf(fx, id);
    expect(row).toMatchObject({ backend: "openrouter", status: "client_cancelled" });
    const cost = expectPromptEstimate(row, OR_PRICE);
    await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
    expect((await snapshot()).spentMicro - before.spentMicro).toBe(cost);
    // The provider's side: a cancelled generation, its prompt charged, nothing generated.
    await waitFor(() => openrouter.generations.size === generated + 1, { what: "the provider's charge" });
    const charged = [...openrouter.generations.values()].at(-1)!;
    expect(charged).toMatchObject({ cancelled: true, completion: 0 });
    expect(Number(charged.costText)).toBeGreaterThan(0);
  });

  it("failed over from after its headers: the answer's row is its own cost, the abandoned attempt's estimate a row of its own under OpenRouter", async () => {
    const before = await snapshot();
    openrouter.enqueue({ kind: "stall", stallMs: FIRST_TOKEN_MS + 2_500 });
    anthropic.enqueue({ kind: "ok", promptTokens: 100, completionTokens: 5 });
    const r = await chat({ model: "paid" });
    expect(r.status).toBe(200);
    expect(r.headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
    expect(await r.text()).toContain("data: [DONE]");
    const id = r.headers.get("x-request-id")!;
    const row = await rowOf(fx, id);
    expect(await fx.db.sql`select 1 from spend_ledger where request_id = ${id}`).toHaveLength(1);
    // The answer's own usage and cost, Anthropic's 100 + 5 tokens at its prices: what Anthropic bills for it …
    expect(row).toMatchObject({ backend: "anthropic", status: "ok", prompt_tokens: 100, completion_tokens: 5, cost_source: "price_table" });
    const answered = usageCostMicro({ promptTokens: 100, completionTokens: 5 }, AN_PRICE);
    expect(BigInt(row.cost_micro as string)).toBe(answered);
    // … and OpenRouter's accepted prompt on OpenRouter's line, estimated as a lone timeout's is (the first test's figure).
    const [attempt, ...more] = await fx.db.sql`select * from spend_ledger where request_id like ${id + "/%"}`;
    expect(more).toHaveLength(0);
    expect(attempt).toMatchObject({ request_id: `${id}/a1`, backend: "openrouter", model: OR_MODEL, status: "timeout", cost_source: "estimate", completion_tokens: 0, started_at: row.started_at });
    const abandoned = BigInt(attempt!.cost_micro as string);
    expect(abandoned).toBeGreaterThan(0n);
    const [lone] = await fx.db.sql`select cost_micro from spend_ledger where tenant_id = ${fx.tenantId} and backend = 'openrouter' and status = 'timeout' order by started_at limit 1`;
    expect(abandoned).toBe(BigInt(lone!.cost_micro as string));
    await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
    // The day counts both, once.
    expect((await snapshot()).spentMicro - before.spentMicro).toBe(answered + abandoned);
  });
});

describe("a whole paid answer (not streamed) cut by the answer deadline before its headers", () => {
  it("was being generated: charged its prompt and the whole output its hold assumed, on the row and the day, no hold left", async () => {
    const f = await pricedRouter({ "deadlines.answerMs": 1_500 });
    try {
      const snap = () => f.router.deps.guard.deps.store.snapshot(f.tenantId, today());
      const before = await snap();
      openrouter.enqueue({ kind: "stall", stallMs: 4_000 });
      const r = await chatOn(f, { model: OR_MODEL, stream: false, max_tokens: 20 });
      expect(r.status).toBe(504);
      await r.text();
      const row = await rowOf(f, r.headers.get("x-request-id")!);
      expect(row).toMatchObject({ backend: "openrouter", status: "timeout", cost_source: "estimate", completion_tokens: 20 });
      const cost = BigInt(row.cost_micro as string);
      expect(cost).toBe(usageCostMicro({ promptTokens: row.prompt_tokens as number, completionTokens: 20 }, OR_PRICE));
      await waitFor(async () => (await snap()).heldMicro === 0n, { what: "no hold left" });
      expect((await snap()).spentMicro - before.spentMicro).toBe(cost);
    } finally {
      await f.close();
    }
  });
});

describe("a paid attempt refused before any response stays $0", () => {
  it("a 5xx from the only provider: the row costs nothing, the day is unchanged", async () => {
    const before = await snapshot();
    openrouter.enqueue({ kind: "status", status: 502 });
    const r = await chat({ model: OR_MODEL });
    expect(r.status).toBeGreaterThanOrEqual(500);
    await r.text();
    const row = await rowOf(fx, r.headers.get("x-request-id")!);
    expect(row).toMatchObject({ backend: "openrouter", status: "error", completion_tokens: 0 });
    expect(BigInt(row.cost_micro as string)).toBe(0n);
    await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
    expect((await snapshot()).spentMicro).toBe(before.spentMicro);
  });

  it.each([
    ["a 429", { kind: "status", status: 429 }],
    ["an error event after 200 headers, before any token (the provider's own failure)", { kind: "midstream_error", afterTokens: 0 }],
  ] as const)("%s failed over from: the row is the answer's own cost, as the provider reported it", async (_, failure) => {
    const before = await snapshot();
    openrouter.enqueue(failure);
    anthropic.enqueue({ kind: "ok", promptTokens: 100, completionTokens: 5 });
    const r = await chat({ model: "paid" });
    expect(r.status).toBe(200);
    expect(r.headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
    await r.text();
    const row = await rowOf(fx, r.headers.get("x-request-id")!);
    expect(row).toMatchObject({ backend: "anthropic", cost_source: "price_table" });
    const answered = usageCostMicro({ promptTokens: 100, completionTokens: 5 }, AN_PRICE);
    expect(BigInt(row.cost_micro as string)).toBe(answered);
    await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
    expect((await snapshot()).spentMicro - before.spentMicro).toBe(answered);
  });
});

describe("a router draining ends an accepted paid stream still waiting for its first token", () => {
  it("ends it with 503 router_shutting_down, charges the prompt's estimate and leaves no hold", async () => {
    const f = await pricedRouter();
    try {
      const seen = openrouter.requests.length;
      openrouter.enqueue({ kind: "stall", stallMs: 10_000 });
      const answered = chatOn(f, { model: OR_MODEL });
      await waitFor(() => openrouter.requests.length > seen && openrouter.inFlight > 0, { what: "the request accepted upstream" });
      await sleep(150);
      await f.router.close({ drainMs: 200 });
      const r = await answered;
      expect(r.status).toBe(503);
      expect(((await r.json()) as { error: { code: string } }).error.code).toBe("router_shutting_down");
      // The router is gone: its settle and row were flushed by close(); read them as finance would.
      const id = r.headers.get("x-request-id")!;
      const [row] = await f.db.sql`select * from spend_ledger where request_id = ${id}`;
      expect(row).toMatchObject({ backend: "openrouter", status: "timeout" });
      const cost = expectPromptEstimate(row!, OR_PRICE);
      const s = await new RedisBudgetStore(f.redis.redis, f.redis.prefix).snapshot(f.tenantId, today());
      expect(s.heldMicro).toBe(0n);
      expect(s.spentMicro).toBe(cost);
    } finally {
      await f.close();
    }
  });
});
