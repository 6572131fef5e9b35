// A whole paid answer (not streamed) whose provider answered 200 and whose
// body then does not parse (the fakes send the first half of their JSON),
// through a real router (Redis budget counters, ledger stream and intents,
// Postgres) with the OpenRouter and Anthropic fakes. The provider generated
// it and bills it: the request is charged the estimate of a whole answer
// (the prompt's bound ÷ 3 and all the output its hold assumed), whether it
// ends there or fails over — the client's answer is what it was (502, or the
// next candidate's). So is one whose connection is reset mid-body. A
// provider's refusal (5xx) is still $0.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { budgetDay, INTENT_RESEND_WINDOW_MS, intentOpenedKey, intentStreamKey } from "@switchyard/state";
import { setBudget, setPrice, usageCostMicro, type TokenPrice } from "@switchyard/db";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-haiku-latest";
const OR_PRICE: TokenPrice = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };
const AN_PRICE: TokenPrice = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n };
const MAX_TOKENS = 50;

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let anthropic: FakeAnthropic;

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-test" }).start();
  anthropic = await new FakeAnthropic("sk-ant-test").start();
  fx = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-test", baseUrl: openrouter.url },
    "providers.anthropic": { apiKey: "sk-ant-test", baseUrl: anthropic.url },
    "billing.refreshMs": 100,
    "routing.chain": ["openrouter", "anthropic"],
    "routing.scorer.mode": "round_robin",
    "routing.models": {
      "or-only": { openrouter: OR_MODEL },
      "an-only": { anthropic: AN_MODEL },
      paid: { openrouter: OR_MODEL, anthropic: AN_MODEL },
    },
  });
  await setPrice(fx.db.db, { backend: "openrouter", model: OR_MODEL, ...OR_PRICE });
  await setPrice(fx.db.db, { backend: "anthropic", model: AN_MODEL, ...AN_PRICE });
  // A limit, so every paid attempt is held: "no hold left" means something.
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", AN_MODEL) && fx.router.deps.guard.deps.prices.price("openrouter", OR_MODEL), { what: "the prices" });
  await waitFor(async () => (await fx.router.deps.guard.deps.budgets.budgetOf(fx.tenantId)) !== null, { what: "the budget" });
});

afterAll(async () => {
  await fx?.close();
  await openrouter?.stop();
  await anthropic?.stop();
});

const bodyOf = (model: string, content: string): Record<string, unknown> => ({ model, max_tokens: MAX_TOKENS, messages: [{ role: "user", content }] });

const chat = (body: Record<string, unknown>) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

/** What a whole paid answer with no usage owes, as FINANCE.md defines it: the prompt's byte bound ÷ 3 rounded up and the whole output the provider was sent as max_tokens, at the table's prices. */
function wholeEstimate(body: Record<string, unknown>, price: TokenPrice): bigint {
  const promptTokens = Math.ceil(promptTokensUpperBound("/v1/chat/completions", body) / 3);
  return usageCostMicro({ promptTokens, completionTokens: MAX_TOKENS }, price);
}

const today = () => budgetDay(Date.now(), "UTC");
const snapshot = () => fx.router.deps.guard.deps.store.snapshot(fx.tenantId, today());
const intentsLeft = () => fx.redis.redis.xlen(intentStreamKey(fx.redis.prefix));

/** The request's own row, once the day counts it (with its `attempts` abandoned attempts' rows) and no hold or intent is left. */
async function settledRow(id: string, before: bigint, attempts = 0) {
  await waitFor(
    async () => {
      await fx.router.deps.guard.flush();
      return (await fx.db.sql`select 1 from spend_ledger where request_id = ${id}`).length > 0;
    },
    { what: `the ledger row of ${id}` },
  );
  await fx.router.deps.guard.drain();
  await fx.router.deps.guard.flush();
  const rows = await fx.db.sql`select * from spend_ledger where request_id = ${id}`;
  expect(rows).toHaveLength(1);
  const row = rows[0]!;
  const others = await fx.db.sql`select cost_micro from spend_ledger where request_id like ${id + "/a%"}`;
  expect(others).toHaveLength(attempts);
  await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "no hold left" });
  expect((await snapshot()).spentMicro - before).toBe(others.reduce((sum, o) => sum + BigInt(o.cost_micro as string), BigInt(row.cost_micro as string)));
  await waitFor(async () => (await intentsLeft()) === 0, { what: "no intent left" });
  return row;
}

describe("a paid provider answers 200 with a body that is not JSON (its first half)", () => {
  it.each([
    ["OpenRouter", "or-only", OR_PRICE, () => openrouter],
    ["Anthropic", "an-only", AN_PRICE, () => anthropic],
  ] as const)("%s alone: the client gets 502 as before; the row is the whole answer's estimate, not $0", async (_name, model, price, fake) => {
    const before = (await snapshot()).spentMicro;
    const body = bodyOf(model, `a garbled answer from ${model}`);
    fake().garbleNext();
    const r = await chat(body);
    expect(r.status).toBe(502);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("bad_upstream");
    const row = await settledRow(r.headers.get("x-request-id")!, before);
    expect(row).toMatchObject({ status: "error", cost_source: "estimate", completion_tokens: MAX_TOKENS });
    expect(BigInt(row.cost_micro as string)).toBe(wholeEstimate(body, price));
    expect(wholeEstimate(body, price)).toBeGreaterThan(0n);
  });

  it("OpenRouter's, failed over to Anthropic, which answers: the client gets Anthropic's answer; OpenRouter's whole estimate is a row of its own under OpenRouter", async () => {
    const before = (await snapshot()).spentMicro;
    const body = bodyOf("paid", "a garbled answer, then a good one");
    const charged = openrouter.generations.size;
    openrouter.garbleNext();
    anthropic.enqueue({ kind: "ok", text: "one two three", promptTokens: 10, completionTokens: 3 });
    const r = await chat(body);
    expect(r.status).toBe(200);
    expect(r.headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
    expect(((await r.json()) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content).toBe("one two three");
    // OpenRouter generated (and charged) the answer the router could not read.
    expect(openrouter.generations.size - charged).toBe(1);
    const id = r.headers.get("x-request-id")!;
    const row = await settledRow(id, before, 1);
    expect(row).toMatchObject({ backend: "anthropic", status: "ok", cost_source: "price_table", prompt_tokens: 10, completion_tokens: 3 });
    expect(BigInt(row.cost_micro as string)).toBe(usageCostMicro({ promptTokens: 10, completionTokens: 3 }, AN_PRICE));
    const [attempt] = await fx.db.sql`select * from spend_ledger where request_id = ${id + "/a1"}`;
    expect(attempt).toMatchObject({ backend: "openrouter", model: OR_MODEL, status: "error", cost_source: "estimate", completion_tokens: MAX_TOKENS });
    expect(BigInt(attempt!.cost_micro as string)).toBe(wholeEstimate(body, OR_PRICE));
  });

  it.each([
    ["OpenRouter", "or-only", OR_PRICE, () => openrouter],
    ["Anthropic", "an-only", AN_PRICE, () => anthropic],
  ] as const)("%s's connection reset mid-body (a 200 and half its JSON): 502, and the row is the whole answer's estimate, not $0", async (_name, model, price, fake) => {
    const before = (await snapshot()).spentMicro;
    const body = bodyOf(model, `a reset answer from ${model}`);
    fake().garbleNext(1, "reset");
    const r = await chat(body);
    expect(r.status).toBe(502);
    await r.text();
    const row = await settledRow(r.headers.get("x-request-id")!, before);
    expect(row).toMatchObject({ status: "error", cost_source: "estimate", completion_tokens: MAX_TOKENS });
    expect(BigInt(row.cost_micro as string)).toBe(wholeEstimate(body, price));
  });

  it("a 503 from OpenRouter, not a body that failed to parse: still $0", async () => {
    const before = (await snapshot()).spentMicro;
    openrouter.enqueue({ kind: "status", status: 503 });
    const r = await chat(bodyOf("or-only", "refused before any answer"));
    expect(r.ok).toBe(false);
    await r.text();
    const row = await settledRow(r.headers.get("x-request-id")!, before);
    expect(row).toMatchObject({ backend: "openrouter", status: "error", cost_source: "price_table" });
    expect(BigInt(row.cost_micro as string)).toBe(0n);
  });

  it("a paid attempt's once-only mark (against a resent intent script) lives ioredis' resend window, 2 minutes, not the hold's 11", async () => {
    const before = (await snapshot()).spentMicro;
    openrouter.enqueue({ kind: "ok", text: "fine", promptTokens: 5, completionTokens: 1 });
    const r = await chat(bodyOf("or-only", "an ordinary paid answer"));
    expect(r.status).toBe(200);
    await r.text();
    const id = r.headers.get("x-request-id")!;
    await settledRow(id, before);
    const ttl = await fx.redis.redis.pttl(intentOpenedKey(fx.redis.prefix, `${id}:1`));
    expect(ttl).toBeGreaterThan(0);
    expect(ttl).toBeLessThanOrEqual(INTENT_RESEND_WINDOW_MS);
    expect(fx.router.deps.config.billing.holdTtlMs).toBeGreaterThan(INTENT_RESEND_WINDOW_MS);
  });
});
