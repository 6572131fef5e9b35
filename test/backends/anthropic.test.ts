// The Anthropic backend: the translation (request/response/stream.ts) as pure functions, then AnthropicBackend
// over real HTTP against FakeAnthropic, reading usage the way billing does.
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { AnthropicBackend, AnthropicConnections, type AnthropicOptions } from "../../apps/router/src/backends/anthropic/client.ts";
import { toMessagesRequest } from "../../apps/router/src/backends/anthropic/request.ts";
import { fromMessagesResponse } from "../../apps/router/src/backends/anthropic/response.ts";
import { MessagesStreamTranslator } from "../../apps/router/src/backends/anthropic/stream.ts";
import { AnthropicStreamError, UntranslatableRequest, type MessagesResponse } from "../../apps/router/src/backends/anthropic/wire.ts";
import { type BackendRequest, UpstreamFailure } from "../../apps/router/src/backends/types.ts";
import { usageFrom } from "../../apps/router/src/backends/usage.ts";
import type { RelayContext } from "../../apps/router/src/relay/context.ts";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";

const defaults = { maxTokens: 1024 };
const user = (content: unknown) => ({ role: "user", content });

describe("toMessagesRequest", () => {
  it("hoists system and developer messages and merges same-role neighbours", () => {
    const r = toMessagesRequest(
      {
        model: "claude",
        messages: [
          { role: "system", content: "Be brief." },
          { role: "developer", content: [{ type: "text", text: "Answer in French." }] },
          user("Hi"),
          user([{ type: "text", text: "there" }]),
          { role: "assistant", content: "Bonjour" },
          user("Again"),
        ],
      },
      "claude-3-5-haiku-latest",
      defaults,
    );
    expect(r.model).toBe("claude-3-5-haiku-latest");
    expect(r.system).toBe("Be brief.\n\nAnswer in French.");
    expect(r.messages).toEqual([
      { role: "user", content: [{ type: "text", text: "Hi" }, { type: "text", text: "there" }] },
      { role: "assistant", content: "Bonjour" },
      { role: "user", content: "Again" },
    ]);
    expect(r.max_tokens).toBe(1024);
    expect(r.stream).toBeUndefined();
  });

  it("keeps system blocks when one carries cache_control", () => {
    const r = toMessagesRequest(
      { messages: [{ role: "system", content: [{ type: "text", text: "long context", cache_control: { type: "ephemeral" } }] }, user("q")] },
      "m",
      defaults,
    );
    expect(r.system).toEqual([{ type: "text", text: "long context", cache_control: { type: "ephemeral" } }]);
  });

  it("turns image_url parts into base64 or url image sources", () => {
    const r = toMessagesRequest(
      {
        messages: [
          user([
            { type: "text", text: "What is this?" },
            { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } },
            { type: "image_url", image_url: { url: "https://example.com/cat.jpg" } },
          ]),
        ],
      },
      "m",
      defaults,
    );
    expect(r.messages[0]!.content).toEqual([
      { type: "text", text: "What is this?" },
      { type: "image", source: { type: "base64", media_type: "image/png", data: "iVBORw0KGgo=" } },
      { type: "image", source: { type: "url", url: "https://example.com/cat.jpg" } },
    ]);
    expect(() => toMessagesRequest({ messages: [user([{ type: "image_url", image_url: { url: "ftp://x/y.png" } }])] }, "m", defaults)).toThrow(
      UntranslatableRequest,
    );
    expect(() => toMessagesRequest({ messages: [user([{ type: "input_audio", input_audio: {} }])] }, "m", defaults)).toThrow(/messages\[0\]\.content\[0\]\.type/);
  });

  it("maps tools, tool_choice, tool calls and tool results", () => {
    const tools = [{ type: "function", function: { name: "get_weather", description: "Weather now", parameters: { type: "object", properties: { city: { type: "string" } } } } }];
    const r = toMessagesRequest(
      {
        tools: [...tools, { type: "function", function: { name: "now" } }],
        tool_choice: "required",
        messages: [
          user("Weather in Paris and Rome?"),
          {
            role: "assistant",
            content: null,
            tool_calls: [
              { id: "call_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
              { id: "call_2", type: "function", function: { name: "get_weather", arguments: '{"city":"Rome"}' } },
            ],
          },
          { role: "tool", tool_call_id: "call_1", content: "18C" },
          { role: "tool", tool_call_id: "call_2", content: [{ type: "text", text: "21C" }] },
          user("Which is warmer?"),
        ],
      },
      "m",
      defaults,
    );
    expect(r.tools).toEqual([
      { name: "get_weather", description: "Weather now", input_schema: tools[0]!.function.parameters },
      { name: "now", input_schema: { type: "object", properties: {} } },
    ]);
    expect(r.tool_choice).toEqual({ type: "any" });
    expect(r.messages).toEqual([
      { role: "user", content: "Weather in Paris and Rome?" },
      {
        role: "assistant",
        content: [
          { type: "tool_use", id: "call_1", name: "get_weather", input: { city: "Paris" } },
          { type: "tool_use", id: "call_2", name: "get_weather", input: { city: "Rome" } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "call_1", content: "18C" },
          { type: "tool_result", tool_use_id: "call_2", content: [{ type: "text", text: "21C" }] },
          { type: "text", text: "Which is warmer?" },
        ],
      },
    ]);
    const choice = (tool_choice: unknown, extra: Record<string, unknown> = {}) =>
      toMessagesRequest({ tools, tool_choice, ...extra, messages: [user("x")] }, "m", defaults).tool_choice;
    expect(choice("auto")).toEqual({ type: "auto" });
    expect(choice("none")).toEqual({ type: "none" });
    expect(choice({ type: "function", function: { name: "get_weather" } })).toEqual({ type: "tool", name: "get_weather" });
    expect(choice(undefined)).toBeUndefined();
    expect(choice(undefined, { parallel_tool_calls: false })).toEqual({ type: "auto", disable_parallel_tool_use: true });
    expect(() =>
      toMessagesRequest({ messages: [{ role: "assistant", tool_calls: [{ id: "c", type: "function", function: { name: "f", arguments: "{oops" } }] }] }, "m", defaults),
    ).toThrow(/tool_calls\[0\]\.function\.arguments/);
  });

  it("maps stop, sampling, token limits and user", () => {
    const base = { messages: [user("x")] };
    expect(toMessagesRequest({ ...base, stop: "END" }, "m", defaults).stop_sequences).toEqual(["END"]);
    expect(toMessagesRequest({ ...base, stop: ["a", "b"] }, "m", defaults).stop_sequences).toEqual(["a", "b"]);
    expect(toMessagesRequest({ ...base, stop: null }, "m", defaults).stop_sequences).toBeUndefined();
    expect(toMessagesRequest({ ...base, temperature: 1.7 }, "m", defaults).temperature).toBe(1);
    expect(toMessagesRequest({ ...base, temperature: 0.3 }, "m", defaults).temperature).toBe(0.3);
    const r = toMessagesRequest({ ...base, top_p: 0.9, top_k: 40, stream: true, user: "u-42", seed: 7, presence_penalty: 1 }, "m", defaults);
    expect(r).toMatchObject({ top_p: 0.9, top_k: 40, stream: true, metadata: { user_id: "u-42" } });
    expect(r).not.toHaveProperty("seed");
    expect(toMessagesRequest({ ...base, max_tokens: 50 }, "m", defaults).max_tokens).toBe(50);
    // Both set: the smaller, whichever field carries it (issue 10, item 11).
    expect(toMessagesRequest({ ...base, max_tokens: 50, max_completion_tokens: 70 }, "m", defaults).max_tokens).toBe(50);
    expect(toMessagesRequest({ ...base, max_tokens: 1_000_000, max_completion_tokens: 10 }, "m", defaults).max_tokens).toBe(10);
  });

  it("rejects what Anthropic cannot express, naming the parameter", () => {
    const base = { messages: [user("x")] };
    const param = (body: Record<string, unknown>) => {
      try {
        toMessagesRequest({ ...base, ...body }, "m", defaults);
      } catch (err) {
        return (err as UntranslatableRequest).param;
      }
      return "accepted";
    };
    expect(param({ n: 2 })).toBe("n");
    expect(param({ n: 1 })).toBe("accepted");
    expect(param({ logprobs: true })).toBe("logprobs");
    expect(param({ response_format: { type: "json_object" } })).toBe("response_format");
    expect(param({ messages: [{ role: "function", name: "f", content: "x" }] })).toBe("messages[0].role");
  });
});

describe("fromMessagesResponse", () => {
  const msg = (over: Partial<MessagesResponse>): MessagesResponse => ({
    id: "msg_01abc",
    type: "message",
    role: "assistant",
    model: "claude-3-5-haiku-20241022",
    content: [{ type: "text", text: "Hello" }],
    stop_reason: "end_turn",
    stop_sequence: null,
    usage: { input_tokens: 10, cache_creation_input_tokens: 4, cache_read_input_tokens: 6, output_tokens: 3 },
    ...over,
  });

  it("joins text, maps usage with cache tokens the way billing reads it", () => {
    const out = fromMessagesResponse(msg({ content: [{ type: "text", text: "Hel" }, { type: "web_search_tool_result" }, { type: "text", text: "lo" }] }));
    expect(out).toMatchObject({
      id: "chatcmpl-msg_01abc",
      object: "chat.completion",
      model: "claude-3-5-haiku-20241022",
      choices: [{ index: 0, message: { role: "assistant", content: "Hello" }, finish_reason: "stop" }],
      usage: { prompt_tokens: 20, completion_tokens: 3, total_tokens: 23, prompt_tokens_details: { cached_tokens: 6, cache_write_tokens: 4 } },
    });
    expect(usageFrom(out)).toMatchObject({ prompt: 20, completion: 3, cached: 6, cacheWrite: 4 });
    expect(fromMessagesResponse(msg({}), { model: "claude-haiku" }).model).toBe("claude-haiku");
  });

  it("counts one-hour cache writes apart (cache_creation), inside the same cache_write_tokens total", () => {
    const usage = { input_tokens: 10, cache_creation_input_tokens: 300, cache_read_input_tokens: 0, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 }, output_tokens: 50 };
    const out = fromMessagesResponse(msg({ usage }));
    expect(out.usage).toEqual({ prompt_tokens: 310, completion_tokens: 50, total_tokens: 360, prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 300, cache_write_1h_tokens: 200 } });
    expect(usageFrom(out)).toEqual({ prompt: 310, completion: 50, cached: 0, cacheWrite: 300, cacheWrite1h: 200, generationId: "chatcmpl-msg_01abc" });
    // Five-minute writes only: the OpenAI block is as it always was.
    const fiveMinutes = fromMessagesResponse(msg({ usage: { ...usage, cache_creation: { ephemeral_5m_input_tokens: 300, ephemeral_1h_input_tokens: 0 } } }));
    expect(fiveMinutes.usage).toEqual({ prompt_tokens: 310, completion_tokens: 50, total_tokens: 360, prompt_tokens_details: { cached_tokens: 0, cache_write_tokens: 300 } });
    // A split without its total (or larger than it) is billed by the split, never short.
    const noTotal = fromMessagesResponse(msg({ usage: { input_tokens: 10, cache_creation: { ephemeral_5m_input_tokens: 100, ephemeral_1h_input_tokens: 200 }, output_tokens: 50 } }));
    expect(usageFrom(noTotal)).toMatchObject({ prompt: 310, cacheWrite: 300, cacheWrite1h: 200 });
  });

  it("turns tool_use into tool_calls with JSON-string arguments", () => {
    const out = fromMessagesResponse(
      msg({ content: [{ type: "tool_use", id: "toolu_01", name: "get_weather", input: { city: "Paris" } }], stop_reason: "tool_use" }),
    ) as { choices: Array<{ message: Record<string, unknown>; finish_reason: string }> };
    expect(out.choices[0]!.finish_reason).toBe("tool_calls");
    expect(out.choices[0]!.message.content).toBeNull();
    expect(out.choices[0]!.message.tool_calls).toEqual([{ id: "toolu_01", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }]);
  });

  it("maps every stop reason and copes without usage", () => {
    const reason = (stop_reason: string | null) => (fromMessagesResponse(msg({ stop_reason })) as { choices: Array<{ finish_reason: string }> }).choices[0]!.finish_reason;
    expect(reason("end_turn")).toBe("stop");
    expect(reason("stop_sequence")).toBe("stop");
    expect(reason("max_tokens")).toBe("length");
    expect(reason("tool_use")).toBe("tool_calls");
    expect(reason("refusal")).toBe("content_filter");
    const bare = msg({});
    delete bare.usage;
    expect(fromMessagesResponse(bare)).not.toHaveProperty("usage");
  });
});

describe("MessagesStreamTranslator", () => {
  const run = (events: unknown[], includeUsage = true) => {
    const t = new MessagesStreamTranslator({ includeUsage });
    return events.flatMap((e) => t.feed(JSON.stringify(e)));
  };
  const start = (usage?: Record<string, unknown>) => ({
    type: "message_start",
    message: { id: "msg_01s", type: "message", role: "assistant", model: "claude-x", content: [], stop_reason: null, stop_sequence: null, ...(usage ? { usage } : {}) },
  });

  it("emits role, content, finish, usage (cumulative output, last value) and [DONE]; pings never", () => {
    const out = run([
      start({ input_tokens: 5, cache_read_input_tokens: 100, cache_creation_input_tokens: 20, output_tokens: 1 }),
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "ping" },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Hel" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "lo" } },
      { type: "content_block_stop", index: 0 },
      { type: "message_delta", delta: { stop_reason: "max_tokens", stop_sequence: null }, usage: { output_tokens: 5 } },
      { type: "message_delta", delta: {}, usage: { output_tokens: 9 } },
      { type: "message_stop" },
    ]);
    expect(out.at(-1)).toBe("[DONE]");
    const chunks = out.slice(0, -1).map((s) => JSON.parse(s));
    expect(chunks.every((c) => c.id === "chatcmpl-msg_01s" && c.object === "chat.completion.chunk" && c.model === "claude-x")).toBe(true);
    expect(chunks[0].choices[0].delta).toEqual({ role: "assistant", content: "" });
    expect(chunks.slice(1, 3).map((c) => c.choices[0].delta.content)).toEqual(["Hel", "lo"]);
    expect(chunks[3].choices[0]).toMatchObject({ delta: {}, finish_reason: "length" });
    expect(chunks[4].choices).toEqual([]);
    expect(usageFrom(chunks[4])).toMatchObject({ prompt: 125, completion: 9, cached: 100, cacheWrite: 20 });
    expect(out.some((s) => s.includes("ping"))).toBe(false);
    // Nothing reaches the relay before there is content to show.
    expect(run([start(), { type: "ping" }, { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } }])).toEqual([]);
  });

  it("reads one-hour cache writes from message_start and, cumulative, from message_delta", () => {
    const delta = (usage: Record<string, unknown>) => ({ type: "message_delta", delta: { stop_reason: "end_turn", stop_sequence: null }, usage });
    const finalUsage = (events: unknown[]) => usageFrom(JSON.parse(run(events).at(-2)!));
    const text = { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "x" } };
    const split = (m5: number, h1: number) => ({ ephemeral_5m_input_tokens: m5, ephemeral_1h_input_tokens: h1 });
    // From message_start, kept through a delta that reports output only.
    expect(
      finalUsage([start({ input_tokens: 10, cache_creation_input_tokens: 300, cache_read_input_tokens: 0, cache_creation: split(100, 200), output_tokens: 1 }), text, delta({ output_tokens: 50 }), { type: "message_stop" }]),
    ).toEqual({ prompt: 310, completion: 50, cached: 0, cacheWrite: 300, cacheWrite1h: 200, generationId: "chatcmpl-msg_01s" });
    // A later message_delta's counts replace the start's, the split included.
    expect(
      finalUsage([
        start({ input_tokens: 10, cache_creation_input_tokens: 0, output_tokens: 1 }),
        text,
        delta({ input_tokens: 10, cache_creation_input_tokens: 300, cache_read_input_tokens: 0, cache_creation: split(120, 180), output_tokens: 50 }),
        { type: "message_stop" },
      ]),
    ).toMatchObject({ prompt: 310, completion: 50, cacheWrite: 300, cacheWrite1h: 180 });
  });

  it("leaves the usage chunk out unless asked, or when Anthropic reported none", () => {
    const events = [start(), { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "x" } }, { type: "message_delta", delta: { stop_reason: "end_turn" } }, { type: "message_stop" }];
    expect(run(events, true).some((s) => s.includes('"usage"'))).toBe(false);
    const withUsage = [start({ input_tokens: 3, output_tokens: 1 }), ...events.slice(1)];
    expect(run(withUsage, false).some((s) => s.includes('"usage"'))).toBe(false);
    expect(run(withUsage, true).some((s) => s.includes('"usage"'))).toBe(true);
  });

  it("streams text then a tool call as OpenAI tool_calls deltas", () => {
    const out = run([
      start({ input_tokens: 3, output_tokens: 1 }),
      { type: "content_block_start", index: 0, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "text_delta", text: "Checking." } },
      { type: "content_block_stop", index: 0 },
      { type: "content_block_start", index: 1, content_block: { type: "tool_use", id: "toolu_01", name: "get_weather", input: {} } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: "" } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '{"city":' } },
      { type: "content_block_delta", index: 1, delta: { type: "input_json_delta", partial_json: '"Paris"}' } },
      { type: "content_block_stop", index: 1 },
      { type: "content_block_start", index: 2, content_block: { type: "tool_use", id: "toolu_02", name: "now", input: {} } },
      { type: "content_block_stop", index: 2 },
      { type: "message_delta", delta: { stop_reason: "tool_use" }, usage: { output_tokens: 30 } },
      { type: "message_stop" },
    ], false);
    const deltas = out.slice(0, -1).map((s) => JSON.parse(s).choices[0]);
    expect(deltas[1].delta).toEqual({ content: "Checking." });
    expect(deltas[2].delta.tool_calls).toEqual([{ index: 0, id: "toolu_01", type: "function", function: { name: "get_weather", arguments: "" } }]);
    const args = (i: number) =>
      deltas
        .flatMap((d) => d.delta.tool_calls ?? [])
        .filter((c: { index: number }) => c.index === i)
        .map((c: { function: { arguments: string } }) => c.function.arguments)
        .join("");
    expect(JSON.parse(args(0))).toEqual({ city: "Paris" });
    expect(JSON.parse(args(1))).toEqual({});
    expect(deltas.at(-1).finish_reason).toBe("tool_calls");
  });

  it("throws Anthropic's error event", () => {
    const t = new MessagesStreamTranslator({ includeUsage: true });
    t.feed(JSON.stringify(start()));
    expect(() => t.feed('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')).toThrow(AnthropicStreamError);
  });
});

// ---- AnthropicBackend against FakeAnthropic ----

const ctx = { requestId: "req-anthropic-test" } as unknown as RelayContext;
const chat = (body: Record<string, unknown>, stream = false): BackendRequest => ({
  path: "/v1/chat/completions",
  body: { model: "claude-haiku", messages: [user("Hi")], ...body, ...(stream ? { stream: true } : {}) },
  stream,
});

async function collect(gen: AsyncGenerator<string>): Promise<string[]> {
  const out: string[] = [];
  for await (const e of gen) out.push(e);
  return out;
}

async function failure(p: Promise<unknown>): Promise<UpstreamFailure> {
  try {
    await p;
  } catch (err) {
    expect(err).toBeInstanceOf(UpstreamFailure);
    return err as UpstreamFailure;
  }
  throw new Error("expected an UpstreamFailure");
}

const contentOf = (events: string[]) =>
  events
    .filter((e) => e !== "[DONE]")
    .map((e) => JSON.parse(e).choices[0]?.delta?.content ?? "")
    .join("");

describe("AnthropicBackend", () => {
  const fake = new FakeAnthropic();
  const connections: AnthropicConnections[] = [];
  const backendWith = (over: Partial<AnthropicOptions> = {}) => {
    const c = new AnthropicConnections({ baseUrl: fake.url, apiKey: fake.apiKey, version: "2023-06-01", defaultMaxTokens: 256, connectTimeoutMs: 2000, ...over });
    connections.push(c);
    return new AnthropicBackend("claude-3-5-haiku-latest", c);
  };
  let backend: AnthropicBackend;
  const open = (req: BackendRequest, signal = new AbortController().signal) => backend.open(req, ctx, signal);

  beforeAll(async () => {
    await fake.start();
    backend = backendWith();
  });
  afterEach(() => {
    fake.requests.length = 0;
  });
  afterAll(async () => {
    await Promise.all(connections.map((c) => c.close()));
    await fake.stop();
  });

  it("is a paid chat-only backend", () => {
    expect(backend).toMatchObject({ id: "anthropic:claude-3-5-haiku-latest", kind: "anthropic", paid: true, model: "claude-3-5-haiku-latest" });
    expect(backend.supports("/v1/chat/completions")).toBe(true);
    expect(backend.supports("/v1/embeddings")).toBe(false);
    expect(backend.supports("/v1/completions")).toBe(false);
  });

  it("answers a non-streaming chat with OpenAI JSON and cache-aware usage", async () => {
    fake.enqueue({ kind: "ok", text: "Hello there, friend.", promptTokens: 30, completionTokens: 4, cachedTokens: 20, cacheWriteTokens: 5 });
    const up = await open(chat({ messages: [{ role: "system", content: "Be kind." }, user("Hi")] }));
    const text = await up.text();
    const body = JSON.parse(text);
    expect(body.object).toBe("chat.completion");
    expect(body.id).toMatch(/^chatcmpl-msg_01/);
    expect(body.choices[0]).toMatchObject({ message: { role: "assistant", content: "Hello there, friend." }, finish_reason: "stop" });
    expect(usageFrom(body, text)).toMatchObject({ prompt: 30, completion: 4, cached: 20, cacheWrite: 5 });
    const sent = fake.requests[0]!;
    expect(sent.headers["x-api-key"]).toBe(fake.apiKey);
    expect(sent.headers["anthropic-version"]).toBe("2023-06-01");
    expect(sent.headers["x-request-id"]).toBe("req-anthropic-test");
    expect(sent.body).toMatchObject({ model: "claude-3-5-haiku-latest", max_tokens: 256, system: "Be kind.", messages: [{ role: "user", content: "Hi" }] });
  });

  it("streams OpenAI chunks with a usage chunk billing can read, and never a ping", async () => {
    fake.enqueue({ kind: "ok", text: "one two three four five", promptTokens: 40, completionTokens: 5, cachedTokens: 32, cacheWriteTokens: 0, keepAlives: 3 });
    const up = await open(chat({ stream_options: { include_usage: true } }, true));
    const events = await collect(up.events());
    expect(events.at(-1)).toBe("[DONE]");
    expect(events.some((e) => e.includes("ping"))).toBe(false);
    expect(contentOf(events)).toBe("one two three four five");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
    expect(chunks[0].choices[0].delta.role).toBe("assistant");
    expect(chunks.find((c) => c.choices[0]?.finish_reason)?.choices[0].finish_reason).toBe("stop");
    const usageChunk = chunks.at(-1);
    expect(usageChunk.choices).toEqual([]);
    expect(usageFrom(usageChunk)).toMatchObject({ prompt: 40, completion: 5, cached: 32, cacheWrite: 0 });
    expect(fake.requests[0]!.body.stream).toBe(true);
    expect(fake.requests[0]!.body).not.toHaveProperty("stream_options");
  });

  it("clamps temperature and honours stop sequences end to end", async () => {
    fake.enqueue({ kind: "ok", text: "alpha beta STOP gamma" });
    const body = JSON.parse(await (await open(chat({ temperature: 1.5, stop: "STOP" }))).text());
    expect(fake.requests[0]!.body).toMatchObject({ temperature: 1, stop_sequences: ["STOP"] });
    expect(body.choices[0]).toMatchObject({ message: { content: "alpha beta " }, finish_reason: "stop" });
  });

  it("throws the mid-stream error after the tokens already relayed", async () => {
    fake.enqueue({ kind: "midstream_error", afterTokens: 2 });
    const up = await open(chat({}, true));
    const seen: string[] = [];
    const f = await failure(
      (async () => {
        for await (const e of up.events()) seen.push(e);
      })(),
    );
    expect(f).toMatchObject({ kind: "bad_status", message: "anthropic: Overloaded", retryable: true });
    expect(contentOf(seen)).toBe("tok0 tok1 ");
  });

  it("fails before the first event when the error comes before any content (so the relay can fail over)", async () => {
    fake.enqueue({ kind: "midstream_error", afterTokens: 0 });
    const up = await open(chat({}, true));
    const events = up.events();
    const f = await failure(events.next());
    expect(f.retryable).toBe(true);
  });

  it.each([429, 500, 529, 403])("maps HTTP %i to a retryable bad_status", async (status) => {
    fake.enqueue({ kind: "status", status });
    const f = await failure(open(chat({})));
    expect(f).toMatchObject({ kind: "bad_status", retryable: true, status });
  });

  it.each([400, 404, 413])("passes HTTP %i through as a client error with Anthropic's message", async (status) => {
    fake.enqueue({ kind: "status", status, message: `messages.0.content: bad thing ${status}` });
    const f = await failure(open(chat({})));
    expect(f).toMatchObject({ kind: "client_error", retryable: false, status, upstreamError: { message: `messages.0.content: bad thing ${status}` } });
  });

  it("refuses untranslatable requests itself with a 400 naming the parameter", async () => {
    const f = await failure(open(chat({ n: 2 })));
    expect(f).toMatchObject({ kind: "client_error", retryable: false, status: 400, upstreamError: { param: "n" } });
    expect(fake.requests).toHaveLength(0);
  });

  it("copes with no usage at all, stream and non-stream", async () => {
    fake.enqueue({ kind: "no_usage", text: "quiet answer" }, { kind: "no_usage", text: "quiet answer" });
    const body = JSON.parse(await (await open(chat({}))).text());
    expect(body.choices[0].message.content).toBe("quiet answer");
    expect(usageFrom(body)).toBeUndefined();
    const events = await collect((await open(chat({ stream_options: { include_usage: true } }, true))).events());
    expect(contentOf(events)).toBe("quiet answer");
    expect(events.at(-1)).toBe("[DONE]");
    expect(events.some((e) => e.includes('"usage"'))).toBe(false);
  });

  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } }];

  it("round-trips a tool call without streaming", async () => {
    fake.enqueue({ kind: "ok", text: 'TOOL:get_weather {"city":"Paris"}' }, { kind: "ok", text: "It is 18C in Paris." });
    const first = JSON.parse(await (await open(chat({ tools, tool_choice: "auto" }))).text());
    expect(fake.requests[0]!.body).toMatchObject({ tools: [{ name: "get_weather", input_schema: tools[0]!.function.parameters }], tool_choice: { type: "auto" } });
    const call = first.choices[0].message.tool_calls[0];
    expect(first.choices[0].finish_reason).toBe("tool_calls");
    expect(call).toMatchObject({ type: "function", function: { name: "get_weather" } });
    expect(call.id).toMatch(/^toolu_01/);
    expect(JSON.parse(call.function.arguments)).toEqual({ city: "Paris" });

    const second = JSON.parse(
      await (
        await open(chat({ tools, messages: [user("Weather?"), first.choices[0].message, { role: "tool", tool_call_id: call.id, content: "18C" }] }))
      ).text(),
    );
    expect(second.choices[0].message.content).toBe("It is 18C in Paris.");
    expect(fake.requests[1]!.body.messages).toEqual([
      { role: "user", content: "Weather?" },
      { role: "assistant", content: [{ type: "tool_use", id: call.id, name: "get_weather", input: { city: "Paris" } }] },
      { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "18C" }] },
    ]);
  });

  it("streams a tool call as tool_calls deltas", async () => {
    fake.enqueue({ kind: "ok", text: 'TOOL:get_weather {"city":"Rome","unit":"C"}', completionTokens: 4 });
    const events = await collect((await open(chat({ tools }, true))).events());
    const deltas = events.slice(0, -1).map((e) => JSON.parse(e).choices[0]);
    const calls = deltas.flatMap((d) => d.delta.tool_calls ?? []);
    expect(calls[0]).toMatchObject({ index: 0, type: "function", function: { name: "get_weather", arguments: "" } });
    expect(calls.length).toBeGreaterThan(2);
    expect(JSON.parse(calls.map((c: { function: { arguments: string } }) => c.function.arguments).join(""))).toEqual({ city: "Rome", unit: "C" });
    expect(deltas.at(-1).finish_reason).toBe("tool_calls");
  });

  it("aborting stops the fake's response", async () => {
    fake.enqueue({ kind: "slow", interTokenMs: 50, completionTokens: 200 });
    const controller = new AbortController();
    const up = await open(chat({}, true), controller.signal);
    const events = up.events();
    expect((await events.next()).done).toBe(false);
    const abortedBefore = fake.aborted;
    const gone = fake.nextAbort();
    controller.abort(new UpstreamFailure("aborted", "client went away", false));
    // Chunks already translated may still come out; then the stream must fail, not end.
    const f = await failure(
      (async () => {
        for (;;) if ((await events.next()).done) return;
      })(),
    );
    expect(f.kind).toBe("aborted");
    await gone;
    expect(fake.aborted).toBe(abortedBefore + 1);
  });

  it("up.abort() frees the upstream too", async () => {
    fake.enqueue({ kind: "slow", interTokenMs: 50, completionTokens: 200 });
    const up = await open(chat({}, true));
    const events = up.events();
    await events.next();
    const gone = fake.nextAbort();
    up.abort();
    await gone;
    expect(fake.inFlight).toBe(0);
  });

  it("maps a wrong key to a retryable 401", async () => {
    const wrong = backendWith({ apiKey: "sk-ant-wrong" });
    const f = await failure(wrong.open(chat({}), ctx, new AbortController().signal));
    expect(f).toMatchObject({ kind: "bad_status", retryable: true, status: 401 });
    expect(f.message).toContain("invalid x-api-key");
  });

  it("classifies a refused connection as a retryable connect failure", async () => {
    const s = createServer();
    await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
    const port = (s.address() as AddressInfo).port;
    await new Promise<void>((r) => s.close(() => r()));
    const dead = backendWith({ baseUrl: `http://127.0.0.1:${port}` });
    const f = await failure(dead.open(chat({}), ctx, new AbortController().signal));
    expect(f).toMatchObject({ kind: "connect", retryable: true });
  });
});
