// Issue 10, item 11: `max_tokens` and `max_completion_tokens` are one limit.
// The attack: max_tokens 10 with max_completion_tokens 1,000,000 reached
// OpenRouter as max_tokens=4096 plus the uncapped max_completion_tokens. Now
// the two become one value (the smaller), the hold is computed from it, and a
// paid upstream receives that value — capped — in exactly one field.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice, worstCaseMicro } from "@switchyard/db";
import { budgetDay } from "@switchyard/state";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "#testkit/sim-worker";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let worker: SimWorker;

const MODEL = "openai/gpt-4o-mini";
const PRICE = { inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n };
const messages = [{ role: "user", content: "hello there" }];

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-test" }).start();
  fx = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-test", baseUrl: openrouter.url },
    "billing.refreshMs": 100,
  });
  await setPrice(fx.db.db, { backend: "openrouter", model: MODEL, ...PRICE });
  // A budget, so every paid request is held.
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 10_000n });
  worker = await new SimWorker({ id: "cap-w1", models: ["sim-cap"], registry: fx.registry, behavior: { tokens: 2 } }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1);
  await waitFor(() => fx.router.deps.guard.deps.prices.price("openrouter", MODEL));
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
  await openrouter?.stop();
});

const cap = () => fx.router.deps.config.billing.maxOutputTokens;

const chat = (body: Record<string, unknown>, path = "/v1/chat/completions") =>
  fetch(`${fx.router.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify(path === "/v1/chat/completions" ? { model: MODEL, messages, ...body } : { model: MODEL, prompt: "hello there", ...body }),
  });

/** The output-limit fields the fake received in the last request. */
function forwardedLimit(): Record<string, unknown> {
  const b = openrouter.requests.at(-1)!.body;
  const out: Record<string, unknown> = {};
  for (const k of ["max_tokens", "max_completion_tokens"]) if (k in b) out[k] = b[k];
  return out;
}

describe("one capped output limit reaches a paid upstream", () => {
  it("max_tokens 10 + max_completion_tokens 1,000,000 → max_tokens 10, nothing else", async () => {
    const r = await chat({ max_tokens: 10, max_completion_tokens: 1_000_000 });
    expect(r.status).toBe(200);
    await r.text();
    expect(forwardedLimit()).toEqual({ max_tokens: 10 });
  });

  it("the smaller of the two wins whichever field carries it", async () => {
    await (await chat({ max_tokens: 1_000_000, max_completion_tokens: 20 })).text();
    expect(forwardedLimit()).toEqual({ max_tokens: 20 });
    await (await chat({ max_tokens: 4_294_967_295, max_completion_tokens: 4_294_967_295 })).text();
    expect(forwardedLimit()).toEqual({ max_tokens: cap() });
  });

  it("max_completion_tokens alone is capped in its own field; a null max_tokens is no way round the cap", async () => {
    await (await chat({ max_completion_tokens: 1_000_000 })).text();
    expect(forwardedLimit()).toEqual({ max_completion_tokens: cap() });
    await (await chat({ max_tokens: null, max_completion_tokens: 1_000_000 })).text();
    expect(forwardedLimit()).toEqual({ max_completion_tokens: cap() });
    await (await chat({ max_tokens: 1_000_000, max_completion_tokens: null })).text();
    expect(forwardedLimit()).toEqual({ max_tokens: cap() });
  });

  it("text completions: max_completion_tokens is validated and folded into max_tokens", async () => {
    await (await chat({ max_tokens: 5, max_completion_tokens: 1_000_000 }, "/v1/completions")).text();
    expect(forwardedLimit()).toEqual({ max_tokens: 5 });
    await (await chat({ max_completion_tokens: 1_000_000 }, "/v1/completions")).text();
    expect(forwardedLimit()).toEqual({ max_tokens: cap() });
    const bad = await chat({ max_completion_tokens: "lots" }, "/v1/completions");
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { param: string } }).error.param).toBe("max_completion_tokens");
  });

  it("a free worker gets the same single field (uncapped by billing)", async () => {
    const r = await chat({ model: "sim-cap", max_tokens: 30, max_completion_tokens: 1_000_000 });
    expect(r.status).toBe(200);
    await r.text();
    expect(worker.lastBody?.max_tokens).toBe(30);
    expect(worker.lastBody && "max_completion_tokens" in worker.lastBody).toBe(false);
  });
});

describe("the hold is the capped worst case", () => {
  const held = async (body: Record<string, unknown>) => {
    // A slow stream keeps the hold live while we read it.
    openrouter.enqueue({ kind: "slow", interTokenMs: 40, completionTokens: 15 });
    const r = await chat({ stream: true, ...body });
    expect(r.status).toBe(200);
    const reader = r.body!.getReader();
    await reader.read();
    const s = await fx.router.deps.guard.deps.store.snapshot(fx.tenantId, budgetDay(Date.now(), "UTC"));
    while (!(await reader.read()).done);
    await fx.router.deps.guard.flush();
    return s.heldMicro;
  };
  const worst = (maxOutput: number) => worstCaseMicro(promptTokensUpperBound("/v1/chat/completions", { messages }), maxOutput, PRICE);

  it("max_tokens 10 + max_completion_tokens 1,000,000 holds for 10 output tokens", async () => {
    expect(await held({ max_tokens: 10, max_completion_tokens: 1_000_000 })).toBe(worst(10));
    expect(forwardedLimit()).toEqual({ max_tokens: 10 });
  });

  it("max_completion_tokens 1,000,000 alone holds for the cap, and the cap is what is sent", async () => {
    expect(await held({ max_completion_tokens: 1_000_000 })).toBe(worst(cap()));
    expect(forwardedLimit()).toEqual({ max_completion_tokens: cap() });
  });
});

// The hold is priced for the model asked for. OpenRouter's own fields could
// make it bill something else: fallback `models` (or `route`) serve — and
// bill — another model when the first fails (a prompt past its context does
// it on purpose), `plugins`/`web_search_options` add per-result fees, and
// `provider.order`/`only`/`ignore`/`sort` pick a dearer provider of it.
describe("a client cannot choose what OpenRouter bills past its hold", () => {
  it("fallback models, routes, plugins, web search and provider picks are refused before anything is sent", async () => {
    const attacks: Array<[Record<string, unknown>, string]> = [
      [{ models: ["openai/gpt-4o", "anthropic/claude-3-opus"] }, "models"],
      [{ route: "fallback" }, "route"],
      [{ plugins: [{ id: "web", max_results: 25 }] }, "plugins"],
      [{ web_search_options: { search_context_size: "high" } }, "web_search_options"],
      [{ provider: { order: ["Azure"], allow_fallbacks: false } }, "provider.order"],
      [{ provider: { data_collection: "deny", only: ["Azure"] } }, "provider.only"],
      [{ provider: { sort: "throughput" } }, "provider.sort"],
    ];
    for (const path of ["/v1/chat/completions", "/v1/completions"]) {
      for (const [body, param] of attacks) {
        const before = openrouter.requests.length;
        const r = await chat(body, path);
        const err = ((await r.json()) as { error: { param: string; message: string } }).error;
        expect([r.status, err.param], `${path} ${JSON.stringify(body)}`).toEqual([400, param]);
        expect(err.message).toContain("budget");
        expect(openrouter.requests.length, "nothing went upstream").toBe(before);
      }
    }
  });

  it("provider preferences that only narrow or sort by price go through as sent", async () => {
    const provider = { data_collection: "deny", zdr: true, require_parameters: true, allow_fallbacks: false, max_price: { prompt: 1, completion: 2 }, sort: "price" };
    const r = await chat({ provider, max_tokens: 5 });
    expect(r.status, await r.text()).toBe(200);
    expect(openrouter.requests.at(-1)!.body.provider).toEqual(provider);
  });
});
