// End to end: OpenAI's Responses API and Anthropic's Messages API, each
// from its official SDK, on two router processes that share one Redis and one
// Postgres, in front of a real worker agent running the real SmolLM2. A
// response made on one router is continued with previous_response_id on the
// other, every request lands on the ledger, and count_tokens (and the
// Responses input_tokens count) gives the prompt tokens a message (a
// response) of the same request runs.
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAgent, type AgentHandle } from "@switchyard/agent";
import { createKey, createTenant } from "@switchyard/db";
import { RedisRegistryStore } from "@switchyard/state";
import { createTestDb, createTestRedis, REDIS_URL, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { engineBinary, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";

let db: TestDb;
let redis: TestRedis;
let agent: AgentHandle;
let routers: RouterProc[] = [];
let key: string;
let tenantId: number;
const requestIds: string[] = [];

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  const t = await createTenant(db.db, "translated");
  if (!t.ok) throw new Error("tenant");
  tenantId = t.tenant.id;
  key = (await createKey(db.db, tenantId)).key;
  agent = await startAgent({
    registry: new RedisRegistryStore(redis.redis, redis.prefix),
    models: [LLM],
    token: WORKER_TOKEN,
    device: "cpu",
    engineBinary: engineBinary(),
    workerId: "e2e-translated",
    maxBatch: 4,
    maxSeqLen: 1024,
    log: () => {},
  });
  await agent.supervisor.whenReady();
  const env = { DATABASE_URL: db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix, SWITCHYARD_WORKER_TOKEN: WORKER_TOKEN, SWITCHYARD_REGISTRY__POLL_MS: "50" };
  routers = await Promise.all([0, 1].map((i) => spawnRouter(env, `router-${i}`)));
  // Both routers see the worker.
  for (const r of routers) {
    await waitFor(
      async () => {
        const res = await fetch(`${r.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
        return res.ok && ((await res.json()) as { data: Array<{ id: string }> }).data.some((m) => m.id === LLM);
      },
      { timeoutMs: 30_000, what: "worker listed" },
    );
  }
}, 240_000);

afterAll(async () => {
  await Promise.all(routers.map((r) => r.stop()));
  await agent?.stop();
  await db?.drop();
  await redis?.cleanup();
});

const openai = (i: number) => new OpenAI({ apiKey: key, baseURL: `${routers[i]!.url}/v1`, maxRetries: 0 });
const anthropic = (i: number) => new Anthropic({ apiKey: key, baseURL: routers[i]!.url, maxRetries: 0 });

describe("the translated APIs on the real engine", () => {
  it("responses.create on one router, continued (streamed) with previous_response_id on the other", async () => {
    const { data: first, response } = await openai(0)
      .responses.create({ model: LLM, input: "My name is Ada. Say hello to me.", instructions: "You are a helpful assistant.", temperature: 0, max_output_tokens: 24 })
      .withResponse();
    requestIds.push(response.headers.get("x-request-id")!);
    expect(first.status === "completed" || first.status === "incomplete").toBe(true);
    expect(first.output_text.length).toBeGreaterThan(0);
    expect(first.usage!.output_tokens).toBeGreaterThan(0);
    expect(first.usage!.output_tokens).toBeLessThanOrEqual(24);

    const stream = await openai(1).responses.create({ model: LLM, input: "What is my name?", previous_response_id: first.id, temperature: 0, max_output_tokens: 16, stream: true }).withResponse();
    requestIds.push(stream.response.headers.get("x-request-id")!);
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const ev of stream.data) events.push(ev);
    expect(events[0]!.type).toBe("response.created");
    const last = events.at(-1)!;
    expect(["response.completed", "response.incomplete"]).toContain(last.type);
    const second = (last as OpenAI.Responses.ResponseCompletedEvent).response;
    expect(second.previous_response_id).toBe(first.id);
    const text = events.filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === "response.output_text.delta").map((e) => e.delta).join("");
    expect(text.length).toBeGreaterThan(0);
    expect(second.output_text ?? (second.output[0] as OpenAI.Responses.ResponseOutputMessage).content.map((c) => (c.type === "output_text" ? c.text : "")).join("")).toBe(text);
    // The engine saw the whole conversation: the first turn's prompt and answer, then this input.
    expect(second.usage!.input_tokens).toBeGreaterThan(first.usage!.input_tokens + first.usage!.output_tokens);

    // Either router retrieves it.
    expect((await openai(0).responses.retrieve(second.id)).id).toBe(second.id);
  }, 120_000);

  it("an output limit that cuts the answer is incomplete, streamed and not", async () => {
    const input = "Write a long story about a dragon who learns to bake bread.";
    const whole = await openai(0).responses.create({ model: LLM, input, temperature: 0, max_output_tokens: 4 });
    expect(whole.status).toBe("incomplete");
    expect(whole.incomplete_details).toEqual({ reason: "max_output_tokens" });
    expect(whole.usage!.output_tokens).toBe(4);
    const stream = await openai(1).responses.create({ model: LLM, input, temperature: 0, max_output_tokens: 4, stream: true });
    const types: string[] = [];
    for await (const ev of stream) types.push(ev.type);
    expect(types.at(-1)).toBe("response.incomplete");
  }, 120_000);

  it("@anthropic-ai/sdk messages.create and messages.stream, unchanged, on the worker", async () => {
    const { data: msg, response } = await anthropic(1)
      .messages.create({ model: LLM, max_tokens: 6, system: "You are terse.", messages: [{ role: "user", content: "Write a long poem about the sea." }] })
      .withResponse();
    requestIds.push(response.headers.get("x-request-id")!);
    expect(msg.type).toBe("message");
    expect(msg.content[0]!.type).toBe("text");
    expect((msg.content[0] as Anthropic.TextBlock).text.length).toBeGreaterThan(0);
    expect(msg.stop_reason).toBe("max_tokens");
    expect(msg.usage.output_tokens).toBe(6);
    expect(msg.usage.input_tokens).toBeGreaterThan(5);

    const stream = anthropic(0).messages.stream({ model: LLM, max_tokens: 32, messages: [{ role: "user", content: "Say hi." }] });
    let text = "";
    stream.on("text", (d) => (text += d));
    const final = await stream.finalMessage();
    requestIds.push((await stream.withResponse()).response.headers.get("x-request-id")!);
    expect(text.length).toBeGreaterThan(0);
    expect(final.content).toEqual([{ type: "text", text }]);
    expect(["end_turn", "max_tokens"]).toContain(final.stop_reason);
    expect(final.usage.output_tokens).toBeGreaterThan(0);
  }, 120_000);

  it("@anthropic-ai/sdk messages.countTokens: the engine's exact count, equal to the prompt a message of the same request runs, tools included", async () => {
    const tools = [{ name: "get_weather", description: "The current weather in a city.", input_schema: { type: "object" as const, properties: { city: { type: "string" } }, required: ["city"] } }];
    const prompts: Array<Omit<Anthropic.MessageCountTokensParams, "model">> = [
      { messages: [{ role: "user", content: "Write a long poem about the sea." }] },
      { system: "You are terse.", messages: [{ role: "user", content: "Say hi." }, { role: "assistant", content: "Hi." }, { role: "user", content: "Again, in French — s'il vous plaît 🙂" }] },
      { tools, messages: [{ role: "user", content: "What is the weather in Paris?" }] },
      {
        tools,
        tool_choice: { type: "auto" },
        messages: [
          { role: "user", content: "What is the weather in Paris?" },
          { role: "assistant", content: [{ type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } }] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny, 21 °C" }] },
        ],
      },
    ];
    const counts: number[] = [];
    for (const [i, p] of prompts.entries()) {
      const { data, response } = await anthropic(i % 2).messages.countTokens({ model: LLM, ...p }).withResponse();
      expect(response.headers.get("switchyard-token-count"), `prompt ${i}`).toBe("exact");
      expect(response.headers.get("x-switchyard-backend")).toBe("worker:e2e-translated");
      // The engine's prompt for the same request, run with max_tokens 1: its whole prompt, cache reads and writes included.
      const msg = await anthropic((i + 1) % 2).messages.create({ model: LLM, max_tokens: 1, temperature: 0, ...p } as Anthropic.MessageCreateParamsNonStreaming);
      const u = msg.usage;
      expect(data.input_tokens, `prompt ${i}`).toBe(u.input_tokens + (u.cache_read_input_tokens ?? 0) + (u.cache_creation_input_tokens ?? 0));
      counts.push(data.input_tokens);
    }
    // The tools are in the prompt the template renders; with tool_choice none the model is not shown them.
    const bare = (await anthropic(0).messages.countTokens({ model: LLM, messages: [{ role: "user", content: "What is the weather in Paris?" }] })).input_tokens;
    expect(counts[2]).toBeGreaterThan(bare);
    expect((await anthropic(1).messages.countTokens({ model: LLM, tools, tool_choice: { type: "none" }, messages: [{ role: "user", content: "What is the weather in Paris?" }] })).input_tokens).toBe(bare);

    // The worker's own route: the routers' credential, and what a generation would refuse refused alike.
    const tokenize = (body: unknown, token = WORKER_TOKEN) =>
      fetch(`${agent.url}/v1/tokenize`, { method: "POST", headers: { authorization: `Bearer ${token}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    const direct = await tokenize({ model: LLM, messages: [{ role: "user", content: "What is the weather in Paris?" }] });
    expect(await direct.json()).toEqual({ count: bare, max_model_len: 1024 });
    expect((await tokenize({ model: LLM, messages: [{ role: "user", content: "x" }] }, "wrong-token")).status).toBe(401);
    const image = await tokenize({ model: LLM, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "https://example.com/a.png" } }] }] });
    expect(image.status).toBe(400);
    expect(await image.json()).toMatchObject({ error: { param: "messages[0].content[0]" } });
    expect(await (await tokenize({ model: LLM, messages: [{ role: "user", content: "x" }], max_tokens: 5 })).json()).toMatchObject({ error: { param: "max_tokens" } });
    expect((await tokenize({ model: "all-minilm-l6-v2", messages: [{ role: "user", content: "x" }] })).status).toBe(404);
  }, 120_000);

  it("openai responses.inputTokens.count: the engine's exact count, equal to the input_tokens of a response of the same request, a continuation included", async () => {
    const tools = [{ type: "function" as const, name: "get_weather", description: "The current weather in a city.", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, strict: false }];
    const requests: Array<Omit<OpenAI.Responses.InputTokenCountParams, "model">> = [
      { input: "Write a long poem about the sea." },
      {
        instructions: "You are terse.",
        input: [
          { role: "user", content: "Say hi." },
          { role: "assistant", content: "Hi." },
          { role: "user", content: [{ type: "input_text", text: "Again, in French — s'il vous plaît 🙂" }] },
        ],
      },
      {
        tools,
        tool_choice: "auto",
        input: [
          { role: "user", content: "What is the weather in Paris?" },
          { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
          { type: "function_call_output", call_id: "call_1", output: "sunny, 21 °C" },
        ],
      },
    ];
    const created = (i: number, p: Omit<OpenAI.Responses.InputTokenCountParams, "model">, extra: { previous_response_id?: string } = {}) =>
      openai(i).responses.create({ model: LLM, max_output_tokens: 1, temperature: 0, ...p, ...extra } as OpenAI.Responses.ResponseCreateParamsNonStreaming);
    for (const [i, p] of requests.entries()) {
      const { data, response } = await openai(i % 2).responses.inputTokens.count({ model: LLM, ...p }).withResponse();
      expect(data.object).toBe("response.input_tokens");
      expect(response.headers.get("switchyard-token-count"), `request ${i}`).toBe("exact");
      expect(response.headers.get("x-switchyard-backend")).toBe("worker:e2e-translated");
      // The engine's prompt for the same request, run with max_output_tokens 1.
      const res = await created((i + 1) % 2, p);
      expect(data.input_tokens, `request ${i}`).toBe(res.usage!.input_tokens);
    }
    // A continuation counts the stored conversation first, on whichever router: the same as the response that continues it.
    const first = await created(0, { instructions: "You are a helpful assistant.", input: "My name is Ada." });
    const next = { input: "What is my name?" };
    const alone = (await openai(1).responses.inputTokens.count({ model: LLM, ...next })).input_tokens;
    const continued = (await openai(1).responses.inputTokens.count({ model: LLM, ...next, previous_response_id: first.id })).input_tokens;
    expect(continued).toBeGreaterThan(alone);
    expect(continued).toBe((await created(0, next, { previous_response_id: first.id })).usage!.input_tokens);
  }, 120_000);

  it("every one of those requests has its ledger row, on the worker, with the engine's token counts", async () => {
    const rows = await waitFor(
      async () => {
        const r = await db.sql`select request_id, backend, worker, status, prompt_tokens, completion_tokens from spend_ledger where request_id = any(${requestIds})`;
        return r.length === requestIds.length ? r : undefined;
      },
      { timeoutMs: 30_000, what: "ledger rows" },
    );
    for (const r of rows) {
      expect(r).toMatchObject({ backend: "worker", worker: "e2e-translated", status: "ok" });
      expect(r.prompt_tokens).toBeGreaterThan(0);
      expect(r.completion_tokens).toBeGreaterThan(0);
    }
  }, 60_000);
});
