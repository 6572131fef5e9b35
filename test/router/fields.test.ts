// The request-field table (apps/router/src/backends/fields.ts) against the
// code: the README shows exactly what the table renders, and every field the
// paid backends declare is treated as declared through a real router (real
// Redis and Postgres) with the OpenRouter and Anthropic fakes: refused →
// 400 naming the field, nothing sent upstream; honoured → sent on as it was
// asked; translated → answered. The worker column is held to the real worker
// and SmolLM2 in test/e2e/sampling.test.ts.
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice } from "@switchyard/db";
import { fieldSupport, refusedField, renderFieldTable, requestFields, sampleOf, type FieldName } from "../../apps/router/src/backends/fields.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-haiku-latest";
type Route = "chat" | "completions" | "embeddings";
const paths: Record<Route, string> = { chat: "/v1/chat/completions", completions: "/v1/completions", embeddings: "/v1/embeddings" };
const base: Record<Route, Record<string, unknown>> = {
  chat: { messages: [{ role: "user", content: "hello" }], max_tokens: 3 },
  completions: { prompt: "hello", max_tokens: 3 },
  embeddings: { input: "hello" },
};

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let anthropic: FakeAnthropic;

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-fields" }).start();
  anthropic = await new FakeAnthropic("sk-ant-fields").start();
  fx = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-fields", baseUrl: openrouter.url },
    "providers.anthropic": { apiKey: "sk-ant-fields", baseUrl: anthropic.url },
    "billing.refreshMs": 100,
  });
  for (const [backend, model] of [["openrouter", OR_MODEL], ["anthropic", AN_MODEL]] as const) {
    await setPrice(fx.db.db, { backend, model, inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 1_000_000n });
    await waitFor(() => fx.router.deps.guard.deps.prices.price(backend, model));
  }
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 10_000n });
}, 120_000);

afterAll(async () => {
  await fx?.close();
  await openrouter?.stop();
  await anthropic?.stop();
});

const post = async (route: Route, body: Record<string, unknown>) => {
  const r = await fetch(`${fx.router.url}${paths[route]}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  return { status: r.status, text, json: (() => { try { return JSON.parse(text) as { error?: { param?: string; code?: string } }; } catch { return {}; } })() };
};

describe("the field table", () => {
  it("is what the README shows", () => {
    const readme = readFileSync(path.resolve(import.meta.dirname, "../../README.md"), "utf8");
    const table = /<!-- fields:begin -->\n([\s\S]*?)\n<!-- fields:end -->/.exec(readme)?.[1];
    expect(table, "README.md has the table between <!-- fields:begin --> and <!-- fields:end -->").toBeDefined();
    expect(table).toBe(renderFieldTable());
  });

  it("names the field a body asks for, and nothing for a plain body", () => {
    for (const [name, f] of Object.entries(requestFields)) {
      for (const route of f.routes) {
        expect(f.asks({ ...base[route], ...sampleOf(f, route) }, route), `${name} on ${route}`).toBeDefined();
        // The base bodies ask for nothing but what every backend does (max_tokens).
        if (name !== "max_tokens") expect(f.asks(base[route], route), `${name} on a plain ${route} body`).toBeUndefined();
      }
    }
    expect(refusedField("anthropic", "/v1/chat/completions", { ...base.chat, model: "m", temprature: 0.2 })).toMatchObject({ param: "temprature" });
    expect(refusedField("anthropic", "/v1/chat/completions", { ...base.chat, model: "m", response_format: { type: "text" }, tool_choice: "none", user: "u" })).toBeUndefined();
    expect(refusedField("anthropic", "/v1/chat/completions", { ...base.chat, model: "m", response_format: { type: "json_object" } })).toMatchObject({ param: "response_format" });
    // Workers refuse fields they do not know themselves (the real worker: test/e2e/sampling.test.ts).
    expect(refusedField("worker", "/v1/chat/completions", { ...base.chat, model: "m", temprature: 0.2 })).toBeUndefined();
    expect(refusedField("worker", "/v1/chat/completions", { ...base.chat, model: "m", modalities: ["audio"] })).toMatchObject({ param: "modalities" });
  });
});

describe("GET /v1/models/{id} for a name a provider takes by its form", () => {
  it("finds it as chat would route it; a name nothing takes is still 404", async () => {
    const get = async (id: string) => {
      const r = await fetch(`${fx.router.url}/v1/models/${encodeURIComponent(id)}`, { headers: { authorization: `Bearer ${fx.key}` } });
      return { status: r.status, body: (await r.json()) as Record<string, unknown> };
    };
    expect(await get(OR_MODEL)).toEqual({ status: 200, body: expect.objectContaining({ id: OR_MODEL, object: "model", backends: [`openrouter:${OR_MODEL}`] }) });
    expect(await get(AN_MODEL)).toEqual({ status: 200, body: expect.objectContaining({ id: AN_MODEL, object: "model", backends: [`anthropic:${AN_MODEL}`] }) });
    expect(await get("no-such-model")).toMatchObject({ status: 404, body: { error: { code: "model_not_found" } } });
  });
});

describe("a provider's refusal keeps its status", () => {
  it("404, 413 and 422 reach the client as such (SDKs raise NotFoundError etc. by status); 400 stays 400", async () => {
    const cases = [
      [anthropic, AN_MODEL, 404, "upstream_not_found"],
      [anthropic, AN_MODEL, 413, "upstream_request_too_large"],
      [openrouter, OR_MODEL, 413, "upstream_request_too_large"],
      [openrouter, OR_MODEL, 422, "upstream_unprocessable"],
      [openrouter, OR_MODEL, 400, "upstream_invalid_request"],
    ] as const;
    for (const [fake, model, status, code] of cases) {
      fake.enqueue({ kind: "status", status, message: `refused with ${status}` });
      const r = await post("chat", { ...base.chat, model });
      expect([r.status, (r.json.error as { code?: string } | undefined)?.code], `${model} ${status}: ${r.text}`).toEqual([status, code]);
      expect(r.text).toContain(`refused with ${status}`);
    }
  });
});

describe("/v1/responses names the field the client sent", () => {
  const respond = (body: Record<string, unknown>) =>
    fetch(`${fx.router.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: AN_MODEL, input: "hello", store: false, ...body }),
    });

  it("reasoning.effort Anthropic cannot fit under max_output_tokens is reasoning.effort in the 400, not the chat field it became", async () => {
    const before = anthropic.requests.length;
    // low's thinking budget is at least 1024 tokens: no room left under 1024.
    const r = await respond({ reasoning: { effort: "low" }, max_output_tokens: 1024 });
    const err = ((await r.json()) as { error: { param: string; message: string } }).error;
    expect([r.status, err.param]).toEqual([400, "reasoning.effort"]);
    expect(err.message).toMatch(/^reasoning\.effort: Anthropic needs max_tokens above the thinking budget/);
    expect(anthropic.requests.length).toBe(before);
  });

  it("reasoning.effort reaches Anthropic as a thinking budget", async () => {
    const r = await respond({ reasoning: { effort: "medium" }, max_output_tokens: 4000 });
    expect(r.status, await r.clone().text()).toBe(200);
    expect(anthropic.requests.at(-1)!.body.thinking).toEqual({ type: "enabled", budget_tokens: 2000 });
  });
});

describe("verbosity", () => {
  const respond = (body: Record<string, unknown>) =>
    fetch(`${fx.router.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ input: "hello", store: false, ...body }),
    });

  it("/v1/responses' text.verbosity reaches OpenRouter as chat verbosity, and is echoed", async () => {
    const r = await respond({ model: OR_MODEL, text: { verbosity: "low" } });
    const res = (await r.json()) as { text?: { verbosity?: string } };
    expect(r.status, JSON.stringify(res)).toBe(200);
    expect(res.text?.verbosity).toBe("low");
    expect((openrouter.requests.at(-1)!.body as Record<string, unknown>).verbosity).toBe("low");
  });

  it("refused by Anthropic as text.verbosity; medium, OpenAI's default, goes anywhere and is not sent", async () => {
    const before = anthropic.requests.length;
    const r = await respond({ model: AN_MODEL, text: { verbosity: "high" } });
    const err = ((await r.json()) as { error: { param: string; message: string } }).error;
    expect([r.status, err.param]).toEqual([400, "text.verbosity"]);
    expect(err.message).toMatch(/^text\.verbosity: .* by anthropic$/);
    expect(anthropic.requests.length).toBe(before);
    const medium = await respond({ model: AN_MODEL, text: { verbosity: "medium" } });
    expect(medium.status, await medium.clone().text()).toBe(200);
    expect(anthropic.requests.length).toBe(before + 1);
    const chat = await post("chat", { ...base.chat, model: AN_MODEL, verbosity: "medium" });
    expect(chat.status, chat.text).toBe(200);
  });

  it("a value OpenAI does not take is a 400 naming verbosity, on any backend", async () => {
    const before = openrouter.requests.length;
    const r = await post("chat", { ...base.chat, model: OR_MODEL, verbosity: "extreme" });
    expect([r.status, r.json.error?.param], r.text).toEqual([400, "verbosity"]);
    expect(openrouter.requests.length).toBe(before);
  });
});

describe("a route the model's backend does not serve", () => {
  it("is the client's mistake: 400 naming model, no Retry-After, nothing sent upstream", async () => {
    const before = anthropic.requests.length + openrouter.requests.length;
    for (const [route, body] of [
      ["/v1/embeddings", { model: AN_MODEL, input: "hello" }],
      ["/v1/completions", { model: AN_MODEL, prompt: "hello", max_tokens: 3 }],
      ["/v1/hidden_states", { model: OR_MODEL, input: "hello" }],
    ] as const) {
      const r = await fetch(`${fx.router.url}${route}`, {
        method: "POST",
        headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
      const err = ((await r.json()) as { error: { param: string; message: string } }).error;
      expect([r.status, err.param, r.headers.get("retry-after")], `${route} ${err.message}`).toEqual([400, "model", null]);
      expect(err.message).toContain(`not served on ${route}`);
    }
    expect(anthropic.requests.length + openrouter.requests.length).toBe(before);
  });
});

describe.each([
  ["openrouter", OR_MODEL],
  ["anthropic", AN_MODEL],
] as const)("%s does what it declares", (kind, model) => {
  // Anthropic serves chat only (its Backend.supports); the others every route.
  const served: readonly Route[] = kind === "anthropic" ? ["chat"] : ["chat", "completions", "embeddings"];
  const rows = (Object.entries(requestFields) as Array<[FieldName, (typeof requestFields)[FieldName]]>).flatMap(([name, f]) =>
    f.routes.filter((route) => fieldSupport[kind][name] !== "unserved" && served.includes(route)).map((route) => [name, route as Route, fieldSupport[kind][name]] as const),
  );
  it.each(rows)("%s on %s: %s", async (name, route, support) => {
    const f = requestFields[name];
    const body = { ...base[route], ...sampleOf(f, route), model };
    const fake = kind === "openrouter" ? openrouter : anthropic;
    const before = fake.requests.length;
    const r = await post(route, body);
    if (support === "refused") {
      expect(r.status, r.text).toBe(400);
      expect(r.json.error?.param).toBe(f.asks(body, route));
      expect(fake.requests.length, "nothing went upstream").toBe(before);
      return;
    }
    expect(r.status, r.text).toBe(200);
    expect(fake.requests.length).toBeGreaterThan(before);
    if (kind === "openrouter" && support === "honoured") {
      // Sent on as asked (the router adds only its own usage/stream_options asks).
      const sent = fake.requests.at(-1)!.body as Record<string, unknown>;
      for (const [k, v] of Object.entries(sampleOf(f, route))) if (k !== "stream_options") expect(sent[k], k).toEqual(v);
    }
  });
});
