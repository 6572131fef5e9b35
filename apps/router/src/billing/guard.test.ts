// The settle runs off the request path (the next turn of the loop), counted
// rather than chained: drain() still waits for every settle asked for, one
// not yet started included, and a settle that fails is logged, not thrown.
import { describe, expect, it } from "vitest";
import type { NewLedgerRow } from "@switchyard/db";
import { MemoryBudgetStore } from "@switchyard/state";
import type { Backend } from "../backends/types.ts";
import { createLogger } from "../observability/log.ts";
import { RouterMetrics } from "../observability/metrics.ts";
import { StaticBudgets } from "./budgets.ts";
import { BudgetGuard, bodyFacts, type BodyFacts } from "./guard.ts";
import type { LedgerSink } from "./ledger.ts";
import { StaticPriceBook } from "./prices.ts";
import type { ReconcileResult } from "./reconcile.ts";
import { loadConfig } from "../config.ts";

const worker = { id: "worker:w1", kind: "worker", model: "m", paid: false, workerId: "w1" } as unknown as Backend;

function guardWith(ledger: LedgerSink, lines: string[] = []) {
  return new BudgetGuard({
    store: new MemoryBudgetStore(),
    budgets: new StaticBudgets(),
    prices: new StaticPriceBook(),
    ledger,
    alerts: async () => true,
    billing: loadConfig({ env: {} }).billing,
    log: createLogger("error", {}, (l) => lines.push(l)),
    metrics: new RouterMetrics(),
  });
}

const tabOf = (guard: BudgetGuard, i: number) =>
  guard.open({ requestId: `req_${i}`, tenant: { tenantId: 1, tenantName: "t", keyId: 1, prefix: "sy_x", revoked: false }, path: "/v1/chat/completions", facts: bodyFacts("/v1/chat/completions", {}), model: "m", arrivedAtMs: Date.now(), startedAtPerf: performance.now() });

describe("BudgetGuard settles", () => {
  it("drain() waits for settles asked for in this turn (not started yet) and for rows still being written", async () => {
    const rows: NewLedgerRow[] = [];
    // A sink that takes 30 ms per row, like a Redis round trip under load.
    const slow: LedgerSink = { record: (r) => new Promise((done) => setTimeout(() => (rows.push(r), done()), 30)), flush: async () => {}, close: async () => {} };
    const guard = guardWith(slow);
    for (let i = 0; i < 5; i++) tabOf(guard, i).settle({ backend: worker, status: "ok", usage: { prompt: 3, completion: 2, cached: 0, cacheWrite: 0 } });
    // Nothing has run yet: the settles wait for the next turn.
    expect(rows).toHaveLength(0);
    await guard.drain();
    expect(rows.map((r) => r.requestId).sort()).toEqual(["req_0", "req_1", "req_2", "req_3", "req_4"]);
    expect(rows[0]!.promptTokens).toBe(3);
  });

  it("a settle whose row cannot be written is logged, and drain() still returns", async () => {
    const lines: string[] = [];
    const failing: LedgerSink = { record: () => Promise.reject(new Error("sink down")), flush: async () => {}, close: async () => {} };
    const guard = guardWith(failing, lines);
    tabOf(guard, 9).settle({ backend: worker, status: "ok" });
    await guard.drain();
    expect(lines.some((l) => l.includes("settle failed") && l.includes("sink down"))).toBe(true);
  });
});

describe("BudgetGuard holds on a day never checked against the ledger", () => {
  const paid = { id: "openrouter:m", kind: "openrouter", model: "m", paid: true } as unknown as Backend;
  const DAY = new Date().toISOString().slice(0, 10);

  function paidGuard(checkDay: (tenantId: number, day: string) => Promise<ReconcileResult | undefined>, lines: string[] = []) {
    const store = new MemoryBudgetStore();
    const budgets = new StaticBudgets();
    budgets.budgets.set(1, { limitMicro: 10n ** 9n, timeZone: "UTC", thresholds: [] });
    const metrics = new RouterMetrics();
    const guard = new BudgetGuard({
      store,
      budgets,
      prices: new StaticPriceBook([{ backend: "openrouter", model: "m", inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 1_000_000n }]),
      ledger: { record: async () => {}, flush: async () => {}, close: async () => {} },
      alerts: async () => true,
      billing: loadConfig({ env: {} }).billing,
      log: createLogger("warn", {}, (l) => lines.push(l)),
      metrics,
      checkDay,
    });
    return { store, guard, metrics };
  }

  const rebuilt = (before: bigint, after: bigint): ReconcileResult => ({ spentMicro: after, heldMicro: 0n, holds: 0, version: 1, attempts: 1, before: { spentMicro: before, heldMicro: 0n } });

  it("checks the day once for every request that found it unchecked, then holds", async () => {
    let calls = 0;
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    const lines: string[] = [];
    const { store, guard, metrics } = paidGuard(async (tenantId, day) => {
      calls++;
      await gate;
      // What checkBudgetDay does: the ledger says 300 were spent before the counters went.
      await store.rebuild({ tenantId, day, spentMicro: 300n, holds: [] });
      return rebuilt(0n, 300n);
    }, lines);
    const verdicts = Promise.all([0, 1, 2, 3, 4].map((i) => tabOf(guard, i).admit(paid)));
    await new Promise((r) => setTimeout(r, 20));
    expect(await store.holds(1, DAY)).toEqual([]); // nothing held while the day is unchecked
    release();
    expect((await verdicts).every((v) => v.ok)).toBe(true);
    expect(calls).toBe(1);
    expect(await store.snapshot(1, DAY)).toMatchObject({ spentMicro: 300n, checked: true });
    expect((await store.holds(1, DAY)).length).toBe(5);
    expect(metrics.budgetDayChecks.get({ outcome: "rebuilt" })).toBe(1);
    expect(lines.filter((l) => l.includes("disagreed with the ledger"))).toHaveLength(1);
    // Checked now: later holds go straight through.
    expect((await tabOf(guard, 5).admit(paid)).ok).toBe(true);
    expect(calls).toBe(1);
  });

  it("a ledger that cannot be read skips the paid backend (nothing held), and is asked again only after a pause", async () => {
    let calls = 0;
    const { store, guard, metrics } = paidGuard(async () => {
      calls++;
      throw new Error("connect ECONNREFUSED 127.0.0.1:5432");
    });
    expect(await tabOf(guard, 10).admit(paid)).toEqual({ ok: false, reason: "budget_unavailable" });
    expect(await tabOf(guard, 11).admit(paid)).toEqual({ ok: false, reason: "budget_unavailable" });
    expect(calls).toBe(1); // the second request did not wait on Postgres again
    expect(await store.holds(1, DAY)).toEqual([]);
    expect(metrics.budgetDayChecks.get({ outcome: "failed" })).toBe(1);
    expect(metrics.budgetHolds.get({ outcome: "unchecked" })).toBe(2);
    await new Promise((r) => setTimeout(r, 1_050));
    expect(await tabOf(guard, 12).admit(paid)).toEqual({ ok: false, reason: "budget_unavailable" });
    expect(calls).toBe(2);
  });

  it("a budget Postgres cannot give skips the paid backend, counted as unavailable", async () => {
    const lines: string[] = [];
    const { guard, metrics } = paidGuard(async () => undefined, lines);
    guard.deps.budgets.budgetOf = async () => {
      throw new Error("connect ECONNREFUSED 127.0.0.1:5432");
    };
    expect(await tabOf(guard, 30).admit(paid)).toEqual({ ok: false, reason: "budget_unavailable" });
    expect(metrics.budgetHolds.get({ outcome: "unavailable" })).toBe(1);
    expect(lines.join("\n")).toContain("budget unknown");
  });

  it("a budget settle that fails (a Redis failover) is tried again: the day's spend counts the request once, nothing held", async () => {
    const { store, guard, metrics } = paidGuard(async () => undefined);
    await store.rebuild({ tenantId: 1, day: DAY, spentMicro: 0n, holds: [] });
    const tab = tabOf(guard, 40);
    expect((await tab.admit(paid)).ok).toBe(true);
    const settle = store.settle.bind(store);
    let failures = 2;
    store.settle = (input) => (failures-- > 0 ? Promise.reject(new Error("READONLY failing over")) : settle(input));
    tab.settle({ backend: paid, status: "ok", usage: { prompt: 1_000, completion: 1_000, cached: 0, cacheWrite: 0 } });
    await guard.drain();
    const snap = await store.snapshot(1, DAY);
    // 2,000 tokens at 1,000,000 micro per Mtok each way: 2,000 micro, counted once.
    expect(snap.spentMicro).toBe(2_000n);
    expect(snap.heldMicro).toBe(0n);
    expect(metrics.billingFailures.get({ step: "settle" })).toBe(0);
  });

  it("a day another router checked first is held at once (no rebuild here)", async () => {
    let calls = 0;
    const { store, guard, metrics } = paidGuard(async () => (calls++, undefined));
    await store.rebuild({ tenantId: 1, day: DAY, spentMicro: 0n, holds: [] });
    expect((await tabOf(guard, 20).admit(paid)).ok).toBe(true);
    expect(calls).toBe(0);
    expect(metrics.budgetDayChecks.get({ outcome: "already" })).toBe(0);
    expect((await store.holds(1, DAY)).length).toBe(1);
  });
});

/**
 * A guard for tenant 1 (a limit of `limitMicro`) on a day already checked,
 * as another router would have left it, with these prices; the rows it
 * writes, and a tab opened for a chat body.
 */
async function checkedGuard(prices: ConstructorParameters<typeof StaticPriceBook>[0], limitMicro = 10n ** 12n) {
  const DAY = new Date().toISOString().slice(0, 10);
  const rows: NewLedgerRow[] = [];
  const store = new MemoryBudgetStore();
  const budgets = new StaticBudgets();
  budgets.budgets.set(1, { limitMicro, timeZone: "UTC", thresholds: [] });
  const guard = new BudgetGuard({
    store,
    budgets,
    prices: new StaticPriceBook(prices),
    ledger: { record: async (r, attempts) => void rows.push(r, ...(attempts ?? [])), flush: async () => {}, close: async () => {} },
    alerts: async () => true,
    billing: loadConfig({ env: {} }).billing,
    log: createLogger("error", {}, () => {}),
    metrics: new RouterMetrics(),
    checkDay: async () => undefined,
  });
  await store.rebuild({ tenantId: 1, day: DAY, spentMicro: 0n, holds: [] });
  const open = (requestId: string, facts: BodyFacts, model = "m") =>
    guard.open({ requestId, tenant: { tenantId: 1, tenantName: "t", keyId: 1, prefix: "sy_x", revoked: false }, path: "/v1/chat/completions", facts, model, arrivedAtMs: Date.now(), startedAtPerf: performance.now() });
  /** The hold a paid attempt on `backend` takes for `facts` (admitted, or the test fails). */
  const holdOf = async (requestId: string, backend: Backend, facts: BodyFacts) => {
    expect(await open(requestId, facts, backend.model).admit(backend)).toMatchObject({ ok: true });
    return (await store.holds(1, DAY)).find((h) => h.requestId === requestId)!.amountMicro;
  };
  return { DAY, rows, store, guard, open, holdOf };
}

const paidOn = (kind: string, model: string) => ({ id: `${kind}:${model}`, kind, model, paid: true }) as unknown as Backend;

describe("the hold of a request with an image or audio, on models whose price rows count them apart", () => {
  const price = { inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 0n };
  const image = { type: "image_url", image_url: { url: "https://example.com/cat.png" } };
  const clip = { type: "input_audio", input_audio: { data: Buffer.alloc(10_000).toString("base64"), format: "mp3" } };
  const chat = (...content: unknown[]) => bodyFacts("/v1/chat/completions", { model: "m", max_tokens: 0, messages: [{ role: "user", content }] });

  /** A PNG's signature and IHDR (the bound reads no further). */
  const png = (w: number, h: number) => {
    const ihdr = Buffer.alloc(25);
    ihdr.writeUInt32BE(13, 0);
    ihdr.write("IHDR", 4, "latin1");
    ihdr.writeUInt32BE(w, 8);
    ihdr.writeUInt32BE(h, 12);
    ihdr.set([8, 6, 0, 0, 0], 16);
    const bytes = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), ihdr, Buffer.alloc(64)]);
    return { type: "image_url", image_url: { url: `data:image/png;base64,${bytes.toString("base64")}` } };
  };

  it("multiplies the images' OpenAI tile tokens by the row's multiplier (gpt-4o-mini's 33.336×), not the cross-provider bound, and nothing else; a row without one holds the bound", async () => {
    const { holdOf } = await checkedGuard([
      { backend: "openrouter", model: "openai/gpt-4o-mini", ...price, imageTokenMultiplierPermille: 33_336 },
      { backend: "openrouter", model: "openai/gpt-4o", ...price },
    ]);
    const facts = chat({ type: "text", text: "what is this?" }, image);
    expect(facts).toMatchObject({ imageTokens: 6_192, imageTileTokens: 1_445 });
    const hold = (id: string, model: string, f = facts) => holdOf(id, paidOn("openrouter", model), f);
    // One micro-cent a token: the hold is the prompt bound in tokens.
    expect(await hold("plain", "openai/gpt-4o")).toBe(BigInt(facts.promptTokens));
    // An image of unknown size is 8 tiles at most (1,445): × 33.336 = 48,170.52 → 48,171, above the mini's own count for any image (48,169), not 6,192 × 33.336 = 206,417.
    expect(await hold("mini", "openai/gpt-4o-mini")).toBe(BigInt(facts.promptTokens - 6_192 + 48_171));
    // A small image: one tile (255) × 33.336 → 8,501 (the mini bills 8,500), not its cross-provider 1,120 × 33.336 = 37,337; a row without a multiplier holds the 1,120.
    const small = chat({ type: "text", text: "what is this?" }, png(64, 64));
    expect(small).toMatchObject({ imageTokens: 1_120, imageTileTokens: 255 });
    expect(await hold("mini-small", "openai/gpt-4o-mini", small)).toBe(BigInt(small.promptTokens - 1_120 + 8_501));
    expect(await hold("plain-small", "openai/gpt-4o", small)).toBe(BigInt(small.promptTokens));
    // Text alone: the multiplier changes nothing.
    const text = chat({ type: "text", text: "what is this?" });
    expect(await hold("mini-text", "openai/gpt-4o-mini", text)).toBe(BigInt(text.promptTokens));
  });

  it("holds the audio part at the row's audio price (gpt-4o-audio-preview's 16× input); a row without one at the input price", async () => {
    const { holdOf } = await checkedGuard([
      { backend: "openrouter", model: "openai/gpt-4o-audio-preview", ...price, audioInputMicroPerMtok: 16_000_000n },
      { backend: "openrouter", model: "openai/gpt-4o", ...price },
    ]);
    const facts = chat({ type: "text", text: "transcribe" }, clip);
    // 10,000 bytes of MP3 at 8 kbps at least: 10 s, 320 tokens.
    expect(facts.audioTokens).toBe(320);
    const hold = (id: string, model: string) => holdOf(id, paidOn("openrouter", model), facts);
    expect(await hold("plain", "openai/gpt-4o")).toBe(BigInt(facts.promptTokens));
    expect(await hold("audio", "openai/gpt-4o-audio-preview")).toBe(BigInt(facts.promptTokens - 320 + 16 * 320));
  });
});

describe("a paid attempt its provider accepted, then failed over from", () => {
  const paid = { id: "openrouter:m", kind: "openrouter", model: "m", paid: true } as unknown as Backend;
  const DAY = new Date().toISOString().slice(0, 10);
  const body = { model: "m", stream: true, messages: [{ role: "user", content: "x".repeat(300) }] };

  async function setup() {
    const { rows, store, guard, open } = await checkedGuard([{ backend: "openrouter", model: "m", inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 1_000_000n }], 10n ** 9n);
    const facts = bodyFacts("/v1/chat/completions", body);
    const tab = open("req_fo", facts);
    // The prompt's estimate at 1 micro-cent per token: what the provider is owed for the prompt it processed.
    const owed = BigInt(Math.ceil(facts.promptTokens / 3));
    return { rows, store, guard, tab, owed };
  }

  it("ended on a free worker: the worker's row costs nothing, the paid prompt's estimate has its own row under OpenRouter; the day carries it; the hold is gone", async () => {
    const { rows, store, guard, tab, owed } = await setup();
    expect((await tab.admit(paid)).ok).toBe(true);
    tab.release(paid, true, "timeout");
    // The hold stays until the request settles: the day keeps counting that money.
    expect((await store.snapshot(1, DAY)).heldMicro).toBeGreaterThan(0n);
    tab.settle({ backend: worker, status: "ok", usage: { prompt: 3, completion: 2, cached: 0, cacheWrite: 0 }, firstTokenAt: performance.now() });
    await guard.drain();
    expect(rows).toHaveLength(2);
    expect(rows[0]).toMatchObject({ requestId: "req_fo", backend: "worker", costMicro: 0n, costSource: "price_table", promptTokens: 3, completionTokens: 2 });
    expect(rows[1]).toMatchObject({ requestId: "req_fo/a1", backend: "openrouter", model: "m", costMicro: owed, costSource: "estimate", status: "timeout", completionTokens: 0, startedAt: rows[0]!.startedAt });
    const snap = await store.snapshot(1, DAY);
    expect(snap.spentMicro).toBe(owed);
    expect(snap.heldMicro).toBe(0n);
  });

  it("refused before any response (not accepted): its hold goes, the worker's row costs nothing", async () => {
    const { rows, store, guard, tab } = await setup();
    expect((await tab.admit(paid)).ok).toBe(true);
    tab.release(paid, false);
    tab.settle({ backend: worker, status: "ok", usage: { prompt: 3, completion: 2, cached: 0, cacheWrite: 0 } });
    await guard.drain();
    expect(rows[0]).toMatchObject({ costMicro: 0n, costSource: "price_table" });
    const snap = await store.snapshot(1, DAY);
    expect(snap.spentMicro).toBe(0n);
    expect(snap.heldMicro).toBe(0n);
  });
});

describe("the hold of a request that asks for a one-hour prompt cache", () => {
  const paid = paidOn("anthropic", "m");
  const chat = (messages: unknown[], extra: Record<string, unknown> = {}) => ({ model: "m", max_tokens: 100, messages, ...extra });
  const text = (t: string, cache?: Record<string, unknown>) => ({ type: "text", text: t, ...(cache ? { cache_control: cache } : {}) });

  it("is found wherever Anthropic's cache_control may sit: a content part, a system part, a tool; a 5-minute or unmarked one is not", () => {
    const hour = { type: "ephemeral", ttl: "1h" };
    expect(bodyFacts("/v1/chat/completions", chat([{ role: "user", content: [text("a"), text("b", hour)] }])).hourCache).toBe(true);
    // A /v1/messages body reaches the guard translated: its system blocks as a system message's parts.
    expect(bodyFacts("/v1/chat/completions", chat([{ role: "system", content: [text("sys", hour)] }, { role: "user", content: "a" }])).hourCache).toBe(true);
    expect(bodyFacts("/v1/chat/completions", chat([{ role: "user", content: "a" }], { tools: [{ type: "function", function: { name: "t", parameters: { type: "object" } }, cache_control: hour }] })).hourCache).toBe(true);
    expect(bodyFacts("/v1/chat/completions", chat([{ role: "user", content: [text("a", { type: "ephemeral" })] }])).hourCache).toBe(false);
    expect(bodyFacts("/v1/chat/completions", chat([{ role: "user", content: [text("a", { type: "ephemeral", ttl: "5m" })] }])).hourCache).toBe(false);
    expect(bodyFacts("/v1/chat/completions", chat([{ role: "user", content: "ttl 1h" }])).hourCache).toBe(false);
  });

  it("holds the prompt at the one-hour write price (2× input unset); any other request at the input price", async () => {
    const { holdOf } = await checkedGuard([{ backend: "anthropic", model: "m", inputMicroPerMtok: 3_000_000_000n, outputMicroPerMtok: 15_000_000_000n }]);
    const hold = (id: string, body: Record<string, unknown>) => holdOf(id, paid, bodyFacts("/v1/chat/completions", body));
    const prompt = "x".repeat(300);
    const plain = await hold("plain", chat([{ role: "user", content: [text(prompt)] }]));
    const hour = await hold("hour", chat([{ role: "user", content: [text(prompt, { type: "ephemeral", ttl: "1h" })] }]));
    const output = 100n * 15_000n;
    // The same prompt bound, at 3,000 micro-cents a token, then at 6,000.
    expect(hour - output).toBe(2n * (plain - output));
    expect(plain - output).toBeGreaterThan(0n);
  });
});

describe("a thinking budget under the output cap", () => {
  const paid = paidOn("anthropic", "claude-sonnet-4-5");
  const price = [{ backend: "anthropic", model: "claude-sonnet-4-5", inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 1_000_000n }];
  /** The fields a paid attempt sends for `body` (billing.maxOutputTokens is 4096 by default). */
  async function patchFor(id: string, extra: Record<string, unknown>) {
    const { open } = await checkedGuard(price, 10n ** 12n);
    const verdict = await open(id, bodyFacts("/v1/chat/completions", { model: "m", messages: [{ role: "user", content: "hi" }], ...extra })).admit(paid);
    expect(verdict).toMatchObject({ ok: true });
    return (verdict as { patch?: Record<string, unknown> }).patch;
  }

  it("is scaled with the limit the cap lowered, keeping the client's share (Claude Code's 31,999 of 32,000), and the rest of its reasoning object", async () => {
    expect(await patchFor("cc", { max_tokens: 32_000, reasoning: { max_tokens: 31_999, exclude: false } })).toEqual({ max_tokens: 4096, reasoning: { max_tokens: 4095, exclude: false } });
    // 10,000 of 20,000 → half of 4,096.
    expect((await patchFor("half", { max_tokens: 20_000, reasoning: { max_tokens: 10_000 } }))?.reasoning).toEqual({ max_tokens: 2048 });
    // A share under Anthropic's floor is held at 1,024.
    expect((await patchFor("floor", { max_tokens: 1_000_000, reasoning: { max_tokens: 5_000 } }))?.reasoning).toEqual({ max_tokens: 1024 });
    // No limit of the client's own: half the cap.
    expect((await patchFor("none", { reasoning: { max_tokens: 8_000 } }))?.reasoning).toEqual({ max_tokens: 2048 });
  });

  it("is left as sent when it fits, when the cap lowered nothing, or when the client's own limit could not hold it (the backend's 400)", async () => {
    expect(await patchFor("fits", { max_tokens: 32_000, reasoning: { max_tokens: 2_048 } })).toEqual({ max_tokens: 4096 });
    expect(await patchFor("uncapped", { max_tokens: 3_000, reasoning: { max_tokens: 3_000 } })).toEqual({ max_tokens: 3000 });
    expect(await patchFor("own", { max_tokens: 8_000, reasoning: { max_tokens: 9_000 } })).toEqual({ max_tokens: 4096 });
    expect(await patchFor("effort", { max_tokens: 32_000, reasoning: { effort: "high" } })).toEqual({ max_tokens: 4096 });
  });
});
