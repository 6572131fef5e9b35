// The provider-side answers a crash-finished row is priced from: OpenRouter's
// generation lookup against the fake (shaped as the real answer), its
// failures, and Anthropic's price × last usage.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { AnthropicCostLookup } from "../../apps/router/src/backends/anthropic/cost-lookup.ts";
import { OpenRouterConnections } from "../../apps/router/src/backends/openrouter/client.ts";
import { OpenRouterCostLookup, parseGeneration } from "../../apps/router/src/backends/openrouter/cost-lookup.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";

let fake: FakeOpenRouter;
let conns: OpenRouterConnections;

beforeAll(async () => {
  fake = await new FakeOpenRouter({ apiKey: "sk-or-lookup" }).start();
  conns = new OpenRouterConnections({ baseUrl: fake.url, apiKey: "sk-or-lookup", connectTimeoutMs: 2_000 });
});

afterAll(async () => {
  await conns?.close();
  await fake?.stop();
});

const signal = () => AbortSignal.timeout(5_000);

async function oneGeneration(): Promise<string> {
  const res = await fetch(`${fake.url}/chat/completions`, {
    method: "POST",
    headers: { authorization: "Bearer sk-or-lookup", "content-type": "application/json" },
    body: JSON.stringify({ model: "openai/gpt-4o-mini", messages: [{ role: "user", content: "price me" }] }),
  });
  return ((await res.json()) as { id: string }).id;
}

describe("OpenRouter generation lookup", () => {
  it("answers the generation's own cost and native token counts, exactly", async () => {
    fake.generationLookup = "ok";
    const id = await oneGeneration();
    const g = fake.generations.get(id)!;
    const lookup = new OpenRouterCostLookup(conns);
    const cost = await lookup.cost({ model: "openai/gpt-4o-mini", generationId: id, signal: signal() });
    expect(cost).toEqual({ micro: fake.chargedMicro([id]), source: "provider_lookup", usage: { prompt: g.prompt, completion: g.completion, cached: 0, cacheWrite: 0 }, generationId: id });
    // The fake answers with OpenRouter's shape.
    const raw = await (await fetch(`${fake.url}/generation?id=${id}`, { headers: { authorization: "Bearer sk-or-lookup" } })).json() as { data: Record<string, unknown> };
    for (const f of ["id", "total_cost", "tokens_prompt", "tokens_completion", "native_tokens_prompt", "native_tokens_completion", "model", "created_at", "usage", "streamed", "cancelled"]) expect(raw.data).toHaveProperty(f);
  });

  it("reads total_cost from its digits, not a float; refuses another generation's answer", () => {
    const text = '{"data":{"id":"gen-1-a","total_cost":0.00000013,"tokens_prompt":3,"tokens_completion":2,"native_tokens_prompt":4,"native_tokens_completion":5,"native_tokens_cached":1}}';
    expect(parseGeneration("gen-1-a", text)).toMatchObject({ micro: 13n, usage: { prompt: 4, completion: 5, cached: 1 } });
    expect(parseGeneration("gen-1-b", text)).toBeUndefined();
    expect(parseGeneration("gen-1-a", '{"data":{"id":"gen-1-a","total_cost":null}}')).toBeUndefined();
  });

  it("404 and 5xx: no answer (the finisher charges the hold); 5xx is tried again first", async () => {
    const id = await oneGeneration();
    const lookup = new OpenRouterCostLookup(conns, { tries: 3, backoffMs: 10 });
    for (const status of [404, 503]) {
      fake.generationLookup = status;
      const before = fake.requests.length;
      expect(await lookup.cost({ model: "m", generationId: id, signal: signal() })).toBeUndefined();
      expect(fake.requests.length - before).toBe(status === 404 ? 1 : 3);
    }
    // The final usage chunk had been seen: its cost stands in.
    const usage = { prompt: 1, completion: 2, cached: 0, cacheWrite: 0, providerCostMicro: 77n };
    expect(await lookup.cost({ model: "m", generationId: id, usage, signal: signal() })).toEqual({ micro: 77n, source: "usage_on_crash", usage, generationId: id });
    // Not an OpenRouter generation id: nothing is asked.
    fake.generationLookup = "ok";
    const before = fake.requests.length;
    expect(await lookup.cost({ model: "m", generationId: "chatcmpl-x", signal: signal() })).toBeUndefined();
    expect(fake.requests.length).toBe(before);
  });
});

describe("Anthropic crash cost", () => {
  it("prices the last usage seen with the table (cache reads and writes at their own prices); none seen: no answer", async () => {
    const lookup = new AnthropicCostLookup();
    const price = { inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n, cachedInputMicroPerMtok: 8_000_000n, cacheWriteMicroPerMtok: 100_000_000n };
    const usage = { prompt: 1_000, completion: 500, cached: 200, cacheWrite: 300, generationId: "chatcmpl-msg_1" };
    // Micro-cents per token: input 80, cache read 8, cache write 100, output 400:
    // 500 × 80 + 200 × 8 + 300 × 100 + 500 × 400 = 271,600.
    expect(await lookup.cost({ model: "claude-3-5-haiku-latest", usage, price, signal: signal() })).toMatchObject({ micro: 271_600n, source: "usage_on_crash" });
    expect(await lookup.cost({ model: "claude-3-5-haiku-latest", price, signal: signal() })).toBeUndefined();
    // 200 of the 300 writes were for one hour: 160 each (2 × input, no 1-hour price set), the other 100 at 100.
    // 500 × 80 + 200 × 8 + 100 × 100 + 200 × 160 + 500 × 400 = 283,600; at a set 1-hour price of 120: 275,600.
    const hour = { ...usage, cacheWrite1h: 200 };
    expect(await lookup.cost({ model: "claude-3-5-haiku-latest", usage: hour, price, signal: signal() })).toMatchObject({ micro: 283_600n, source: "usage_on_crash", usage: hour });
    expect(await lookup.cost({ model: "claude-3-5-haiku-latest", usage: hour, price: { ...price, cacheWrite1hMicroPerMtok: 120_000_000n }, signal: signal() })).toMatchObject({ micro: 275_600n });
  });
});
