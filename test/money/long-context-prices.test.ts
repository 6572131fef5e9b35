// A price row's long-context tier on the request path, through a real router
// (real Redis budget counters, real Postgres prices) with the Anthropic fake:
// a request whose prompt is over the threshold — cache reads and writes
// counted — lands in the ledger with all its tokens at the tier's rates, a
// prompt whose bound is over it is held at them when it carries the 1M beta
// (at the ordinary rates without: Anthropic refuses it then), and an
// orphan's last usage is priced at them too.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setPrice } from "@switchyard/db";
import { budgetDay } from "@switchyard/state";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { budgetedTenant } from "../helpers/paid.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { AnthropicCostLookup } from "../../apps/router/src/backends/anthropic/cost-lookup.ts";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";

const MODEL = "claude-sonnet-4-6";
let fx: RouterFixture;
let anthropic: FakeAnthropic;

beforeAll(async () => {
  anthropic = await new FakeAnthropic("sk-ant-long").start();
  fx = await startTestRouter({ "providers.anthropic": { apiKey: "sk-ant-long", baseUrl: anthropic.url }, "billing.refreshMs": 100, "rateLimits.refreshMs": 0 });
  // Anthropic's Sonnet 4.6: $3 / $15, cache read $0.30, 5-minute write $3.75; over 200,000 prompt tokens $6 / $22.50 (cache rates derived: × 2).
  await setPrice(fx.db.db, {
    backend: "anthropic",
    model: MODEL,
    inputMicroPerMtok: 300_000_000n,
    outputMicroPerMtok: 1_500_000_000n,
    cachedInputMicroPerMtok: 30_000_000n,
    cacheWriteMicroPerMtok: 375_000_000n,
    longContextThresholdTokens: 200_000,
    longInputMicroPerMtok: 600_000_000n,
    longOutputMicroPerMtok: 2_250_000_000n,
  });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", MODEL), { what: "the price" });
}, 120_000);

afterAll(async () => {
  await fx?.close();
  await anthropic?.stop();
});

/** Anthropic takes (and bills at its tier) a prompt over 200k tokens only with its 1M-context beta. */
const ONE_M = { "anthropic-beta": "context-1m-2025-08-07" };

const post = (key: string, body: Record<string, unknown>, headers: Record<string, string> = ONE_M) =>
  fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

async function ledgerCost(id: string): Promise<bigint> {
  await waitFor(
    async () => {
      await fx.router.deps.guard.flush();
      return (await fx.db.sql`select 1 from spend_ledger where request_id = ${id}`).length > 0;
    },
    { what: `the ledger row of ${id}` },
  );
  const [row] = await fx.db.sql`select cost_micro, cost_source from spend_ledger where request_id = ${id}`;
  expect(row!.cost_source).toBe("price_table");
  return BigInt(row!.cost_micro as string);
}

describe("a price row's long-context tier", () => {
  it("settles a request whose prompt is over the threshold (cache reads and writes counted) with all its tokens at the tier; at the threshold, at the ordinary rates", async () => {
    const t = await budgetedTenant(fx.db, "long-settle", 100_000n);
    const costOf = async (promptTokens: number) => {
      // 150,000 of the prompt read from cache and 10,000 written to it: the fresh input alone is far under the threshold.
      anthropic.enqueue({ kind: "ok", promptTokens, cachedTokens: 150_000, cacheWriteTokens: 10_000, completionTokens: 5 });
      const r = await post(t.key, { model: MODEL, max_tokens: 100, messages: [{ role: "user", content: "a long document" }] });
      expect(r.status).toBe(200);
      await r.text();
      return ledgerCost(r.headers.get("x-request-id")!);
    };
    // Micro-cents a token: input 300, cache read 30, write 375, output 1,500; over the threshold 600, 60, 750, 2,250.
    expect(await costOf(200_000)).toBe(40_000n * 300n + 150_000n * 30n + 10_000n * 375n + 5n * 1_500n);
    expect(await costOf(200_001)).toBe(40_001n * 600n + 150_000n * 60n + 10_000n * 750n + 5n * 2_250n);
  });

  it("holds a prompt whose bound is over the threshold at the tier's rates (its dearest prompt price, the long cache write), one at it at the ordinary ones", async () => {
    const t = await budgetedTenant(fx.db, "long-hold", 100_000n);
    const holdWhileRunning = async (body: Record<string, unknown>, headers: Record<string, string> = ONE_M) => {
      anthropic.enqueue({ kind: "slow", interTokenMs: 150, completionTokens: 3 });
      const r = await post(t.key, { ...body, stream: true }, headers);
      expect(r.status).toBe(200);
      const reader = r.body!.getReader();
      await reader.read(); // the stream has started: the hold is live
      const holds = await fx.router.deps.guard.deps.store.holds(t.tenantId, budgetDay(Date.now(), "UTC"));
      expect(holds).toHaveLength(1);
      while (!(await reader.read()).done);
      await fx.router.deps.guard.flush();
      return holds[0]!.amountMicro;
    };
    const bodyOf = (chars: number) => ({ model: MODEL, max_tokens: 10, messages: [{ role: "user", content: "x".repeat(chars) }] });
    const boundOf = (chars: number) => promptTokensUpperBound("/v1/chat/completions", { messages: bodyOf(chars).messages });
    // The longest prompt whose bound is at the threshold, and one a byte longer.
    const framing = boundOf(0);
    const at = 200_000 - framing;
    expect(boundOf(at)).toBe(200_000);
    expect(await holdWhileRunning(bodyOf(at))).toBe(200_000n * 375n + 10n * 1_500n);
    expect(await holdWhileRunning(bodyOf(at + 1))).toBe(200_001n * 750n + 10n * 2_250n);
    // Without the beta Anthropic refuses a prompt over 200k tokens, so it never bills the tier: the bound (bytes) is held at the ordinary rates.
    expect(await holdWhileRunning(bodyOf(at + 1), {})).toBe(200_001n * 375n + 10n * 1_500n);
  });

  it("prices an Anthropic orphan's last usage (usage_on_crash) with the price book's price, tier included", async () => {
    // The orphan finisher hands the lookup the guard's price book's price, as here.
    const price = fx.router.deps.guard.deps.prices.price("anthropic", MODEL);
    const cost = (prompt: number) => new AnthropicCostLookup().cost({ model: MODEL, usage: { prompt, completion: 5, cached: 150_000, cacheWrite: 10_000 }, ...(price ? { price } : {}), signal: AbortSignal.timeout(1_000) });
    expect((await cost(200_000))?.micro).toBe(40_000n * 300n + 150_000n * 30n + 10_000n * 375n + 5n * 1_500n);
    expect((await cost(200_001))?.micro).toBe(40_001n * 600n + 150_000n * 60n + 10_000n * 750n + 5n * 2_250n);
  });
});
