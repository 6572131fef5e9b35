// Money on the request path, through a real router (real Redis budget
// counters and ledger stream, real Postgres) with the OpenRouter and
// Anthropic fakes as paid backends and a sim worker as the free one.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice, usdToMicro, deleteBudget, worstCaseMicro } from "@switchyard/db";
import { budgetDay } from "@switchyard/state";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "#testkit/sim-worker";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { bodyFacts } from "../../apps/router/src/billing/guard.ts";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let anthropic: FakeAnthropic;
let worker: SimWorker;

const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-haiku-latest";

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-test" }).start();
  anthropic = await new FakeAnthropic("sk-ant-test").start();
  fx = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-test", baseUrl: openrouter.url },
    "providers.anthropic": { apiKey: "sk-ant-test", baseUrl: anthropic.url },
    "billing.refreshMs": 100,
    "routing.models": { chat: { worker: "sim-chat", openrouter: OR_MODEL, anthropic: AN_MODEL } },
  });
  // $0.15 / $0.60 per million tokens; Anthropic with cache prices.
  await setPrice(fx.db.db, { backend: "openrouter", model: OR_MODEL, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n });
  await setPrice(fx.db.db, {
    backend: "anthropic",
    model: AN_MODEL,
    inputMicroPerMtok: 80_000_000n,
    outputMicroPerMtok: 400_000_000n,
    cachedInputMicroPerMtok: 8_000_000n,
    cacheWriteMicroPerMtok: 100_000_000n,
  });
  worker = await new SimWorker({ id: "money-w1", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 3 } }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1);
  // Let the price book pick the prices up.
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", AN_MODEL));
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
  await openrouter?.stop();
  await anthropic?.stop();
});

const chat = (body: Record<string, unknown>, signal?: AbortSignal) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ messages: [{ role: "user", content: "hello there" }], ...body }),
    signal,
  });

async function rows(ids: string[]) {
  await fx.router.deps.guard.flush();
  return fx.db.sql`select * from spend_ledger where request_id = any(${ids}) order by started_at`;
}

const today = () => budgetDay(Date.now(), "UTC");
/** Routers cache budgets for billing.refreshMs (100 ms here). */
const budgetChanged = () => new Promise((r) => setTimeout(r, 150));
const snapshot = () => fx.router.deps.guard.deps.store.snapshot(fx.tenantId, today());

describe("paid backends on the request path", () => {
  it("a model only OpenRouter serves runs there; the row carries OpenRouter's own cost and generation id", async () => {
    const before = openrouter.reportedCostsUsd.length;
    const a = await chat({ model: OR_MODEL });
    expect(a.status).toBe(200);
    expect(a.headers.get("x-switchyard-backend")).toBe(`openrouter:${OR_MODEL}`);
    await a.json();
    const b = await chat({ model: OR_MODEL, stream: true });
    const text = await b.text();
    expect(text).toContain("data: [DONE]");
    // The client did not ask for usage: the chunk OpenRouter always sends is not relayed.
    expect(text).not.toContain('"usage"');
    const ids = [a.headers.get("x-request-id")!, b.headers.get("x-request-id")!];
    const got = await rows(ids);
    expect(got).toHaveLength(2);
    const reported = openrouter.reportedCostsUsd.slice(before);
    expect(reported).toHaveLength(2);
    for (const [i, r] of got.entries()) {
      expect(r.backend).toBe("openrouter");
      expect(r.model).toBe(OR_MODEL);
      expect(r.cost_source).toBe("provider");
      expect(BigInt(r.cost_micro)).toBe(usdToMicro(reported[i]!));
      expect(BigInt(r.cost_micro)).toBeGreaterThan(0n);
      expect(r.provider_generation_id).toMatch(/^gen-/);
      expect(r.status).toBe("ok");
    }
    // Paid spend reached the tenant's live counter, holds are gone.
    const s = await snapshot();
    expect(s.heldMicro).toBe(0n);
    expect(s.spentMicro).toBeGreaterThanOrEqual(got.reduce((acc, r) => acc + BigInt(r.cost_micro), 0n));
  });

  it("lists configured aliases with the backends they reach", async () => {
    const r = await fetch(`${fx.router.url}/v1/models`, { headers: { authorization: `Bearer ${fx.key}` } });
    const body = (await r.json()) as { data: Array<{ id: string; backends?: string[] }> };
    const alias = body.data.find((m) => m.id === "chat");
    expect(alias?.backends).toEqual(["worker:money-w1", `openrouter:${OR_MODEL}`, `anthropic:${AN_MODEL}`]);
    expect(body.data.some((m) => m.id === "sim-chat")).toBe(true);
  });

  it("holds no more output than it tells the provider: max_tokens is capped and sent", async () => {
    await (await chat({ model: OR_MODEL, max_tokens: 1_000_000 })).text();
    expect(openrouter.requests.at(-1)!.body.max_tokens).toBe(fx.router.deps.config.billing.maxOutputTokens);
    await (await chat({ model: OR_MODEL, max_tokens: 7 })).text();
    expect(openrouter.requests.at(-1)!.body.max_tokens).toBe(7);
  });

  it("falls through the chain: a failing worker → OpenRouter; a healthy worker serves for free", async () => {
    worker.behavior.failStatus = 503;
    const a = await chat({ model: "chat" });
    worker.behavior.failStatus = undefined;
    expect(a.status).toBe(200);
    expect(a.headers.get("x-switchyard-backend")).toBe(`openrouter:${OR_MODEL}`);
    await a.text();
    const b = await chat({ model: "chat" });
    expect(b.headers.get("x-switchyard-backend")).toBe("worker:money-w1");
    await b.text();
    const [ra, rb] = await rows([a.headers.get("x-request-id")!, b.headers.get("x-request-id")!]);
    expect(ra!.backend).toBe("openrouter");
    expect(BigInt(ra!.cost_micro)).toBeGreaterThan(0n);
    expect(rb!.backend).toBe("worker");
    expect(rb!.worker).toBe("money-w1");
    expect(BigInt(rb!.cost_micro)).toBe(0n);
    expect(rb!.cost_source).toBe("price_table");
    expect(rb!.provider_generation_id).toBeNull();
  });

  it("Anthropic is priced from the table, cache reads and writes included", async () => {
    anthropic.enqueue({ kind: "ok", promptTokens: 1000, cachedTokens: 200, cacheWriteTokens: 300, completionTokens: 50 });
    const r = await chat({ model: AN_MODEL, stream: true, stream_options: { include_usage: true } });
    expect(r.status).toBe(200);
    const text = await r.text();
    expect(text).toContain('"prompt_tokens":1000');
    const [row] = await rows([r.headers.get("x-request-id")!]);
    expect(row!.backend).toBe("anthropic");
    expect(row!.prompt_tokens).toBe(1000);
    expect(row!.cached_tokens).toBe(200);
    expect(row!.cache_write_tokens).toBe(300);
    // All of them 5-minute writes: none for one hour.
    expect(row!.cache_write_1h_tokens).toBe(0);
    expect(row!.completion_tokens).toBe(50);
    // 500 input × $0.80 + 200 cached × $0.08 + 300 written × $1.00 + 50 output × $4, per million.
    expect(BigInt(row!.cost_micro)).toBe((500n * 80_000_000n + 200n * 8_000_000n + 300n * 100_000_000n + 50n * 400_000_000n) / 1_000_000n);
    expect(row!.cost_source).toBe("price_table");
    // Anthropic's message id, to match its invoice.
    expect(row!.provider_generation_id).toMatch(/msg_/);
  });

  it("Anthropic's one-hour cache writes are priced at the 1-hour price (2× input unset), streamed and not, on the row and the day", async () => {
    const before = (await snapshot()).spentMicro;
    // 1000 prompt tokens: 500 fresh, 200 read from cache, 300 written (100 for 5 minutes, 200 for 1 hour).
    const answer = { kind: "ok", promptTokens: 1000, cachedTokens: 200, cacheWriteTokens: 300, cacheWrite1hTokens: 200, completionTokens: 50 } as const;
    anthropic.enqueue(answer, answer);
    const streamed = await chat({ model: AN_MODEL, stream: true, stream_options: { include_usage: true } });
    expect(streamed.status).toBe(200);
    // The client sees the writes' total as before, and the 1-hour part.
    expect(await streamed.text()).toContain('"prompt_tokens_details":{"cached_tokens":200,"cache_write_tokens":300,"cache_write_1h_tokens":200}');
    const whole = await chat({ model: AN_MODEL });
    expect(whole.status).toBe(200);
    expect(((await whole.json()) as { usage: unknown }).usage).toMatchObject({ prompt_tokens: 1000, prompt_tokens_details: { cache_write_tokens: 300, cache_write_1h_tokens: 200 } });
    const got = await rows([streamed.headers.get("x-request-id")!, whole.headers.get("x-request-id")!]);
    expect(got).toHaveLength(2);
    // Micro-cents per token: 500 input × 80 + 200 cache reads × 8 + 100 5-minute writes × 100
    // + 200 1-hour writes × 160 (2 × 80) + 50 output × 400.
    const expected = 500n * 80n + 200n * 8n + 100n * 100n + 200n * 160n + 50n * 400n;
    expect(expected).toBe(103_600n);
    for (const row of got) {
      // The writes' total, and of them the 1-hour ones, each kept on the row (streamed and not).
      expect(row).toMatchObject({ backend: "anthropic", prompt_tokens: 1000, cached_tokens: 200, cache_write_tokens: 300, cache_write_1h_tokens: 200, completion_tokens: 50, cost_source: "price_table", status: "ok" });
      expect(BigInt(row.cost_micro)).toBe(expected);
    }
    // The day is charged exactly that, twice; no hold is left.
    const after = await snapshot();
    expect(after.spentMicro - before).toBe(2n * expected);
    expect(after.heldMicro).toBe(0n);
  });

  it("a paid backend without a price is never tried: its cost could not be bounded", async () => {
    const seen = openrouter.requests.length;
    const r = await chat({ model: "vendor/unpriced-model" });
    expect(r.status).toBe(503);
    const body = (await r.json()) as { error: { code: string; message: string } };
    expect(body.error.code).toBe("no_healthy_backend");
    expect(body.error.message).toContain("unpriced");
    expect(openrouter.requests.length).toBe(seen);
  });

  it("a provider that reports no usage is billed an estimate, flagged, never $0", async () => {
    openrouter.enqueue({ kind: "no_usage", text: "a b c d", completionTokens: 4 }, { kind: "no_usage" });
    const a = await chat({ model: OR_MODEL, stream: true });
    await a.text();
    const b = await chat({ model: OR_MODEL });
    await b.text();
    const got = await rows([a.headers.get("x-request-id")!, b.headers.get("x-request-id")!]);
    expect(got).toHaveLength(2);
    for (const r of got) {
      expect(r.cost_source).toBe("estimate");
      expect(BigInt(r.cost_micro)).toBeGreaterThan(0n);
    }
  });

  it("a client that disconnects mid-stream is billed what was consumed, and its hold is gone", async () => {
    await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100n });
    await budgetChanged();
    openrouter.enqueue({ kind: "slow", interTokenMs: 50, completionTokens: 200 });
    const ac = new AbortController();
    const r = await chat({ model: OR_MODEL, stream: true }, ac.signal);
    const reader = r.body!.getReader();
    await reader.read();
    const id = r.headers.get("x-request-id")!;
    ac.abort();
    await waitFor(async () => (await rows([id])).length === 1, { what: "the cancelled request's row" });
    const [row] = await rows([id]);
    expect(row!.status).toBe("client_cancelled");
    expect(row!.cost_source).toBe("estimate");
    expect(BigInt(row!.cost_micro)).toBeGreaterThan(0n);
    await waitFor(async () => (await snapshot()).heldMicro === 0n, { what: "the hold to settle" });
    await deleteBudget(fx.db.db, fx.tenantId);
    await budgetChanged();
  });
});

describe("a non-streamed paid answer whose client leaves", () => {
  it("is billed as the provider bills it: whole, the output the hold assumed (1 token before)", async () => {
    const cancelled = async () => fx.db.sql`select * from spend_ledger where tenant_id = ${fx.tenantId} and status = 'client_cancelled' and model = ${OR_MODEL} order by started_at desc`;
    await fx.router.deps.guard.flush();
    const before = (await cancelled()).length;
    const generated = openrouter.generations.size;
    openrouter.enqueue({ kind: "slow", interTokenMs: 5, completionTokens: 120 });
    const ac = new AbortController();
    const r = chat({ model: OR_MODEL, max_tokens: 120 }, ac.signal).catch(() => undefined);
    await waitFor(() => openrouter.requests.length > 0 && openrouter.requests.at(-1)!.body !== undefined, { what: "the request upstream" });
    await new Promise((res) => setTimeout(res, 100));
    ac.abort();
    await r;
    await waitFor(async () => {
      await fx.router.deps.guard.flush();
      return (await cancelled()).length === before + 1;
    }, { what: "the cancelled request's row" });
    const [row] = await cancelled();
    expect(row!.cost_source).toBe("estimate");
    // The provider generated (and charged) all 120 tokens for nobody.
    await waitFor(() => openrouter.generations.size === generated + 1, { what: "the provider's charge" });
    const charged = [...openrouter.generations.values()].at(-1)!;
    expect(charged.cancelled).toBe(true);
    expect(row!.completion_tokens).toBe(charged.completion);
    // Our price for them: $0.60 / Mtok of output at least.
    expect(BigInt(row!.cost_micro)).toBeGreaterThanOrEqual(120n * 60n);
  });
});

describe("budgets", () => {
  it("402 budget_exceeded with x-should-retry: false when no paid backend can be held", async () => {
    await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 0n });
    await budgetChanged();
    const seen = openrouter.requests.length;
    const r = await chat({ model: OR_MODEL });
    expect(r.status).toBe(402);
    expect(r.headers.get("x-should-retry")).toBe("false");
    const body = (await r.json()) as { error: { code: string; type: string } };
    expect(body.error.code).toBe("budget_exceeded");
    expect(openrouter.requests.length).toBe(seen);
    // A free worker still serves the same tenant.
    const w = await chat({ model: "chat" });
    expect(w.status).toBe(200);
    expect(w.headers.get("x-switchyard-backend")).toBe("worker:money-w1");
    await w.text();
    await deleteBudget(fx.db.db, fx.tenantId);
    await budgetChanged();
  });

  it("crossing 80 % and 100 % writes one alert each, once per day; then the day is closed", async () => {
    // A fresh tenant: its day starts empty.
    const { createTenant, createKey } = await import("@switchyard/db");
    const t = await createTenant(fx.db.db, "alerted");
    if (!t.ok) throw new Error("tenant");
    const { key } = await createKey(fx.db.db, t.tenant.id);
    await setBudget(fx.db.db, { tenantId: t.tenant.id, dailyLimitCents: 1n, alertThresholds: [80, 100] });
    const post = () =>
      fetch(`${fx.router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: OR_MODEL, max_tokens: 5, messages: [{ role: "user", content: "hi" }] }),
      });
    const alertsBefore = fx.router.deps.metrics.budgetAlerts.get({ threshold: "80" });
    // 1 cent = 1,000,000 micro: 90 % then exactly 100 %.
    openrouter.enqueue({ kind: "ok", costUsd: "0.009" }, { kind: "ok", costUsd: "0.001" });
    const a = await post();
    expect(a.status).toBe(200);
    await a.text();
    await fx.router.deps.guard.flush();
    const b = await post();
    expect(b.status).toBe(200);
    await b.text();
    await fx.router.deps.guard.flush();
    const c = await post();
    expect(c.status).toBe(402);
    await c.text();
    const alerts = await fx.db.sql`select threshold from budget_alerts where tenant_id = ${t.tenant.id} order by threshold`;
    expect(alerts.map((r) => r.threshold)).toEqual([80, 100]);
    expect(fx.router.deps.metrics.budgetAlerts.get({ threshold: "80" })).toBe(alertsBefore + 1);
    const s = await fx.router.deps.guard.deps.store.snapshot(t.tenant.id, today());
    expect(s.spentMicro).toBe(1_000_000n);
    expect(s.heldMicro).toBe(0n);
  });

  it("big data: URL images are held at what their size can cost, not 2,000 tokens each: refused where that admitted them", async () => {
    const { createTenant, createKey } = await import("@switchyard/db");
    const t = await createTenant(fx.db.db, "imaged");
    if (!t.ok) throw new Error("tenant");
    const { key } = await createKey(fx.db.db, t.tenant.id);
    await setBudget(fx.db.db, { tenantId: t.tenant.id, dailyLimitCents: 1n });
    const post = (body: Record<string, unknown>) =>
      fetch(`${fx.router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    // An 8000×8000 PNG's header (Anthropic's largest accepted size): 4,784 tokens at most, Anthropic's cap (Gemini fits it into 3,072 px: 16 tiles, 4,128).
    const ihdr = Buffer.alloc(33);
    ihdr.set([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    ihdr.writeUInt32BE(13, 8);
    ihdr.write("IHDR", 12, "latin1");
    ihdr.writeUInt32BE(8000, 16);
    ihdr.writeUInt32BE(8000, 20);
    ihdr.set([8, 2, 0, 0, 0], 24);
    const picture = { type: "image_url", image_url: { url: `data:image/png;base64,${ihdr.toString("base64")}` } };
    const text = { type: "text", text: "Which of these differ?" };
    const pictures = 16;
    const body = { model: OR_MODEL, max_tokens: 5, messages: [{ role: "user", content: [text, ...Array.from({ length: pictures }, () => picture)] }] };
    const price = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };
    // The old bound, 2,000 a picture, held well under the day's cent; the pictures' sizes can cost more than the cent.
    const textOnly = promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: [text] }] });
    expect(worstCaseMicro(textOnly + pictures * 2_000, 5, price)).toBeLessThan(1_000_000n);
    expect(worstCaseMicro(bodyFacts("/v1/chat/completions", body).promptTokens, 5, price)).toBeGreaterThan(1_000_000n);
    const seen = openrouter.requests.length;
    const r = await post(body);
    expect(r.status).toBe(402);
    expect(((await r.json()) as { error: { code: string } }).error.code).toBe("budget_exceeded");
    expect(openrouter.requests.length).toBe(seen);
    // The same words without the pictures fit the cent, and nothing stays held.
    const ok = await post({ model: OR_MODEL, max_tokens: 5, messages: [{ role: "user", content: [text] }] });
    expect(ok.status).toBe(200);
    await ok.text();
    await fx.router.deps.guard.flush();
    expect((await fx.router.deps.guard.deps.store.snapshot(t.tenant.id, today())).heldMicro).toBe(0n);
  });

  it("a settle retried 5 times leaves one ledger row and counts the spend once", async () => {
    const { createTenant } = await import("@switchyard/db");
    const t = await createTenant(fx.db.db, "retried");
    if (!t.ok) throw new Error("tenant");
    await setBudget(fx.db.db, { tenantId: t.tenant.id, dailyLimitCents: 100n });
    const guard = fx.router.deps.guard;
    const backend = fx.router.deps.chain.resolve(OR_MODEL, "retried").backends[0]!;
    const t0 = performance.now();
    const tab = guard.open({
      requestId: "retry-me-1",
      tenant: { keyId: 0, prefix: "x", tenantId: t.tenant.id, tenantName: "retried", revoked: false },
      path: "/v1/chat/completions",
      facts: bodyFacts("/v1/chat/completions", { model: OR_MODEL, messages: [{ role: "user", content: "hi" }] }),
      model: OR_MODEL,
      arrivedAtMs: Date.now(),
      startedAtPerf: t0,
    });
    expect((await tab.admit(backend)).ok).toBe(true);
    expect((await guard.deps.store.snapshot(t.tenant.id, today())).heldMicro).toBeGreaterThan(0n);
    const outcome = { backend, status: "ok" as const, usage: { prompt: 10, completion: 5, cached: 0, cacheWrite: 0, providerCostMicro: 12_345n, generationId: "gen-1-retry" } };
    const end = t0 + 25;
    await Promise.all(Array.from({ length: 5 }, () => tab.settleNow(outcome, end)));
    await guard.flush();
    const got = await fx.db.sql`select cost_micro from spend_ledger where request_id = 'retry-me-1'`;
    expect(got).toHaveLength(1);
    expect(BigInt(got[0]!.cost_micro)).toBe(12_345n);
    const s = await guard.deps.store.snapshot(t.tenant.id, today());
    expect(s.spentMicro).toBe(12_345n);
    expect(s.heldMicro).toBe(0n);
  });

  it("the ledger sums to what the provider reported, to the micro-cent", async () => {
    const before = openrouter.reportedCostsUsd.length;
    const ids: string[] = [];
    await Promise.all(
      Array.from({ length: 24 }, async (_, i) => {
        const r = await chat({ model: OR_MODEL, stream: i % 2 === 0, messages: [{ role: "user", content: "x".repeat(10 + i * 37) }] });
        expect(r.status).toBe(200);
        await r.text();
        ids.push(r.headers.get("x-request-id")!);
      }),
    );
    const got = await rows(ids);
    expect(got).toHaveLength(24);
    const ledger = got.reduce((acc, r) => acc + BigInt(r.cost_micro), 0n);
    const reported = openrouter.reportedCostsUsd.slice(before).reduce((acc, c) => acc + usdToMicro(c), 0n);
    expect(ledger).toBe(reported);
    expect(got.every((r) => r.cost_source === "provider")).toBe(true);
  });
});
