// POST /v1/responses through a real router (real Redis response store,
// budgets and ledger stream, real Postgres keys and ledger) in front of a sim
// worker (and the Anthropic fake, for function calls and the output limit),
// driven by the official `openai` client: whole and streamed answers,
// continuation with previous_response_id, what a chat request receives for
// tools and text.format, retrieval and deletion, and the 404 for another
// tenant's response.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let worker: SimWorker;
let client: OpenAI;
let otherTenant: OpenAI;
// A paid backend whose fake answers tool calls and honours the output limit (the sim worker does neither).
let upstream: FakeAnthropic;
const AN_MODEL = "claude-3-5-haiku-latest";

beforeAll(async () => {
  // A small conversation bound, so a test can pass it.
  upstream = await new FakeAnthropic("sk-ant-test").start();
  fx = await startTestRouter({ "responses.maxConversationBytes": 4000, "providers.anthropic": { apiKey: "sk-ant-test", baseUrl: upstream.url }, "billing.refreshMs": 100 });
  await setPrice(fx.db.db, { backend: "anthropic", model: AN_MODEL, inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100n });
  worker = await new SimWorker({ id: "resp-sim", models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 4 } }).start();
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
  const t = await createTenant(fx.db.db, "other-co");
  if (!t.ok) throw new Error("tenant");
  otherTenant = new OpenAI({ apiKey: (await createKey(fx.db.db, t.tenant.id)).key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
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

const sentMessages = () => worker.lastBody!.messages as Array<{ role: string; content: unknown; tool_calls?: unknown }>;

describe("POST /v1/responses", () => {
  it("answers a whole response in OpenAI's shape, and its ledger row lands", async () => {
    const { data: res, response } = await client.responses.create({ model: "sim-chat", input: "hello there", instructions: "be brief", max_output_tokens: 50 }).withResponse();
    expect(res.id).toMatch(/^resp_[0-9a-f]{32}$/);
    expect(res.object).toBe("response");
    expect(res.status).toBe("completed");
    expect(res.output_text).toBe("tok0 tok1 tok2 tok3 ");
    expect(res.output).toHaveLength(1);
    expect(res.output[0]).toMatchObject({ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "tok0 tok1 tok2 tok3 ", annotations: [] }] });
    expect(res.usage).toMatchObject({ input_tokens: 7, output_tokens: 4, total_tokens: 11, input_tokens_details: { cached_tokens: 0 }, output_tokens_details: { reasoning_tokens: 0 } });
    expect(res).toMatchObject({ model: "sim-chat", instructions: "be brief", max_output_tokens: 50, previous_response_id: null, store: true, tools: [], tool_choice: "auto" });
    // What the chat path ran: instructions as the system message, the output limit as max_tokens.
    expect(sentMessages()).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "hello there" },
    ]);
    expect(worker.lastBody!.max_tokens).toBe(50);
    const rows = await ledgerRows(response.headers.get("x-request-id")!);
    expect(rows).toHaveLength(1);
    expect(rows[0]).toMatchObject({ tenant_id: String(fx.tenantId), backend: "worker", worker: "resp-sim", model: "sim-chat", prompt_tokens: 7, completion_tokens: 4, status: "ok" });
  });

  it("streams OpenAI's typed events in order, and the SDK assembles the final response", async () => {
    const stream = await client.responses.create({ model: "sim-chat", input: [{ role: "user", content: [{ type: "input_text", text: "stream please" }] }], stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const ev of stream) events.push(ev);
    const types = events.map((e) => e.type);
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const deltas = events.filter((e): e is OpenAI.Responses.ResponseTextDeltaEvent => e.type === "response.output_text.delta").map((e) => e.delta);
    expect(deltas).toEqual(["tok0 ", "tok1 ", "tok2 ", "tok3 "]);
    const created = events[0] as OpenAI.Responses.ResponseCreatedEvent;
    const completed = events.at(-1) as OpenAI.Responses.ResponseCompletedEvent;
    expect(created.response.status).toBe("in_progress");
    expect(completed.response.id).toBe(created.response.id);
    expect(completed.response.output[0]).toMatchObject({ type: "message", status: "completed", content: [{ type: "output_text", text: "tok0 tok1 tok2 tok3 " }] });
    expect(completed.response.usage).toMatchObject({ input_tokens: 7, output_tokens: 4 });

    // The SDK's own stream helper builds the same response from the events.
    const helper = client.responses.stream({ model: "sim-chat", input: "again" });
    let text = "";
    helper.on("response.output_text.delta", (e) => (text += e.delta));
    const final = await helper.finalResponse();
    expect(text).toBe("tok0 tok1 tok2 tok3 ");
    expect(final.output_text).toBe("tok0 tok1 tok2 tok3 ");
    expect(final.status).toBe("completed");
  });

  it("a streamed response's ledger row lands with its usage", async () => {
    const res = await fetch(`${fx.router.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-chat", input: "count", stream: true }),
    });
    expect(res.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await res.text();
    expect(text).toContain("event: response.completed\ndata: ");
    expect(text).not.toContain("[DONE]");
    const rows = await ledgerRows(res.headers.get("x-request-id")!);
    expect(rows[0]).toMatchObject({ status: "ok", prompt_tokens: 7, completion_tokens: 4 });
    expect(rows[0]!.ttft_ms).not.toBeNull();
  });

  it("continues a stored response: its conversation goes first, its instructions do not", async () => {
    const first = await client.responses.create({ model: "sim-chat", input: "my name is Ada", instructions: "first instructions" });
    const second = await client.responses.create({ model: "sim-chat", input: "what is my name?", previous_response_id: first.id, instructions: "second instructions" });
    expect(second.previous_response_id).toBe(first.id);
    expect(sentMessages()).toEqual([
      { role: "system", content: "second instructions" },
      { role: "user", content: "my name is Ada" },
      { role: "assistant", content: "tok0 tok1 tok2 tok3 " },
      { role: "user", content: "what is my name?" },
    ]);
    // A chain: the third sees both turns.
    await client.responses.create({ model: "sim-chat", input: "and again?", previous_response_id: second.id });
    expect(sentMessages().map((m) => m.role)).toEqual(["user", "assistant", "user", "assistant", "user"]);
  });

  it("another tenant's response id is a 404, as are unknown and malformed ones", async () => {
    const mine = await client.responses.create({ model: "sim-chat", input: "secret" });
    const theirs = otherTenant.responses.create({ model: "sim-chat", input: "continue", previous_response_id: mine.id });
    await expect(theirs).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(theirs).rejects.toMatchObject({ status: 404, param: "previous_response_id" });
    await expect(otherTenant.responses.retrieve(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(otherTenant.responses.delete(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.create({ model: "sim-chat", input: "x", previous_response_id: `resp_${"0".repeat(32)}` })).rejects.toMatchObject({ status: 404 });
    await expect(client.responses.create({ model: "sim-chat", input: "x", previous_response_id: "../../etc" })).rejects.toMatchObject({ status: 404 });
    // The owner still has it.
    expect((await client.responses.retrieve(mine.id)).output_text).toBe("tok0 tok1 tok2 tok3 ");
  });

  it("retrieves and deletes a stored response; store: false keeps nothing", async () => {
    const kept = await client.responses.create({ model: "sim-chat", input: "keep me", metadata: { topic: "tests" } });
    const got = await client.responses.retrieve(kept.id);
    expect(got).toMatchObject({ id: kept.id, status: "completed", metadata: { topic: "tests" } });
    expect(got.output_text).toBe(kept.output_text);
    await client.responses.delete(kept.id);
    await expect(client.responses.retrieve(kept.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    const unstored = await client.responses.create({ model: "sim-chat", input: "forget me", store: false });
    expect((unstored as unknown as { store: boolean }).store).toBe(false);
    await expect(client.responses.retrieve(unstored.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(client.responses.create({ model: "sim-chat", input: "x", previous_response_id: unstored.id })).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("passes tools, tool_choice, text.format and function call items to the chat request", async () => {
    const schema = { type: "object", properties: { city: { type: "string" } }, required: ["city"], additionalProperties: false };
    const res = await client.responses.create({
      model: "sim-chat",
      input: [
        { role: "user", content: "weather in Paris?" },
        { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
        { type: "function_call_output", call_id: "call_1", output: "sunny" },
      ],
      tools: [{ type: "function", name: "get_weather", description: "the weather", parameters: schema, strict: true }],
      tool_choice: { type: "function", name: "get_weather" },
      parallel_tool_calls: false,
      text: { format: { type: "json_schema", name: "answer", schema, strict: true } },
      temperature: 0.2,
      top_p: 0.9,
    });
    expect(res.status).toBe("completed");
    expect(res.text?.format).toMatchObject({ type: "json_schema", name: "answer" });
    const body = worker.lastBody!;
    expect(body.tools).toEqual([{ type: "function", function: { name: "get_weather", description: "the weather", parameters: schema, strict: true } }]);
    expect(body.tool_choice).toEqual({ type: "function", function: { name: "get_weather" } });
    expect(body.parallel_tool_calls).toBe(false);
    expect(body.response_format).toEqual({ type: "json_schema", json_schema: { name: "answer", schema, strict: true } });
    expect(body).toMatchObject({ temperature: 0.2, top_p: 0.9 });
    expect(sentMessages()).toEqual([
      { role: "user", content: "weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] },
      { role: "tool", tool_call_id: "call_1", content: "sunny" },
    ]);
  });

  it("refuses what the chat path cannot run, naming the field", async () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ tools: [{ type: "web_search" }] }, "tools[0].type"],
      [{ background: true }, "background"],
      [{ input: [{ type: "item_reference", id: "x" }] }, "input[0].type"],
      [{ input: [{ role: "user", content: [{ type: "input_file", file_id: "f" }] }] }, "input[0].content[0].type"],
      [{ text: { format: { type: "json_schema", schema: {} } } }, "text.format"],
      [{ truncation: "auto" }, "truncation"],
      // A value OpenAI does not know (here a typo of the logprobs one) is refused, not ignored.
      [{ include: ["message.output_text.logprob"] }, "include[0]"],
      // A key create does not take is named, not dropped by the translation to chat.
      [{ max_tokens: 5 }, "max_tokens"],
      [{ personality: "friendly" }, "personality"],
      [{ moderation: { mode: "strict" } }, "moderation"],
    ];
    for (const [extra, param] of cases) {
      const res = await fetch(`${fx.router.url}/v1/responses`, {
        method: "POST",
        headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "sim-chat", input: "hi", ...extra }),
      });
      expect(res.status, param).toBe(400);
      const body = (await res.json()) as { error: { param: string; type: string } };
      expect(body.error.param.startsWith(param), `${param} vs ${body.error.param}`).toBe(true);
      expect(body.error.type).toBe("invalid_request_error");
    }
    // OpenAI's prompt-cache hints are taken (inert, as prompt_cache_key).
    const hinted = await fetch(`${fx.router.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-chat", input: "hi", store: false, prompt_cache_key: "k", prompt_cache_retention: "24h" }),
    });
    expect(hinted.status, await hinted.clone().text()).toBe(200);
  });

  it("text.verbosity is applied, not only echoed: a worker refuses low/high naming it; medium and null ask nothing", async () => {
    const before = worker.lastBody;
    for (const verbosity of ["low", "high"] as const) {
      await expect(client.responses.create({ model: "sim-chat", input: "hi", store: false, text: { verbosity } })).rejects.toMatchObject({ status: 400, param: "text.verbosity" });
    }
    expect(worker.lastBody, "nothing reached the worker").toBe(before);
    for (const verbosity of ["medium", null] as const) {
      const res = await client.responses.create({ model: "sim-chat", input: "hi", store: false, text: { verbosity } });
      expect(res.status).toBe("completed");
      expect(res.text?.verbosity).toBe("medium");
      expect(worker.lastBody, "no chat verbosity sent").not.toHaveProperty("verbosity");
    }
  });

  it("a backend that reports no usage still answers a usage object, whole and streamed", async () => {
    // OpenAI's finished responses always carry usage, and strict clients
    // validate it: the Vercel AI SDK's schema takes `usage` as optional (not
    // null) on a whole response and requires it on response.completed.
    const zero = { input_tokens: 0, input_tokens_details: { cached_tokens: 0 }, output_tokens: 0, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 0 };
    worker.enqueue({ kind: "no_usage" });
    const whole = await client.responses.create({ model: "sim-chat", input: "quiet" });
    expect(whole.usage).toMatchObject(zero);
    worker.enqueue({ kind: "no_usage" });
    const stream = await client.responses.create({ model: "sim-chat", input: "quiet", stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const ev of stream) events.push(ev);
    const last = events.at(-1)!;
    expect(last.type).toBe("response.completed");
    if (last.type === "response.completed") expect(last.response.usage).toMatchObject(zero);
    // Stored as answered.
    expect((await client.responses.retrieve(whole.id)).usage).toMatchObject(zero);
  });

  it("a function call streams as a function_call item the SDK assembles, and continues with its output", async () => {
    const tools: OpenAI.Responses.Tool[] = [{ type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }];
    upstream.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const helper = client.responses.stream({ model: AN_MODEL, input: "weather in Paris?", tools });
    const types: string[] = [];
    helper.on("event", (e) => types.push(e.type));
    const final = await helper.finalResponse();
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      ...types.filter((t) => t === "response.function_call_arguments.delta"),
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(final.status).toBe("completed");
    expect(final.output).toMatchObject([{ id: expect.stringMatching(/^fc_/), type: "function_call", status: "completed", call_id: expect.stringMatching(/^toolu_/), name: "get_weather", arguments: '{"city":"Paris"}' }]);
    const call = final.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    upstream.enqueue({ kind: "ok", text: "sunny in Paris" });
    const next = await client.responses.create({ model: AN_MODEL, previous_response_id: final.id, input: [{ type: "function_call_output", call_id: call.call_id, output: "sunny" }], tools });
    expect(next.output_text).toBe("sunny in Paris");
    // What reached Anthropic: the stored call, then its result, under the id the client answered.
    const sent = upstream.requests.at(-1)!.body as { messages: Array<{ role: string; content: string | Array<{ type: string; id?: string; tool_use_id?: string }> }> };
    expect(sent.messages.map((m) => [m.role, typeof m.content === "string" ? "text" : m.content.map((b) => b.type).join()])).toEqual([
      ["user", "text"],
      ["assistant", "tool_use"],
      ["user", "tool_result"],
    ]);
    expect(sent.messages[1]!.content[0]).toMatchObject({ id: call.call_id });
    expect(sent.messages[2]!.content[0]).toMatchObject({ tool_use_id: call.call_id });
  });

  it("an answer max_output_tokens cut is incomplete, whole and streamed (response.incomplete)", async () => {
    upstream.enqueue({ kind: "ok", text: "a b c d e f" });
    const whole = await client.responses.create({ model: AN_MODEL, input: "long", max_output_tokens: 3 });
    expect(whole).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" }, output: [{ type: "message", status: "incomplete" }] });
    expect(whole.output_text).toBe("a b c ");
    upstream.enqueue({ kind: "ok", text: "a b c d e f" });
    const stream = await client.responses.create({ model: AN_MODEL, input: "long", max_output_tokens: 3, stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const ev of stream) events.push(ev);
    const last = events.at(-1)!;
    expect(last.type).toBe("response.incomplete");
    if (last.type === "response.incomplete") {
      expect(last.response).toMatchObject({ status: "incomplete", incomplete_details: { reason: "max_output_tokens" }, usage: { output_tokens: 3 } });
    }
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
  });

  it("a stream that breaks after its first byte ends with response.failed", async () => {
    worker.enqueue({ kind: "midstream_error", afterTokens: 2, message: "engine fell over" });
    const stream = await client.responses.create({ model: "sim-chat", input: "break", stream: true });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    for await (const ev of stream) events.push(ev);
    const last = events.at(-1)!;
    expect(last.type).toBe("response.failed");
    if (last.type === "response.failed") {
      expect(last.response.status).toBe("failed");
      expect(last.response.error?.code).toBe("server_error");
      expect(last.response.error?.message).toContain("engine fell over");
    }
    expect(events.filter((e) => e.type === "response.completed")).toHaveLength(0);
    expect(events.filter((e) => e.type === "response.output_text.delta").length).toBeGreaterThan(0);
  });

  it("a client that leaves mid-stream aborts the upstream; the ledger says so", async () => {
    worker.enqueue({ kind: "slow", interTokenMs: 50, completionTokens: 200 });
    const ac = new AbortController();
    const res = await fetch(`${fx.router.url}/v1/responses`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "sim-chat", input: "long", stream: true }),
      signal: ac.signal,
    });
    const aborted = worker.nextAbort();
    await res.body!.getReader().read();
    ac.abort();
    await aborted;
    const rows = await ledgerRows(res.headers.get("x-request-id")!);
    expect(rows[0]).toMatchObject({ status: "client_cancelled", worker: "resp-sim" });
  });

  it("a conversation past responses.maxConversationBytes is a 400: in the input, or grown through continuations", async () => {
    await expect(client.responses.create({ model: "sim-chat", input: "x".repeat(5000) })).rejects.toMatchObject({ status: 400, param: "input" });
    let prev = await client.responses.create({ model: "sim-chat", input: "y".repeat(1500) });
    prev = await client.responses.create({ model: "sim-chat", input: "z".repeat(1500), previous_response_id: prev.id });
    await expect(client.responses.create({ model: "sim-chat", input: "w".repeat(1500), previous_response_id: prev.id })).rejects.toMatchObject({ status: 400, param: "previous_response_id" });
  });

  it("an answer that takes the conversation past the bound is kept for GET, not stored twice, and not continued", async () => {
    const answer = Array.from({ length: 600 }, (_, i) => `w${i}`).join(" "); // ~3.4 KB of words
    worker.enqueue({ kind: "ok", text: answer });
    const long = await client.responses.create({ model: "sim-chat", input: "y".repeat(1500) });
    expect(long.output_text).toBe(answer);
    expect((await client.responses.retrieve(long.id)).output_text).toBe(answer);
    // The stored record holds the answer once (in the response), not again as the conversation.
    const [key] = await fx.redis.redis.keys(`${fx.redis.prefix}response:*${long.id}*`);
    const stored = JSON.parse((await fx.redis.redis.get(key!))!) as { messages: unknown };
    expect(stored.messages).toBeNull();
    await expect(client.responses.create({ model: "sim-chat", input: "more", previous_response_id: long.id })).rejects.toMatchObject({ status: 400, param: "previous_response_id" });
  });
});

describe("GET /v1/responses/{id}/input_items", () => {
  type Item = OpenAI.Responses.ResponseItem;
  const ids = (items: Item[]) => items.map((i) => i.id);
  const collect = async (pages: AsyncIterable<Item>) => {
    const out: Item[] = [];
    for await (const item of pages) out.push(item);
    return out;
  };
  /** The list object itself (the SDK's page keeps first_id and last_id to itself): the same request, through the same client. */
  const listBody = (id: string, query: OpenAI.Responses.InputItemListParams = {}) => client.get<OpenAI.Responses.ResponseItemList>(`/responses/${id}/input_items`, { query });
  /** The stored record of a response, as Redis holds it. */
  const recordKey = async (id: string) => (await fx.redis.redis.keys(`${fx.redis.prefix}response:*${id}*`))[0]!;

  const input: OpenAI.Responses.ResponseInput = [
    { role: "system", content: "sys" },
    { role: "developer", content: [{ type: "input_text", text: "dev" }] },
    { role: "user", content: "weather in Paris?" },
    { type: "function_call", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
    { type: "function_call_output", call_id: "call_1", output: "sunny" },
    { role: "assistant", content: "It is sunny." },
    { type: "reasoning", id: "rs_client1", summary: [{ type: "summary_text", text: "thought" }] },
    { role: "user", content: [{ type: "input_text", text: "and " }, { type: "input_text", text: "tomorrow?" }] },
  ];

  it("lists the input items in OpenAI's item shapes, with ids, newest first by default; pages both ways with after and limit, as the SDK auto-paginates", async () => {
    const res = await client.responses.create({ model: "sim-chat", input, instructions: "not an item" });
    const asc = await listBody(res.id, { order: "asc", limit: 100 });
    expect(asc.has_more).toBe(false);
    expect(asc.data).toEqual([
      { id: expect.stringMatching(/^msg_[0-9a-f]{32}$/), type: "message", role: "system", status: "completed", content: [{ type: "input_text", text: "sys" }] },
      { id: expect.stringMatching(/^msg_/), type: "message", role: "developer", status: "completed", content: [{ type: "input_text", text: "dev" }] },
      { id: expect.stringMatching(/^msg_/), type: "message", role: "user", status: "completed", content: [{ type: "input_text", text: "weather in Paris?" }] },
      { id: expect.stringMatching(/^fc_[0-9a-f]{32}$/), type: "function_call", status: "completed", call_id: "call_1", name: "get_weather", arguments: '{"city":"Paris"}' },
      { id: expect.stringMatching(/^fco_[0-9a-f]{32}$/), type: "function_call_output", status: "completed", call_id: "call_1", output: "sunny" },
      { id: expect.stringMatching(/^msg_/), type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "It is sunny.", annotations: [] }] },
      // A client's own id is kept.
      { id: "rs_client1", type: "reasoning", summary: [{ type: "summary_text", text: "thought" }] },
      { id: expect.stringMatching(/^msg_/), type: "message", role: "user", status: "completed", content: [{ type: "input_text", text: "and " }, { type: "input_text", text: "tomorrow?" }] },
    ]);
    const all = ids(asc.data);
    expect(new Set(all).size).toBe(8);
    expect(asc.first_id).toBe(all[0]);
    expect(asc.last_id).toBe(all[7]);
    // The default: newest first, 20 at most; the same ids on every listing.
    const desc = await listBody(res.id);
    expect(ids(desc.data)).toEqual([...all].reverse());
    expect(desc).toMatchObject({ object: "list", first_id: all[7], last_id: all[0], has_more: false });
    expect(ids((await client.responses.inputItems.list(res.id)).data)).toEqual(ids(desc.data));

    // Pages of 3, by hand: after the last id of each page.
    const p1 = await listBody(res.id, { limit: 3 });
    expect(ids(p1.data)).toEqual([all[7], all[6], all[5]]);
    expect(p1).toMatchObject({ has_more: true, first_id: all[7], last_id: all[5] });
    const p2 = await listBody(res.id, { limit: 3, after: p1.last_id });
    expect(ids(p2.data)).toEqual([all[4], all[3], all[2]]);
    expect(p2.has_more).toBe(true);
    const p3 = await listBody(res.id, { limit: 3, after: p2.last_id });
    expect(ids(p3.data)).toEqual([all[1], all[0]]);
    expect(p3.has_more).toBe(false);
    // After the last item: an empty page.
    const empty = await listBody(res.id, { after: all[0] });
    expect(empty).toMatchObject({ data: [], has_more: false, first_id: null, last_id: null });
    const ascPage = await client.responses.inputItems.list(res.id, { order: "asc", limit: 2, after: all[3] });
    expect(ids(ascPage.data)).toEqual([all[4], all[5]]);
    expect(ascPage.has_more).toBe(true);
    // An exact fit has no more.
    expect((await client.responses.inputItems.list(res.id, { order: "asc", limit: 2, after: all[5] })).has_more).toBe(false);

    // The SDK's auto-pagination walks every page (limit 3: three requests), in either order.
    expect(ids(await collect(client.responses.inputItems.list(res.id, { limit: 3 })))).toEqual([...all].reverse());
    expect(ids(await collect(client.responses.inputItems.list(res.id, { limit: 1, order: "asc" })))).toEqual(all);
    // Page by page, as the SDK's page objects hand them out.
    let page = await client.responses.inputItems.list(res.id, { limit: 5, order: "asc" });
    const walked = [...ids(page.data)];
    while (page.hasNextPage()) {
      page = await page.getNextPage();
      walked.push(...ids(page.data));
    }
    expect(walked).toEqual(all);
    // include takes OpenAI's values; nothing more to include here.
    expect(ids((await client.responses.inputItems.list(res.id, { order: "asc", include: ["message.input_image.image_url", "message.output_text.logprobs"] })).data)).toEqual(all);
  });

  it("refuses a bad limit, order, after or include with a 400 naming it", async () => {
    const res = await client.responses.create({ model: "sim-chat", input: "one" });
    const cases: Array<[string, string]> = [
      ["limit=0", "limit"],
      ["limit=101", "limit"],
      ["limit=2.5", "limit"],
      ["limit=many", "limit"],
      ["order=up", "order"],
      [`after=msg_${"0".repeat(32)}`, "after"],
      ["after=", "after"],
      ["include[]=message.input_image.image_url&include[]=everything", "include[1]"],
      ["include=nope", "include[0]"],
    ];
    for (const [q, param] of cases) {
      const r = await fetch(`${fx.router.url}/v1/responses/${res.id}/input_items?${q}`, { headers: { authorization: `Bearer ${fx.key}` } });
      expect(r.status, q).toBe(400);
      const body = (await r.json()) as { error: { param: string; type: string; code: string; message: string } };
      expect(body.error, q).toMatchObject({ param, type: "invalid_request_error", code: "invalid_request" });
    }
    // Through the SDK: its BadRequestError, naming the param.
    await expect(client.responses.inputItems.list(res.id, { limit: 500 })).rejects.toMatchObject({ status: 400, param: "limit" });
    // The bounds themselves are fine.
    expect((await client.responses.inputItems.list(res.id, { limit: 100 })).data).toHaveLength(1);
    expect((await client.responses.inputItems.list(res.id, { limit: 1 })).data).toHaveLength(1);
  });

  it("another tenant's response, an unknown, malformed, deleted or store: false one is a 404", async () => {
    const mine = await client.responses.create({ model: "sim-chat", input: "secret" });
    await expect(otherTenant.responses.inputItems.list(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(otherTenant.responses.inputItems.list(mine.id)).rejects.toMatchObject({ status: 404, type: "invalid_request_error" });
    expect((await client.responses.inputItems.list(mine.id)).data).toMatchObject([{ type: "message", role: "user", content: [{ type: "input_text", text: "secret" }] }]);
    await expect(client.responses.inputItems.list(`resp_${"0".repeat(32)}`)).rejects.toMatchObject({ status: 404 });
    await expect(client.responses.inputItems.list("nope")).rejects.toMatchObject({ status: 404 });
    const unstored = await client.responses.create({ model: "sim-chat", input: "forget me", store: false });
    await expect(client.responses.inputItems.list(unstored.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await client.responses.delete(mine.id);
    await expect(client.responses.inputItems.list(mine.id)).rejects.toBeInstanceOf(OpenAI.NotFoundError);
  });

  it("a continuation lists the earlier turns' inputs and outputs before its own input, under the ids they had", async () => {
    const first = await client.responses.create({ model: "sim-chat", input: "my name is Ada", instructions: "first instructions", include: ["message.output_text.logprobs"], top_logprobs: 2 });
    const second = await client.responses.create({ model: "sim-chat", input: "what is my name?", previous_response_id: first.id });
    const firstItems = (await client.responses.inputItems.list(first.id, { order: "asc" })).data;
    const items = (await client.responses.inputItems.list(second.id, { order: "asc" })).data;
    const out = first.output[0] as OpenAI.Responses.ResponseOutputMessage;
    expect(items).toEqual([
      firstItems[0],
      // The first answer as it was output, without the log probabilities its sampling had.
      { id: out.id, type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text: "tok0 tok1 tok2 tok3 ", annotations: [] }] },
      { id: expect.stringMatching(/^msg_/), type: "message", role: "user", status: "completed", content: [{ type: "input_text", text: "what is my name?" }] },
    ]);
    expect(firstItems).toEqual([{ id: expect.stringMatching(/^msg_/), type: "message", role: "user", status: "completed", content: [{ type: "input_text", text: "my name is Ada" }] }]);
    // A chain: the third lists all five, newest first.
    const third = await client.responses.create({ model: "sim-chat", input: "and again?", previous_response_id: second.id });
    const chain = await collect(client.responses.inputItems.list(third.id, { limit: 2 }));
    expect(ids(chain)).toEqual([expect.stringMatching(/^msg_/), second.output[0]!.id, ...ids(items).reverse()]);
    expect(chain).toHaveLength(5);
  });

  it("a function call's continuation lists the call under its output item's id, then its output", async () => {
    const tools: OpenAI.Responses.Tool[] = [{ type: "function", name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } } }, strict: false }];
    upstream.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const call = await client.responses.create({ model: AN_MODEL, input: [{ role: "user", content: [{ type: "input_text", text: "weather here?" }, { type: "input_image", image_url: "https://example.com/cat.jpg", detail: "low" }] }], tools });
    const fc = call.output[0] as OpenAI.Responses.ResponseFunctionToolCall;
    expect(fc.type).toBe("function_call");
    upstream.enqueue({ kind: "ok", text: "sunny" });
    const next = await client.responses.create({ model: AN_MODEL, previous_response_id: call.id, input: [{ type: "function_call_output", call_id: fc.call_id, output: [{ type: "input_text", text: "sunny" }] }], tools });
    expect((await client.responses.inputItems.list(next.id, { order: "asc" })).data).toEqual([
      { id: expect.stringMatching(/^msg_/), type: "message", role: "user", status: "completed", content: [{ type: "input_text", text: "weather here?" }, { type: "input_image", image_url: "https://example.com/cat.jpg", detail: "low" }] },
      { id: fc.id, type: "function_call", status: "completed", call_id: fc.call_id, name: "get_weather", arguments: '{"city":"Paris"}' },
      { id: expect.stringMatching(/^fco_/), type: "function_call_output", status: "completed", call_id: fc.call_id, output: [{ type: "input_text", text: "sunny" }] },
    ]);
  });

  it("a response stored by an older router (no items in its record) lists items derived from its chat conversation, with the same ids each time, and is continued", async () => {
    const old = await client.responses.create({
      model: "sim-chat",
      input: [
        { role: "user", content: "weather in Paris?" },
        { type: "function_call", call_id: "call_9", name: "get_weather", arguments: "{}" },
        { type: "function_call_output", call_id: "call_9", output: "sunny" },
      ],
    });
    // What an older router wrote: the response and its chat conversation, nothing else.
    const key = await recordKey(old.id);
    const record = JSON.parse((await fx.redis.redis.get(key))!) as { items?: unknown };
    expect(record.items).toHaveLength(3);
    delete record.items;
    await fx.redis.redis.set(key, JSON.stringify(record), "KEEPTTL");
    const listed = (await client.responses.inputItems.list(old.id, { order: "asc" })).data;
    expect(listed).toEqual([
      { id: expect.stringMatching(/^msg_[0-9a-f]{32}$/), type: "message", role: "user", status: "completed", content: [{ type: "input_text", text: "weather in Paris?" }] },
      { id: expect.stringMatching(/^fc_[0-9a-f]{32}$/), type: "function_call", status: "completed", call_id: "call_9", name: "get_weather", arguments: "{}" },
      { id: expect.stringMatching(/^fco_[0-9a-f]{32}$/), type: "function_call_output", status: "completed", call_id: "call_9", output: "sunny" },
    ]);
    // Stable: the second page starts after the first page's last id.
    const again = await client.responses.inputItems.list(old.id, { order: "asc", limit: 1, after: listed[0]!.id });
    expect(ids(again.data)).toEqual([listed[1]!.id]);
    // Its continuation lists the derived history (same ids), its output, then the new input.
    const next = await client.responses.create({ model: "sim-chat", input: "thanks", previous_response_id: old.id });
    const items = (await client.responses.inputItems.list(next.id, { order: "asc" })).data;
    expect(ids(items)).toEqual([...ids(listed), old.output[0]!.id, expect.stringMatching(/^msg_/)]);
    // And one whose conversation was not kept (the answer passed the bound) lists none.
    delete (record as { messages?: unknown }).messages;
    await fx.redis.redis.set(key, JSON.stringify({ ...record, messages: null }), "KEEPTTL");
    expect(await listBody(old.id)).toEqual({ object: "list", data: [], has_more: false, first_id: null, last_id: null });
  });

  it("the items count toward responses.maxConversationBytes (they carry ids the chat messages do not); store: false keeps none and is not held to it", async () => {
    // 80 one-letter messages: ~2.3 KB as chat messages, ~9 KB as items with ids, past the test's 4,000-byte bound.
    const many: OpenAI.Responses.ResponseInput = Array.from({ length: 80 }, () => ({ role: "user" as const, content: "x" }));
    await expect(client.responses.create({ model: "sim-chat", input: many })).rejects.toMatchObject({ status: 400, param: "input" });
    expect((await client.responses.create({ model: "sim-chat", input: many, store: false })).status).toBe("completed");
    // Stored: the record holds each copy within the bound.
    const res = await client.responses.create({ model: "sim-chat", input: many.slice(0, 20) });
    const record = JSON.parse((await fx.redis.redis.get(await recordKey(res.id)))!) as { messages: unknown[]; items: unknown[] };
    expect(record.items).toHaveLength(20);
    expect(JSON.stringify(record.items).length).toBeLessThanOrEqual(4000);
    expect(record.messages).toHaveLength(21);
  });
});
