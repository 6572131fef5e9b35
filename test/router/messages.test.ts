// POST /v1/messages (Anthropic's Messages API, inbound) through a real
// router (real Redis, real Postgres keys, budgets and ledger) with the
// official `@anthropic-ai/sdk` pointed at it unchanged: a sim worker as the
// free backend and the faithful Anthropic fake as the paid one, so a request
// runs through the same chain, budget hold and ledger as chat.
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice, setRateLimit } from "@switchyard/db";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let worker: SimWorker;
let upstream: FakeAnthropic;
let client: Anthropic;

const AN_MODEL = "claude-3-5-haiku-latest";
// A 1×1 PNG.
const PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==";

beforeAll(async () => {
  upstream = await new FakeAnthropic("sk-ant-test").start();
  fx = await startTestRouter({
    "providers.anthropic": { apiKey: "sk-ant-test", baseUrl: upstream.url },
    "billing.refreshMs": 100,
    // "vision" runs on the worker when it can, else on Anthropic.
    "routing.models": { vision: { worker: "sim-chat", anthropic: AN_MODEL } },
  });
  await setPrice(fx.db.db, { backend: "anthropic", model: AN_MODEL, inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100n });
  worker = await new SimWorker({ id: "msg-sim", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 4 } }).start();
  client = new Anthropic({ apiKey: fx.key, baseURL: fx.router.url, maxRetries: 0 });
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "worker registered" });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", AN_MODEL), { what: "price loaded" });
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
  await upstream?.stop();
});

async function ledgerRows(requestId: string) {
  return waitFor(async () => {
    await fx.router.deps.guard.flush();
    const rows = await fx.db.sql`select * from spend_ledger where request_id = ${requestId}`;
    return rows.length ? rows : undefined;
  });
}

const post = (body: Record<string, unknown>, headers: Record<string, string> = { "x-api-key": fx.key }) =>
  fetch(`${fx.router.url}/v1/messages`, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", ...headers },
    body: JSON.stringify({ model: "sim-chat", max_tokens: 64, messages: [{ role: "user", content: "hi" }], ...body }),
  });

describe("POST /v1/messages with @anthropic-ai/sdk", () => {
  it("messages.create: Anthropic's message shape, on the worker, with its ledger row", async () => {
    const { data: msg, response } = await client.messages
      .create({ model: "sim-chat", max_tokens: 50, system: "be brief", messages: [{ role: "user", content: "hello" }], stop_sequences: ["END"], metadata: { user_id: "u-1" } })
      .withResponse();
    expect(msg.type).toBe("message");
    expect(msg.role).toBe("assistant");
    expect(msg.id).toMatch(/^msg_/);
    expect(msg.model).toBe("sim-chat");
    expect(msg.content).toEqual([{ type: "text", text: "tok0 tok1 tok2 tok3 " }]);
    expect(msg.stop_reason).toBe("end_turn");
    expect(msg.usage).toMatchObject({ input_tokens: 7, output_tokens: 4, cache_read_input_tokens: 0, cache_creation_input_tokens: 0 });
    const requestId = response.headers.get("x-request-id")!;
    expect(response.headers.get("request-id")).toBe(requestId);
    // What the chat path ran.
    expect(worker.lastBody).toMatchObject({ messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hello" }], max_tokens: 50, stop: ["END"], user: "u-1" });
    const rows = await ledgerRows(requestId);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ tenant_id: String(fx.tenantId), backend: "worker", worker: "msg-sim", prompt_tokens: 7, completion_tokens: 4, status: "ok" });
    // Sampling fields older clients send (today's SDK types no longer list them) still reach the chat request.
    expect((await post({ temperature: 0.5, top_p: 0.9, top_k: 20 })).status).toBe(200);
    expect(worker.lastBody).toMatchObject({ temperature: 0.5, top_p: 0.9, top_k: 20 });
  });

  it("messages.stream: Anthropic's event sequence, assembled by the SDK", async () => {
    const stream = client.messages.stream({ model: "sim-chat", max_tokens: 50, messages: [{ role: "user", content: "stream it" }] });
    const types: string[] = [];
    let text = "";
    stream.on("streamEvent", (ev) => types.push(ev.type));
    stream.on("text", (delta) => (text += delta));
    const final = await stream.finalMessage();
    expect(types).toEqual([
      "message_start",
      "content_block_start",
      "content_block_delta",
      "content_block_delta",
      "content_block_delta",
      "content_block_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(text).toBe("tok0 tok1 tok2 tok3 ");
    expect(final.content).toEqual([{ type: "text", text: "tok0 tok1 tok2 tok3 " }]);
    expect(final.stop_reason).toBe("end_turn");
    expect(final.usage).toMatchObject({ input_tokens: 7, output_tokens: 4 });
    // stream: true through messages.create yields the same events.
    const raw = await client.messages.create({ model: "sim-chat", max_tokens: 50, messages: [{ role: "user", content: "again" }], stream: true });
    const again: string[] = [];
    for await (const ev of raw) again.push(ev.type);
    expect(again).toEqual(types);
  });

  it("the stream's wire bytes name every event, as Anthropic's do, and its ledger row lands", async () => {
    const res = await post({ stream: true });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await res.text();
    const frames = text.trim().split("\n\n");
    for (const f of frames) {
      const [ev, data] = f.split("\n");
      const type = ev!.replace(/^event: /, "");
      expect((JSON.parse(data!.replace(/^data: /, "")) as { type: string }).type).toBe(type);
    }
    expect(text).not.toContain("[DONE]");
    const rows = await ledgerRows(res.headers.get("x-request-id")!);
    expect(rows[0]).toMatchObject({ status: "ok", completion_tokens: 4 });
  });

  it("accepts the key as x-api-key or Authorization: Bearer; a bad one is Anthropic's authentication_error", async () => {
    expect((await post({}, { "x-api-key": fx.key })).status).toBe(200);
    expect((await post({}, { authorization: `Bearer ${fx.key}` })).status).toBe(200);
    const bad = await post({}, { "x-api-key": "sy_00000000_notarealkeynotarealkeynotarealkey" });
    expect(bad.status).toBe(401);
    expect(await bad.json()).toMatchObject({ type: "error", error: { type: "authentication_error" }, request_id: expect.stringMatching(/^req_/) });
    const none = await post({}, {});
    expect(none.status).toBe(401);
    const sdk = new Anthropic({ apiKey: "sy_00000000_notarealkeynotarealkeynotarealkey", baseURL: fx.router.url, maxRetries: 0 });
    await expect(sdk.messages.create({ model: "sim-chat", max_tokens: 5, messages: [{ role: "user", content: "x" }] })).rejects.toBeInstanceOf(Anthropic.AuthenticationError);
    const badVersion = await post({}, { "x-api-key": fx.key, "anthropic-version": "latest" });
    expect(badVersion.status).toBe(400);
  });

  it("translates tools, tool_choice and a tool_use / tool_result turn to the chat request", async () => {
    const input_schema = { type: "object" as const, properties: { city: { type: "string" } }, required: ["city"] };
    const msg = await client.messages.create({
      model: "sim-chat",
      max_tokens: 50,
      tools: [{ name: "get_weather", description: "the weather", input_schema }],
      tool_choice: { type: "tool", name: "get_weather", disable_parallel_tool_use: true },
      messages: [
        { role: "user", content: "weather in Paris?" },
        { role: "assistant", content: [{ type: "text", text: "Let me check." }, { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }, { type: "text", text: "and tomorrow?" }] },
      ],
    });
    expect(msg.stop_reason).toBe("end_turn");
    expect(worker.lastBody!.tools).toEqual([{ type: "function", function: { name: "get_weather", description: "the weather", parameters: input_schema } }]);
    expect(worker.lastBody!.tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });
    expect(worker.lastBody!.parallel_tool_calls).toBe(false);
    expect(worker.lastBody!.messages).toEqual([
      { role: "user", content: "weather in Paris?" },
      { role: "assistant", content: "Let me check.", tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "toolu_1", content: "sunny" },
      { role: "user", content: "and tomorrow?" },
    ]);
  });

  it("Anthropic-only fields no backend can honour, and thinking outside Anthropic's rules, are a 400 naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ thinking: { type: "enabled", budget_tokens: 1024 } }, "thinking.budget_tokens"],
      [{ thinking: { type: "between_tools" } }, "thinking.type"],
      [{ tools: [{ type: "web_search_20250305", name: "web_search" }] }, "tools[0].type"],
      [{ mcp_servers: [{ type: "url", url: "https://example.com", name: "x" }] }, "mcp_servers"],
      [{ container: "c1" }, "container"],
      [{ messages: [{ role: "user", content: [{ type: "document", source: { type: "text", media_type: "text/plain", data: "x" } }] }] }, "messages[0].content[0].type"],
      [{ some_future_field: true }, "some_future_field"],
      [{ stop_sequences: ["a", "b", "c", "d", "e"] }, "stop_sequences"],
    ];
    for (const [extra, field] of cases) {
      const res = await post(extra);
      expect(res.status, field).toBe(400);
      const body = (await res.json()) as { type: string; error: { type: string; message: string } };
      expect(body.type).toBe("error");
      expect(body.error.type).toBe("invalid_request_error");
      expect(body.error.message.startsWith(`${field}:`), `${field}: ${body.error.message}`).toBe(true);
    }
    // A budget not under max_tokens, as Anthropic refuses it.
    await expect(client.messages.create({ model: "sim-chat", max_tokens: 50, messages: [{ role: "user", content: "x" }], thinking: { type: "enabled", budget_tokens: 1024 } })).rejects.toBeInstanceOf(
      Anthropic.BadRequestError,
    );
  });

  it("thinking on a worker-only model (Claude Code asks it of every model) is served there without thinking, whole, streamed and counted", async () => {
    for (const [path, body] of [
      ["/v1/messages", { max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 2048 } }],
      ["/v1/messages", { max_tokens: 4096, stream: true, thinking: { type: "adaptive" }, output_config: { effort: "high" } }],
      ["/v1/messages/count_tokens", { thinking: { type: "enabled", budget_tokens: 2048 } }],
    ] as const) {
      const res = await fetch(`${fx.router.url}${path}`, {
        method: "POST",
        headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": fx.key },
        body: JSON.stringify({ model: "sim-chat", messages: [{ role: "user", content: "hi" }], ...body }),
      });
      const text = await res.text();
      expect(res.status, `${path}: ${text}`).toBe(200);
      expect(res.headers.get("x-switchyard-backend"), path).toMatch(/^worker:/);
      expect(text, path).not.toContain('"thinking"');
      // The ask reached the worker as OpenRouter's reasoning, which its model answers without.
      if ("stream" in body) expect(worker.lastBody).toMatchObject({ reasoning: { enabled: true, effort: "high" } });
    }
  });

  it("Claude Code's billing-header system block is left out, the blocks after it kept with their cache_control", async () => {
    const res = await post({
      system: [
        { type: "text", text: "x-anthropic-billing-header: cc_version=2.1.197.c40; cc_entrypoint=cli;" },
        { type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } },
      ],
    });
    expect(res.status).toBe(200);
    expect((worker.lastBody as { messages: unknown[] }).messages[0]).toEqual({ role: "system", content: [{ type: "text", text: "You are Claude Code.", cache_control: { type: "ephemeral" } }] });
  });

  it("a backend's refusal of a chat field the translation made names the Messages field sent: output_config.format, not response_format", async () => {
    const before = upstream.requests.length;
    const res = await post({ model: AN_MODEL, output_config: { format: { type: "json_schema", schema: { type: "object" } } } });
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error", message: expect.stringMatching(/^output_config\.format: .* by anthropic$/) } });
    expect(upstream.requests.length).toBe(before);
  });

  it("an image goes only to a backend that takes images: a text-only worker is a 400 naming the block, the chain's Anthropic backend serves it", async () => {
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: PIXEL } };
    const onWorker = await post({ messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, image] }] });
    expect(onWorker.status).toBe(400);
    const err = (await onWorker.json()) as { error: { type: string; message: string } };
    expect(err.error.type).toBe("invalid_request_error");
    expect(err.error.message).toMatch(/^messages\[0\]\.content\[1\]: image input is not supported/);

    const before = upstream.requests.length;
    const res = await post({ model: "vision", messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, image] }] });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
    const msg = (await res.json()) as { type: string; model: string; content: Array<{ type: string }> };
    expect(msg).toMatchObject({ type: "message", model: "vision" });
    expect(upstream.requests.length).toBe(before + 1);
    const sent = upstream.requests.at(-1)!.body as { messages: Array<{ content: Array<{ type: string; source?: unknown }> }> };
    expect(sent.messages[0]!.content[1]).toEqual({ type: "image", source: { type: "base64", media_type: "image/png", data: PIXEL } });
    // Text alone on the same alias stays on the free worker.
    const text = await post({ model: "vision" });
    expect(text.headers.get("x-switchyard-backend")).toBe("worker:msg-sim");
    const rows = await ledgerRows(res.headers.get("x-request-id")!);
    expect(rows[0]).toMatchObject({ backend: "anthropic", model: AN_MODEL, status: "ok" });
    expect(BigInt(rows[0]!.cost_micro as string)).toBeGreaterThan(0n);
  });

  it("a paid answer's cache reads and writes reach the client in Anthropic's usage, the writes split by lifetime, whole and streamed", async () => {
    const image = { type: "image", source: { type: "base64", media_type: "image/png", data: PIXEL } };
    const body = { model: "vision", max_tokens: 64, messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, image] }] };
    // 1000 prompt tokens: 500 fresh, 200 read, 300 written (100 for 5 minutes, 200 for an hour).
    const answer = { kind: "ok", promptTokens: 1000, cachedTokens: 200, cacheWriteTokens: 300, cacheWrite1hTokens: 200, completionTokens: 5 } as const;
    const want = { input_tokens: 500, cache_read_input_tokens: 200, cache_creation_input_tokens: 300, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 }, output_tokens: 5 };
    upstream.enqueue(answer);
    const whole = await post(body);
    expect(whole.headers.get("x-switchyard-backend")).toBe(`anthropic:${AN_MODEL}`);
    expect(((await whole.json()) as { usage: unknown }).usage).toMatchObject(want);
    // Streamed, the counts are known only from the usage at the end: message_delta carries them.
    upstream.enqueue(answer);
    const text = await (await post({ ...body, stream: true })).text();
    const delta = text
      .split("\n\n")
      .map((f) => f.split("\n"))
      .find(([ev]) => ev === "event: message_delta")!;
    expect((JSON.parse(delta[1]!.slice("data: ".length)) as { usage: unknown }).usage).toMatchObject(want);
  });

  it("a stop sequence that ended a paid answer is Anthropic's stop_reason stop_sequence, naming it, whole and streamed", async () => {
    // The chat hop between (backends/anthropic → translate/messages) carries the match as vLLM's choices[].stop_reason.
    const params = { model: AN_MODEL, max_tokens: 50, stop_sequences: ["END", "STOP"], messages: [{ role: "user" as const, content: "count" }] };
    upstream.enqueue({ kind: "ok", text: "one two END three" });
    const whole = await client.messages.create(params);
    expect(whole.content).toEqual([{ type: "text", text: "one two " }]);
    expect(whole).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });
    upstream.enqueue({ kind: "ok", text: "one two END three" });
    const streamed = await client.messages.stream(params).finalMessage();
    expect(streamed).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: "END" });
    // No stop sequence matched: end_turn, stop_sequence null.
    upstream.enqueue({ kind: "ok", text: "one two three" });
    expect(await client.messages.create(params)).toMatchObject({ stop_reason: "end_turn", stop_sequence: null });
    // Chat clients of the same backend see the match too, as vLLM reports it.
    upstream.enqueue({ kind: "ok", text: "one two END three" });
    const chat = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: AN_MODEL, max_tokens: 50, stop: ["END"], messages: [{ role: "user", content: "count" }] }),
    });
    expect(((await chat.json()) as { choices: unknown[] }).choices[0]).toMatchObject({ finish_reason: "stop", stop_reason: "END" });
  });

  it("a paid answer's tool call and output limit, through the chain: tool_use blocks the SDK assembles, stop_reason tool_use / max_tokens", async () => {
    const tools = [{ name: "get_weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } }];
    const params = { model: AN_MODEL, max_tokens: 50, tools, messages: [{ role: "user" as const, content: "weather?" }] };
    upstream.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const streamed = await client.messages.stream(params).finalMessage();
    expect(streamed.content).toEqual([{ type: "tool_use", id: expect.stringMatching(/^toolu_/), name: "get_weather", input: { city: "Paris" } }]);
    expect(streamed).toMatchObject({ stop_reason: "tool_use", stop_sequence: null });
    upstream.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const whole = await client.messages.create(params);
    expect(whole.content).toEqual([{ type: "tool_use", id: expect.stringMatching(/^toolu_/), name: "get_weather", input: { city: "Paris" } }]);
    expect(whole.stop_reason).toBe("tool_use");
    upstream.enqueue({ kind: "ok", text: "a b c d e f" });
    const cut = await client.messages.stream({ ...params, max_tokens: 3, tools: undefined }).finalMessage();
    expect(cut).toMatchObject({ content: [{ type: "text", text: "a b c " }], stop_reason: "max_tokens", usage: { output_tokens: 3 } });
  });

  it("errors leave in Anthropic's shape with the SDK's error classes", async () => {
    await expect(client.messages.create({ model: "no-such-model", max_tokens: 5, messages: [{ role: "user", content: "x" }] })).rejects.toBeInstanceOf(Anthropic.NotFoundError);
    // A message that already names its field is not prefixed with it again ("model: model 'x' …").
    const unknown = await post({ model: "no-such-model" });
    expect(await unknown.json()).toMatchObject({ error: { type: "not_found_error", message: expect.stringMatching(/^model 'no-such-model' is not served/) } });
    const missing = await post({ max_tokens: undefined });
    expect(missing.status).toBe(400);
    expect(await missing.json()).toMatchObject({ type: "error", error: { type: "invalid_request_error", message: expect.stringMatching(/^max_tokens/) } });
  });

  it("no ready backend is Anthropic's overloaded_error with its status, 529, and Retry-After", async () => {
    const warming = await new SimWorker({ id: "msg-warming", models: ["cold-msgs"], registry: fx.registry, state: "warming" }).start();
    try {
      await waitFor(() => fx.router.deps.directory.all().length === 2, { what: "warming worker seen" });
      const r = await post({ model: "cold-msgs" });
      expect(r.status).toBe(529);
      expect(r.headers.get("retry-after")).toMatch(/^\d+$/);
      expect(await r.json()).toMatchObject({ type: "error", error: { type: "overloaded_error" } });
      // Its SDK retries it as any 5xx (with Retry-After), then raises its server error class.
      await expect(client.messages.create({ model: "cold-msgs", max_tokens: 5, messages: [{ role: "user", content: "x" }] })).rejects.toMatchObject({ status: 529 });
    } finally {
      await warming.stop();
    }
  });

  it("a paid provider's overload and rate limit reach the client as such, not as a broken upstream: 529 overloaded_error, 429 with the provider's Retry-After", async () => {
    upstream.enqueue({ kind: "status", status: 529 });
    const overloaded = await post({ model: AN_MODEL });
    expect(overloaded.status).toBe(529);
    expect(overloaded.headers.get("retry-after")).toBe("1");
    expect(await overloaded.json()).toMatchObject({ type: "error", error: { type: "overloaded_error", message: expect.stringMatching(/anthropic answered 529/) } });
    // Streamed, its `event: error` before the first token is the same answer (nothing reached the client yet).
    upstream.enqueue({ kind: "midstream_error", afterTokens: 0 });
    const streamed = await post({ model: AN_MODEL, stream: true });
    expect(streamed.status).toBe(529);
    expect(await streamed.json()).toMatchObject({ error: { type: "overloaded_error" } });
    upstream.enqueue({ kind: "status", status: 429, retryAfter: "17" });
    const limited = await post({ model: AN_MODEL });
    expect(limited.status).toBe(429);
    expect(limited.headers.get("retry-after")).toBe("17");
    expect(await limited.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
    // Chat clients get OpenAI's statuses for the same: 503 and 429, with codes that say whose it was.
    const chat = () =>
      fetch(`${fx.router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: AN_MODEL, max_tokens: 5, messages: [{ role: "user", content: "x" }] }),
      });
    upstream.enqueue({ kind: "status", status: 529 });
    const busy = await chat();
    expect(busy.status).toBe(503);
    expect(await busy.json()).toMatchObject({ error: { code: "upstream_overloaded", type: "service_unavailable" } });
    upstream.enqueue({ kind: "status", status: 429, retryAfter: "30" });
    const limitedChat = await chat();
    expect(limitedChat.status).toBe(429);
    expect(limitedChat.headers.get("retry-after")).toBe("30");
    expect(await limitedChat.json()).toMatchObject({ error: { code: "upstream_rate_limited", type: "rate_limit_error" } });
    // Anything else the provider fails with is still a broken upstream.
    upstream.enqueue({ kind: "status", status: 500 });
    const broken = await chat();
    expect(broken.status).toBe(502);
    expect(await broken.json()).toMatchObject({ error: { code: "bad_upstream" } });
  });

  it("a stream that breaks after its first byte ends with one `event: error` the SDK throws", async () => {
    worker.enqueue({ kind: "midstream_error", afterTokens: 2, message: "engine fell over" });
    const stream = client.messages.stream({ model: "sim-chat", max_tokens: 50, messages: [{ role: "user", content: "break" }] });
    await expect(stream.finalMessage()).rejects.toThrow(/engine fell over/);
    worker.enqueue({ kind: "midstream_error", afterTokens: 2, message: "engine fell over" });
    const text = await (await post({ stream: true })).text();
    expect(text.match(/event: error/g)).toHaveLength(1);
    expect(text).not.toContain("message_stop");
  });

  it("rate limits apply as on chat: OpenAI's x-ratelimit-* headers, then a 429 in Anthropic's shape with Retry-After", async () => {
    const t = await createTenant(fx.db.db, "limited-msgs");
    if (!t.ok) throw new Error("tenant");
    const limitedKey = (await createKey(fx.db.db, t.tenant.id)).key;
    await setRateLimit(fx.db.db, { tenantId: t.tenant.id, requestsPerMinute: 2 });
    const whole = await post({}, { "x-api-key": limitedKey });
    expect(whole.status).toBe(200);
    expect(whole.headers.get("x-ratelimit-limit-requests")).toBe("2");
    expect(whole.headers.get("x-ratelimit-remaining-requests")).toBe("1");
    const streamed = await post({ stream: true }, { "x-api-key": limitedKey });
    expect(streamed.status).toBe(200);
    expect(streamed.headers.get("x-ratelimit-remaining-requests")).toBe("0");
    await streamed.text();
    const over = await post({}, { "x-api-key": limitedKey });
    expect(over.status).toBe(429);
    expect(over.headers.get("retry-after")).toMatch(/^\d+$/);
    expect(await over.json()).toMatchObject({ type: "error", error: { type: "rate_limit_error" } });
  });
});
