// POST /v1/messages/count_tokens through a real router (real Redis, real
// Postgres keys, limits, leases and ledger) with the official
// `@anthropic-ai/sdk`'s messages.countTokens: a sim worker counts with its
// tokenize route, the faithful Anthropic fake with its count_tokens, and an
// OpenRouter model gets the router's estimate, marked as one. Nothing is
// billed or written to the ledger. (The count against the real engine's
// prompt_tokens: test/e2e/translated-apis.test.ts.)
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice, setRateLimit } from "@switchyard/db";
import { fakeTokenCount, FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let worker: SimWorker;
let leasedWorker: SimWorker;
let anthropicUpstream: FakeAnthropic;
let openrouter: FakeOpenRouter;
let client: Anthropic;
const countIds: string[] = [];

const AN_MODEL = "claude-3-5-haiku-latest";
const OR_MODEL = "openai/gpt-4o-mini";
const PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

beforeAll(async () => {
  anthropicUpstream = await new FakeAnthropic("sk-ant-count").start();
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-count" }).start();
  fx = await startTestRouter({
    "providers.anthropic": { apiKey: "sk-ant-count", baseUrl: anthropicUpstream.url },
    "providers.openrouter": { apiKey: "sk-or-count", baseUrl: openrouter.url },
    "billing.refreshMs": 100,
    "routing.models": { vision: { worker: "sim-chat", anthropic: AN_MODEL } },
    "routing.tenantChains": { "count-workers-only": ["local", "remote"] },
    "leases.queueWaitMs": 200,
  });
  await setPrice(fx.db.db, { backend: "anthropic", model: AN_MODEL, inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100n });
  worker = await new SimWorker({ id: "count-sim", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 4, promptTokens: 23 } }).start();
  leasedWorker = await new SimWorker({ id: "count-leased", models: ["sim-leased"], registry: fx.registry }).start();
  client = new Anthropic({ apiKey: fx.key, baseURL: fx.router.url, maxRetries: 0 });
  await waitFor(() => fx.router.deps.directory.all().length === 2, { what: "workers registered" });
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await leasedWorker?.stop();
  await fx?.close();
  await anthropicUpstream?.stop();
  await openrouter?.stop();
});

const count = async (body: Record<string, unknown>, headers: Record<string, string> = { "x-api-key": fx.key }) => {
  const res = await fetch(`${fx.router.url}/v1/messages/count_tokens`, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", ...headers },
    body: JSON.stringify({ model: "sim-chat", messages: [{ role: "user", content: "hi" }], ...body }),
  });
  countIds.push(res.headers.get("x-request-id")!);
  return res;
};

async function tenantKey(name: string): Promise<string> {
  const t = await createTenant(fx.db.db, name);
  if (!t.ok) throw new Error("tenant");
  return (await createKey(fx.db.db, t.tenant.id)).key;
}

const tools = [{ name: "get_weather", description: "the weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } }];

describe("POST /v1/messages/count_tokens with @anthropic-ai/sdk", () => {
  it("on a worker: its engine's count of the translated prompt, marked exact, the same prompt_tokens a message reports", async () => {
    const params = { model: "sim-chat", system: "be brief", tools, tool_choice: { type: "auto" as const }, messages: [{ role: "user" as const, content: "hello" }] };
    const { data, response } = await client.messages.countTokens(params).withResponse();
    countIds.push(response.headers.get("x-request-id")!);
    expect(data).toEqual({ input_tokens: 23 });
    expect(response.headers.get("switchyard-token-count")).toBe("exact");
    expect(response.headers.get("x-switchyard-backend")).toBe("worker:count-sim");
    expect(response.headers.get("request-id")).toBe(response.headers.get("x-request-id"));
    // The worker was asked to count, not to generate: the chat body /v1/messages would send, without an output limit.
    expect(worker.served.get("/v1/tokenize")).toBe(1);
    expect(worker.served.get("/v1/chat/completions")).toBeUndefined();
    expect(worker.lastBody).toEqual({
      model: "sim-chat",
      messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hello" }],
      tools: [{ type: "function", function: { name: "get_weather", description: "the weather", parameters: tools[0]!.input_schema } }],
      tool_choice: "auto",
    });
    const msg = await client.messages.create({ ...params, max_tokens: 5 });
    expect(msg.usage.input_tokens).toBe(data.input_tokens);
  });

  it("on Anthropic: forwarded to its count_tokens with the operator's key, the prompt a message would send, nothing that shapes an answer", async () => {
    const before = anthropicUpstream.requests.length;
    const { data, response } = await client.messages
      .countTokens({ model: AN_MODEL, system: "be brief", tools, messages: [{ role: "user", content: "hello there" }, { role: "assistant", content: "hi" }, { role: "user", content: "weather in Paris?" }] })
      .withResponse();
    countIds.push(response.headers.get("x-request-id")!);
    expect(anthropicUpstream.requests.length).toBe(before + 1);
    const sent = anthropicUpstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/messages/count_tokens");
    expect(sent.headers["x-api-key"]).toBe("sk-ant-count");
    expect(sent.headers["anthropic-version"]).toBe("2023-06-01");
    expect(sent.body).toEqual({
      model: AN_MODEL,
      system: "be brief",
      messages: [
        { role: "user", content: "hello there" },
        { role: "assistant", content: "hi" },
        { role: "user", content: "weather in Paris?" },
      ],
      tools: [{ name: "get_weather", description: "the weather", input_schema: tools[0]!.input_schema }],
    });
    // The fake's count: 2 (system) + 3 × 3 (messages) + 2 + 1 + 3 (their words) + 1 + 2 + 1 (the tool).
    expect(data).toEqual({ input_tokens: fakeTokenCount(sent.body) });
    expect(data.input_tokens).toBe(21);
    expect(response.headers.get("switchyard-token-count")).toBe("exact");
    expect(response.headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
    // An alias counts where its request would run: an image only Anthropic takes goes there, plain text stays on the worker.
    const image = await count({ model: "vision", messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, { type: "image", source: { type: "base64", media_type: "image/png", data: PIXEL } }] }] });
    expect(image.headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
    expect(await image.json()).toEqual({ input_tokens: 3 + 3 + 100 });
    const text = await count({ model: "vision" });
    expect(text.headers.get("x-switchyard-backend")).toBe("worker:count-sim");
    // An image to a model only text-only workers serve is the 400 /v1/messages gives, naming the block.
    const refused = await count({ messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: PIXEL } }] }] });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error", message: expect.stringMatching(/^messages\[0\]\.content\[0\]: image input is not supported/) } });
  });

  it("on OpenRouter, which cannot count: the router's estimate, marked as one, and OpenRouter is not called", async () => {
    const before = openrouter.requests.length;
    const { data, response } = await client.messages.countTokens({ model: OR_MODEL, messages: [{ role: "user", content: "hello there" }] }).withResponse();
    countIds.push(response.headers.get("x-request-id")!);
    expect(response.headers.get("switchyard-token-count")).toBe("estimate");
    expect(response.headers.get("x-switchyard-backend")).toBe(`openrouter:${OR_MODEL}`);
    // 3 for the reply, 4 for the message, 11 ASCII characters at 4 a token.
    expect(data).toEqual({ input_tokens: 3 + 4 + 3 });
    expect(openrouter.requests.length).toBe(before);
  });

  it("errors leave in Anthropic's shape: auth, unknown model, extra inputs, what no backend can honour, the upstream's own", async () => {
    const bad = await count({}, { "x-api-key": "sy_00000000_notarealkeynotarealkeynotarealkey" });
    expect(bad.status).toBe(401);
    expect(await bad.json()).toMatchObject({ type: "error", error: { type: "authentication_error" } });
    const sdk = new Anthropic({ apiKey: "sy_00000000_notarealkeynotarealkeynotarealkey", baseURL: fx.router.url, maxRetries: 0 });
    await expect(sdk.messages.countTokens({ model: "sim-chat", messages: [{ role: "user", content: "x" }] })).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    await expect(client.messages.countTokens({ model: "no-such-model", messages: [{ role: "user", content: "x" }] })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
    const cases: Array<[Record<string, unknown>, string]> = [
      // Anthropic's count_tokens refuses what only shapes an answer as extra inputs; so does the router.
      [{ max_tokens: 5 }, "max_tokens"],
      [{ stream: true }, "stream"],
      [{ temperature: 0.5 }, "temperature"],
      // Thinking is taken (test/router/messages-thinking.test.ts), under Anthropic's rules.
      [{ thinking: { type: "enabled", budget_tokens: 1000 } }, "thinking.budget_tokens"],
      [{ tools: [{ type: "web_search_20250305", name: "web_search" }] }, "tools[0].type"],
      [{ messages: [{ role: "user", content: [{ type: "document", source: { type: "text", media_type: "text/plain", data: "x" } }] }] }, "messages[0].content[0].type"],
    ];
    for (const [extra, field] of cases) {
      const res = await count(extra);
      expect(res.status, field).toBe(400);
      const body = (await res.json()) as { type: string; error: { type: string; message: string } };
      expect(body).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
      expect(body.error.message.startsWith(`${field}:`), `${field}: ${body.error.message}`).toBe(true);
    }
    expect((await count({}, { "x-api-key": fx.key, "anthropic-version": "latest" })).status).toBe(400);
    // Anthropic's own refusal of the request passes through; its overload is Anthropic's 529 overloaded_error, as on /v1/messages.
    anthropicUpstream.enqueue({ kind: "status", status: 400, message: "messages: roles must alternate" });
    const refused = await count({ model: AN_MODEL });
    expect(refused.status).toBe(400);
    expect(await refused.json()).toMatchObject({ error: { type: "invalid_request_error", message: "messages: roles must alternate" } });
    anthropicUpstream.enqueue({ kind: "status", status: 529 });
    const overloaded = await count({ model: AN_MODEL });
    expect(overloaded.status).toBe(529);
    expect(overloaded.headers.get("retry-after")).toBe("1");
    expect(await overloaded.json()).toMatchObject({ type: "error", error: { type: "overloaded_error" } });
    // A worker that fails is failed over from like a run's; with none left, its failure.
    worker.enqueue({ kind: "status", status: 503, message: "engine is restarting" });
    const down = await count({});
    expect(down.status).toBe(502);
    expect(await down.json()).toMatchObject({ type: "error", error: { type: "api_error", message: expect.stringMatching(/engine is restarting/) } });
  });

  it("a tenant reaches only its chain's backends: one without Anthropic gets the 404 a message would", async () => {
    const key = await tenantKey("count-workers-only");
    const before = anthropicUpstream.requests.length;
    const res = await count({ model: AN_MODEL }, { "x-api-key": key });
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "not_found_error" } });
    expect(anthropicUpstream.requests.length).toBe(before);
    expect((await count({}, { "x-api-key": key })).status).toBe(200);
  });

  it("a lease holder counts on its leased worker with its fencing token; another tenant is kept off that worker", async () => {
    const lease = await fetch(`${fx.router.url}/v1/leases`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-leased", duration_s: 30 }),
    });
    expect(lease.status).toBe(201);
    const { id, fencing_token } = (await lease.json()) as { id: string; fencing_token: number };
    await waitFor(() => fx.router.deps.directory.all().some((w) => w.id === "count-leased"));
    const mine = await count({ model: "sim-leased" }, { "x-api-key": fx.key, "x-switchyard-lease": id });
    expect(mine.status).toBe(200);
    expect(mine.headers.get("x-switchyard-backend")).toBe("worker:count-leased");
    expect(leasedWorker.fenceLog.at(-1)).toMatchObject({ token: fencing_token, accepted: true });
    const served = leasedWorker.served.get("/v1/tokenize") ?? 0;
    const theirs = await count({ model: "sim-leased" }, { "x-api-key": await tenantKey("count-rival") });
    expect(theirs.status).toBe(529);
    expect(await theirs.json()).toMatchObject({ type: "error", error: { type: "overloaded_error", message: expect.stringMatching(/leased by another tenant/) } });
    expect(leasedWorker.served.get("/v1/tokenize") ?? 0).toBe(served);
  });

  it("rate limits count it as a request and no tokens: x-ratelimit-* headers, a 429 in Anthropic's shape when over", async () => {
    const t = await createTenant(fx.db.db, "count-limited");
    if (!t.ok) throw new Error("tenant");
    const key = (await createKey(fx.db.db, t.tenant.id)).key;
    await setRateLimit(fx.db.db, { tenantId: t.tenant.id, requestsPerMinute: 2 });
    const first = await count({}, { "x-api-key": key });
    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-limit-requests")).toBe("2");
    expect(first.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    expect((await count({}, { "x-api-key": key })).headers.get("x-ratelimit-remaining-requests")).toBe("0");
    const over = await count({}, { "x-api-key": key });
    expect(over.status).toBe(429);
    expect(over.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await over.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    // A token limit a message's prompt is over does not stop a count: it runs no model.
    const u = await createTenant(fx.db.db, "count-token-limited");
    if (!u.ok) throw new Error("tenant");
    const tokenKey = (await createKey(fx.db.db, u.tenant.id)).key;
    await setRateLimit(fx.db.db, { tenantId: u.tenant.id, tokensPerMinute: 1 });
    const counted = await count({}, { "x-api-key": tokenKey });
    expect(counted.status).toBe(200);
    expect(counted.headers.get("x-ratelimit-remaining-tokens")).toBe("1");
    const message = await fetch(`${fx.router.url}/v1/messages`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-api-key": tokenKey },
      body: JSON.stringify({ model: "sim-chat", max_tokens: 5, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(message.status).toBe(429);
  });

  it("nothing counted is billed: no ledger row, no hold, for any of the counts above", async () => {
    await fx.router.deps.guard.flush();
    const ids = countIds.filter(Boolean);
    expect(ids.length).toBeGreaterThan(10);
    expect(await fx.db.sql`select request_id from spend_ledger where request_id = any(${ids})`).toHaveLength(0);
    // The Anthropic counts held nothing against the tenant's day either.
    expect(await fx.db.sql`select request_id from spend_ledger where tenant_id = ${fx.tenantId} and backend = 'anthropic'`).toHaveLength(0);
  });
});
