// POST /v1/responses/input_tokens through a real router (real Redis response
// store and limits, real Postgres keys and ledger) with the official
// `openai` SDK's responses.inputTokens.count: a sim worker counts with its
// tokenize route, the faithful Anthropic fake with its count_tokens, and an
// OpenRouter model gets the router's estimate, marked as one; a continuation
// counts the stored conversation it continues, the tenant's own only.
// Nothing is billed, written to the ledger or stored. (The count against the
// real engine's input_tokens: test/e2e/translated-apis.test.ts.)
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice, setRateLimit } from "@switchyard/db";
import { fakeTokenCount, FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let worker: SimWorker;
let anthropicUpstream: FakeAnthropic;
let openrouter: FakeOpenRouter;
let client: OpenAI;
const countIds: string[] = [];

const AN_MODEL = "claude-3-5-haiku-latest";
const OR_MODEL = "openai/gpt-4o-mini";

beforeAll(async () => {
  anthropicUpstream = await new FakeAnthropic("sk-ant-rtok").start();
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-rtok" }).start();
  fx = await startTestRouter({
    "providers.anthropic": { apiKey: "sk-ant-rtok", baseUrl: anthropicUpstream.url },
    "providers.openrouter": { apiKey: "sk-or-rtok", baseUrl: openrouter.url },
    "billing.refreshMs": 100,
  });
  await setPrice(fx.db.db, { backend: "anthropic", model: AN_MODEL, inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100n });
  worker = await new SimWorker({ id: "rtok-sim", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 4, promptTokens: 23 } }).start();
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "worker registered" });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", AN_MODEL), { what: "price loaded" });
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
  await anthropicUpstream?.stop();
  await openrouter?.stop();
});

/** The SDK's count, its answer's headers kept and its request id noted. */
async function count(params: OpenAI.Responses.InputTokenCountParams, sdk = client) {
  const { data, response } = await sdk.responses.inputTokens.count(params).withResponse();
  countIds.push(response.headers.get("x-request-id")!);
  return { data, headers: response.headers };
}

/** A raw count, for bodies the SDK's types would not take. */
const post = async (body: Record<string, unknown>, key = fx.key) => {
  const res = await fetch(`${fx.router.url}/v1/responses/input_tokens`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "sim-chat", input: "hi", ...body }),
  });
  countIds.push(res.headers.get("x-request-id")!);
  return res;
};

async function tenantClient(name: string): Promise<{ id: number; key: string; sdk: OpenAI }> {
  const t = await createTenant(fx.db.db, name);
  if (!t.ok) throw new Error("tenant");
  const key = (await createKey(fx.db.db, t.tenant.id)).key;
  return { id: t.tenant.id, key, sdk: new OpenAI({ apiKey: key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 }) };
}

const weather = { type: "function" as const, name: "get_weather", description: "the weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false };
const time = { type: "function" as const, name: "get_time", description: "the time", parameters: { type: "object", properties: { zone: { type: "string" } } }, strict: false };
const chatTool = (t: { name: string; description: string; parameters: Record<string, unknown> }) => ({ type: "function", function: { name: t.name, description: t.description, parameters: t.parameters, strict: false } });

describe("POST /v1/responses/input_tokens with the openai SDK", () => {
  it("on a worker: its engine's count of the translated prompt, marked exact, the input_tokens a response of it reports", async () => {
    const params = { model: "sim-chat", instructions: "be brief", input: "hello", tools: [weather], tool_choice: "auto" as const, parallel_tool_calls: false };
    const chats = worker.served.get("/v1/chat/completions") ?? 0;
    const { data, headers } = await count(params);
    expect(data).toEqual({ object: "response.input_tokens", input_tokens: 23 });
    expect(headers.get("switchyard-token-count")).toBe("exact");
    expect(headers.get("x-switchyard-backend")).toBe("worker:rtok-sim");
    // The worker was asked to count, not to generate: the chat body /v1/responses would send, without an output limit.
    expect(worker.served.get("/v1/tokenize")).toBe(1);
    expect(worker.served.get("/v1/chat/completions") ?? 0).toBe(chats);
    expect(worker.lastBody).toEqual({
      model: "sim-chat",
      messages: [
        { role: "system", content: "be brief" },
        { role: "user", content: "hello" },
      ],
      tools: [chatTool(weather)],
      tool_choice: "auto",
      parallel_tool_calls: false,
    });
    const res = await client.responses.create({ ...params, max_output_tokens: 5 });
    expect(res.usage!.input_tokens).toBe(data.input_tokens);
    // allowed_tools: the prompt a run sends holds only the allowed tools, as the chat pipeline narrows them.
    await count({ model: "sim-chat", input: "hello", tools: [weather, time], tool_choice: { type: "allowed_tools", mode: "auto", tools: [{ type: "function", name: "get_time" }] } });
    expect(worker.lastBody).toMatchObject({ tools: [chatTool(time)], tool_choice: "auto" });
  });

  it("on Anthropic: its count_tokens, sent the prompt a response would send, with the operator's key", async () => {
    const before = anthropicUpstream.requests.length;
    const { data, headers } = await count({
      model: AN_MODEL,
      instructions: "be brief",
      tools: [weather],
      input: [
        { role: "user", content: "hello there" },
        { role: "assistant", content: "hi" },
        { role: "user", content: [{ type: "input_text", text: "weather in Paris?" }] },
      ],
    });
    expect(anthropicUpstream.requests.length).toBe(before + 1);
    const sent = anthropicUpstream.requests.at(-1)!;
    expect(sent.path).toBe("/v1/messages/count_tokens");
    expect(sent.headers["x-api-key"]).toBe("sk-ant-rtok");
    expect(sent.body).toEqual({
      model: AN_MODEL,
      system: "be brief",
      messages: [
        { role: "user", content: "hello there" },
        { role: "assistant", content: "hi" },
        { role: "user", content: "weather in Paris?" },
      ],
      tools: [{ name: "get_weather", description: "the weather", input_schema: weather.parameters }],
    });
    expect(data).toEqual({ object: "response.input_tokens", input_tokens: fakeTokenCount(sent.body) });
    expect(headers.get("switchyard-token-count")).toBe("exact");
    expect(headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
  });

  it("on OpenRouter, which cannot count: the router's estimate, marked as one, and OpenRouter is not called", async () => {
    const before = openrouter.requests.length;
    const { data, headers } = await count({ model: OR_MODEL, input: "hello there" });
    expect(headers.get("switchyard-token-count")).toBe("estimate");
    expect(headers.get("x-switchyard-backend")).toBe(`openrouter:${OR_MODEL}`);
    // 3 for the reply, 4 for the message, 11 ASCII characters at 4 a token.
    expect(data).toEqual({ object: "response.input_tokens", input_tokens: 3 + 4 + 3 });
    expect(openrouter.requests.length).toBe(before);
    // reasoning.effort, which OpenRouter honours, is counted there too.
    expect((await count({ model: OR_MODEL, input: "hello there", reasoning: { effort: "low" } })).data.input_tokens).toBe(10);
  });

  it("previous_response_id: the stored conversation it continues is counted before the input, the previous instructions not", async () => {
    const first = await client.responses.create({ model: AN_MODEL, instructions: "first instructions", input: "my name is Ada and I like boats" });
    expect(first.output_text).toBe("tok0 tok1 tok2 tok3 tok4 ");
    const alone = await count({ model: AN_MODEL, input: "what is my name?" });
    const continued = await count({ model: AN_MODEL, input: "what is my name?", previous_response_id: first.id });
    const sent = anthropicUpstream.requests.at(-1)!;
    expect(sent.body.messages).toEqual([
      { role: "user", content: "my name is Ada and I like boats" },
      { role: "assistant", content: "tok0 tok1 tok2 tok3 tok4 " },
      { role: "user", content: "what is my name?" },
    ]);
    expect(sent.body.system).toBeUndefined();
    expect(continued.data.input_tokens).toBeGreaterThan(alone.data.input_tokens);
    // 3 per message and a word each: the earlier turn's 8 + 5 words, and the input's 4.
    expect(alone.data.input_tokens).toBe(3 + 4);
    expect(continued.data.input_tokens).toBe(3 + 8 + 3 + 5 + 3 + 4);
    // The same on a worker: the chat body counted carries the earlier turns.
    const onWorker = await client.responses.create({ model: "sim-chat", input: "remember 42" });
    await count({ model: "sim-chat", input: "what number?", previous_response_id: onWorker.id, instructions: "now" });
    expect(worker.lastBody!.messages).toEqual([
      { role: "system", content: "now" },
      { role: "user", content: "remember 42" },
      { role: "assistant", content: "tok0 tok1 tok2 tok3 " },
      { role: "user", content: "what number?" },
    ]);
  });

  it("another tenant's previous_response_id is a 404 naming it, as are unknown and malformed ones; nothing is counted", async () => {
    const mine = await client.responses.create({ model: AN_MODEL, input: "a secret" });
    const other = await tenantClient("rtok-other");
    const before = anthropicUpstream.requests.length;
    const theirs = other.sdk.responses.inputTokens.count({ model: AN_MODEL, input: "continue", previous_response_id: mine.id });
    await expect(theirs).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(theirs).rejects.toMatchObject({ status: 404, param: "previous_response_id", error: { type: "invalid_request_error", code: "not_found" } });
    await expect(client.responses.inputTokens.count({ model: AN_MODEL, input: "x", previous_response_id: `resp_${"0".repeat(32)}` })).rejects.toMatchObject({ status: 404 });
    await expect(client.responses.inputTokens.count({ model: AN_MODEL, input: "x", previous_response_id: "../../etc" })).rejects.toMatchObject({ status: 404 });
    expect(anthropicUpstream.requests.length).toBe(before);
    // The owner still counts it.
    expect((await count({ model: AN_MODEL, input: "continue", previous_response_id: mine.id })).data.input_tokens).toBeGreaterThan(0);
  });

  it("refuses with a 400 naming the field what create refuses and what only shapes an answer", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      // Not InputTokenCountParams: they shape the answer or its storage, and would be ignored.
      [{ max_output_tokens: 5 }, "max_output_tokens"],
      [{ temperature: 0.5 }, "temperature"],
      [{ stream: true }, "stream"],
      [{ store: false }, "store"],
      [{ include: ["message.output_text.logprobs"] }, "include"],
      // What create refuses, with create's 400s.
      [{ tools: [{ type: "web_search" }] }, "tools[0].type"],
      [{ input: [{ type: "item_reference", id: "x" }] }, "input[0].type"],
      [{ input: [{ role: "user", content: [{ type: "input_file", file_id: "f" }] }] }, "input[0].content[0].type"],
      [{ text: { format: { type: "json_schema", schema: {} } } }, "text.format"],
      [{ truncation: "auto" }, "truncation"],
      [{ conversation: "conv_1" }, "conversation"],
      [{ input: 5 }, "input"],
      [{ model: "" }, "model"],
      // A field no backend of the model honours: named as sent, not as the chat field it became.
      [{ reasoning: { effort: "high" } }, "reasoning.effort"],
    ];
    for (const [extra, param] of cases) {
      const res = await post(extra);
      expect(res.status, param).toBe(400);
      const body = (await res.json()) as { error: { param: string; type: string; message: string } };
      expect(body.error.type, param).toBe("invalid_request_error");
      expect(body.error.param.startsWith(param), `${param} vs ${body.error.param}`).toBe(true);
      expect(body.error.message.startsWith(param), `${param}: ${body.error.message}`).toBe(true);
    }
    await expect(client.responses.inputTokens.count({ model: "sim-chat", input: "x", temperature: 0 } as OpenAI.Responses.InputTokenCountParams)).rejects.toMatchObject({ status: 400, param: "temperature" });
    await expect(client.responses.inputTokens.count({ model: "no-such-model", input: "x" })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const sdk = new OpenAI({ apiKey: "sy_00000000_notarealkeynotarealkeynotarealkey", baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
    await expect(sdk.responses.inputTokens.count({ model: "sim-chat", input: "x" })).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    // A worker that fails is failed over from like a run's; with none left, its failure in the one error shape.
    worker.enqueue({ kind: "status", status: 503, message: "engine is restarting" });
    const down = await post({});
    expect(down.status).toBe(502);
    expect(await down.json()).toMatchObject({ error: { type: "upstream_error", code: "bad_upstream", message: expect.stringMatching(/engine is restarting/) } });
  });

  it("rate limits count it as one request and no tokens: x-ratelimit-* headers, a 429 when over", async () => {
    const limited = await tenantClient("rtok-limited");
    await setRateLimit(fx.db.db, { tenantId: limited.id, requestsPerMinute: 2 });
    const first = await post({}, limited.key);
    expect(first.status).toBe(200);
    expect(first.headers.get("x-ratelimit-limit-requests")).toBe("2");
    expect(first.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    expect((await post({}, limited.key)).headers.get("x-ratelimit-remaining-requests")).toBe("0");
    const over = await post({}, limited.key);
    expect(over.status).toBe(429);
    expect(over.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await over.json()).toMatchObject({ error: { type: "rate_limit_error", code: "rate_limit_exceeded" } });
    // A token limit a response's prompt is over does not stop a count: it runs no model, and takes none of the tokens.
    const tokenLimited = await tenantClient("rtok-token-limited");
    await setRateLimit(fx.db.db, { tenantId: tokenLimited.id, tokensPerMinute: 1 });
    const counted = await count({ model: "sim-chat", input: "hi" }, tokenLimited.sdk);
    expect(counted.data.input_tokens).toBe(23);
    expect(counted.headers.get("x-ratelimit-remaining-tokens")).toBe("1");
    await expect(tokenLimited.sdk.responses.create({ model: "sim-chat", input: "hi", max_output_tokens: 5 })).rejects.toMatchObject({ status: 429 });
  });

  it("nothing counted is billed or stored: no ledger row, no stored response", async () => {
    const stored = async () => (await fx.redis.redis.keys(`${fx.redis.prefix}response:{${fx.tenantId}:*`)).length;
    const before = await stored();
    await count({ model: AN_MODEL, input: "count me" });
    await count({ model: "sim-chat", input: "count me" });
    expect(await stored()).toBe(before);
    await fx.router.deps.guard.flush();
    const ids = countIds.filter(Boolean);
    expect(ids.length).toBeGreaterThan(15);
    expect(await fx.db.sql`select request_id from spend_ledger where request_id = any(${ids})`).toHaveLength(0);
  });
});
