// The translators on an answer the sim worker never gives (text, then two
// streamed tool calls, arguments in pieces): their frames are served over
// HTTP to the official SDKs, which must assemble the same answer — OpenAI's
// ResponseStream and Anthropic's MessageStream accumulate from the events
// alone, so a wrong index or a missing event fails here.
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import Anthropic from "@anthropic-ai/sdk";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Json, StreamTranslator } from "./boundary.ts";
import { MessagesStreamTranslator } from "./messages/stream.ts";
import { messageFromCompletion } from "./messages/response.ts";
import { toChatRequest as messagesToChat } from "./messages/request.ts";
import { ResponsesStreamTranslator } from "./responses/stream.ts";
import { outputFromCompletion, responseEnvelope, statusOf } from "./responses/response.ts";
import { inputMessages } from "./responses/request.ts";

const id = "chatcmpl-1";
const chunk = (delta: Json, finish: string | null = null): Json => ({ id, object: "chat.completion.chunk", choices: [{ index: 0, delta, finish_reason: finish }] });
const chatChunks: Json[] = [
  chunk({ role: "assistant", content: "" }),
  chunk({ content: "Checking " }),
  chunk({ content: "both." }),
  chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: "" } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
  chunk({ tool_calls: [{ index: 1, id: "call_b", type: "function", function: { name: "get_time", arguments: '{"tz":"CET"}' } }] }),
  chunk({}, "tool_calls"),
  { id, object: "chat.completion.chunk", choices: [], usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42, prompt_tokens_details: { cached_tokens: 10 } } },
];
const completion: Json = {
  id,
  object: "chat.completion",
  choices: [
    {
      index: 0,
      finish_reason: "tool_calls",
      message: {
        role: "assistant",
        content: "Checking both.",
        tool_calls: [
          { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
          { id: "call_b", type: "function", function: { name: "get_time", arguments: '{"tz":"CET"}' } },
        ],
      },
    },
  ],
  usage: { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42, prompt_tokens_details: { cached_tokens: 10 } },
};

// Parallel calls as some OpenAI-compatible servers stream them (Gemini and
// vLLM/llama.cpp-served models through OpenRouter): every call at index 0,
// each new one told apart only by its new id (and name); the second repeats
// its id on a later delta, which continues it.
const sameIndexChunks: Json[] = [
  chunk({ role: "assistant", content: "" }),
  chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: "" } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"city":' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '"Paris"}' } }] }),
  chunk({ tool_calls: [{ index: 0, id: "call_b", type: "function", function: { name: "get_time", arguments: '{"tz":' } }] }),
  chunk({ tool_calls: [{ index: 0, id: "call_b", type: "function", function: { arguments: '"CET"}' } }] }),
  chunk({}, "tool_calls"),
  chatChunks.at(-1)!,
];

async function framesOf(t: StreamTranslator, chunks: Json[] = chatChunks): Promise<string> {
  let out = "";
  for (const c of chunks) out += t.chunk(c).join("");
  return out + (await t.done()).join("");
}

let server: Server;
let base: string;
const seed = { id: `resp_${"1".repeat(32)}`, createdAt: 1_700_000_000, body: { model: "m", input: "x" } as Json };

beforeAll(async () => {
  server = createServer((req, res) => {
    void (async () => {
      // Under /same-index the answer is sameIndexChunks'.
      const sameIndex = req.url?.startsWith("/same-index/") ?? false;
      const path = sameIndex ? req.url!.slice("/same-index".length) : req.url;
      const t = path === "/v1/responses" ? new ResponsesStreamTranslator(seed, async () => {}) : new MessagesStreamTranslator("m");
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(await framesOf(t, sameIndex ? sameIndexChunks : chatChunks));
    })();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(() => new Promise<void>((r) => server.close(() => r())));

describe("Responses stream translator", () => {
  it("text then two function calls: the SDK's ResponseStream assembles message and function_call items", async () => {
    const client = new OpenAI({ apiKey: "k", baseURL: `${base}/v1`, maxRetries: 0 });
    const stream = client.responses.stream({ model: "m", input: "x" });
    const types: string[] = [];
    stream.on("event", (e) => types.push(e.type));
    const final = await stream.finalResponse();
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(final.output_text).toBe("Checking both.");
    expect(final.output.map((o) => o.type)).toEqual(["message", "function_call", "function_call"]);
    expect(final.output[1]).toMatchObject({ type: "function_call", call_id: "call_a", name: "get_weather", arguments: '{"city":"Paris"}', status: "completed" });
    expect(final.output[2]).toMatchObject({ type: "function_call", call_id: "call_b", name: "get_time", arguments: '{"tz":"CET"}' });
    expect(final.usage).toEqual({ input_tokens: 30, input_tokens_details: { cached_tokens: 10, cache_write_tokens: 0 }, output_tokens: 12, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 42 });
  });

  it("the whole answer has the same items, and its turn continues as chat tool calls", () => {
    const { output, turn, finish } = outputFromCompletion(completion);
    expect(statusOf(finish)).toBe("completed");
    expect(output.map((o) => o.type)).toEqual(["message", "function_call", "function_call"]);
    expect(turn).toEqual(completion.choices && (completion.choices as Json[])[0]!.message);
    const env = responseEnvelope(seed, { status: "incomplete", output: [], finish: "length" });
    expect(env.incomplete_details).toEqual({ reason: "max_output_tokens" });
    // Those items, sent back as input, are the same chat turn again.
    const back = inputMessages([{ role: "user", content: "x" }, ...output, { type: "function_call_output", call_id: "call_a", output: "sunny" }]);
    expect(back.slice(1)).toEqual([turn, { role: "tool", tool_call_id: "call_a", content: "sunny" }]);
  });
});

describe("Responses: parallel tool calls all at index 0", () => {
  it("a new id starts a new function_call item; the SDK assembles both, and the stored turn has both", async () => {
    const client = new OpenAI({ apiKey: "k", baseURL: `${base}/same-index/v1`, maxRetries: 0 });
    const stream = client.responses.stream({ model: "m", input: "x" });
    const types: string[] = [];
    stream.on("event", (e) => types.push(e.type));
    const final = await stream.finalResponse();
    expect(types).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.output_item.added",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.delta",
      "response.function_call_arguments.done",
      "response.output_item.done",
      "response.completed",
    ]);
    expect(final.output).toMatchObject([
      { type: "function_call", status: "completed", call_id: "call_a", name: "get_weather", arguments: '{"city":"Paris"}' },
      { type: "function_call", status: "completed", call_id: "call_b", name: "get_time", arguments: '{"tz":"CET"}' },
    ]);

    let turn: Json | undefined;
    await framesOf(new ResponsesStreamTranslator(seed, async (f) => void (turn = f.turn)), sameIndexChunks);
    expect(turn).toEqual({
      role: "assistant",
      content: null,
      tool_calls: [
        { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
        { id: "call_b", type: "function", function: { name: "get_time", arguments: '{"tz":"CET"}' } },
      ],
    });
  });
});

describe("Responses: an answer the output limit cut", () => {
  // Text, then a call cut mid-arguments by max_tokens (chat's "length").
  const cut: Json[] = [chatChunks[1]!, chatChunks[3]!, chatChunks[4]!, chunk({}, "length")];
  const cutWhole: Json = {
    id,
    object: "chat.completion",
    choices: [{ index: 0, finish_reason: "length", message: { role: "assistant", content: "Checking ", tool_calls: [{ id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":' } }] } }],
  };

  it("is incomplete in its last item only: the cut call, not the finished text before it, streamed and whole", async () => {
    const t = new ResponsesStreamTranslator(seed, async () => {});
    const frames = [...cut.flatMap((c) => t.chunk(c)), ...(await t.done())].map((f) => JSON.parse(f.split("\n")[1]!.slice("data: ".length)) as Json);
    const done = frames.filter((f) => f.type === "response.output_item.done").map((f) => f.item as Json);
    expect(done.map((i) => [i.type, i.status])).toEqual([
      ["message", "completed"],
      ["function_call", "incomplete"],
    ]);
    const last = frames.at(-1)!;
    expect(last.type).toBe("response.incomplete");
    expect(((last.response as Json).output as Json[]).map((i) => i.status)).toEqual(["completed", "incomplete"]);
    expect(outputFromCompletion(cutWhole).output.map((i) => [i.type, i.status])).toEqual([
      ["message", "completed"],
      ["function_call", "incomplete"],
    ]);
  });
});

describe("Messages stream translator", () => {
  it("text then two tool_use blocks: the SDK's MessageStream assembles them, input parsed", async () => {
    const client = new Anthropic({ apiKey: "k", baseURL: base, maxRetries: 0 });
    const stream = client.messages.stream({ model: "m", max_tokens: 10, messages: [{ role: "user", content: "x" }] });
    const types: string[] = [];
    stream.on("streamEvent", (e) => types.push(e.type === "content_block_delta" ? `delta:${e.delta.type}` : e.type));
    const final = await stream.finalMessage();
    expect(types).toEqual([
      "message_start",
      "content_block_start",
      "delta:text_delta",
      "delta:text_delta",
      "content_block_stop",
      "content_block_start",
      "delta:input_json_delta",
      "delta:input_json_delta",
      "content_block_stop",
      "content_block_start",
      "delta:input_json_delta",
      "content_block_stop",
      "message_delta",
      "message_stop",
    ]);
    expect(final.content).toEqual([
      { type: "text", text: "Checking both." },
      { type: "tool_use", id: "call_a", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "call_b", name: "get_time", input: { tz: "CET" } },
    ]);
    expect(final.stop_reason).toBe("tool_use");
    // Anthropic's input_tokens leave out cache reads.
    expect(final.usage).toMatchObject({ input_tokens: 20, cache_read_input_tokens: 10, output_tokens: 12 });
  });

  it("the whole answer has the same blocks, and goes back in as the same chat turn", () => {
    const msg = messageFromCompletion(completion, "m");
    expect(msg.content).toEqual([
      { type: "text", text: "Checking both." },
      { type: "tool_use", id: "call_a", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "call_b", name: "get_time", input: { tz: "CET" } },
    ]);
    expect(msg.stop_reason).toBe("tool_use");
    const { chat } = messagesToChat({ model: "m", max_tokens: 5, messages: [{ role: "user", content: "x" }, { role: "assistant", content: msg.content }] });
    expect((chat.messages as Json[])[1]).toEqual((completion.choices as Json[])[0]!.message);
  });

  it("parallel tool calls all at index 0: a new id starts a new tool_use block, the one before it stopped", async () => {
    const client = new Anthropic({ apiKey: "k", baseURL: `${base}/same-index`, maxRetries: 0 });
    const stream = client.messages.stream({ model: "m", max_tokens: 10, messages: [{ role: "user", content: "x" }] });
    const types: string[] = [];
    stream.on("streamEvent", (e) => types.push(e.type === "content_block_delta" ? `delta:${e.delta.type}` : `${e.type}${"index" in e ? `:${e.index}` : ""}`));
    const final = await stream.finalMessage();
    expect(types).toEqual([
      "message_start",
      "content_block_start:0",
      "delta:input_json_delta",
      "delta:input_json_delta",
      "content_block_stop:0",
      "content_block_start:1",
      "delta:input_json_delta",
      "delta:input_json_delta",
      "content_block_stop:1",
      "message_delta",
      "message_stop",
    ]);
    expect(final.content).toEqual([
      { type: "tool_use", id: "call_a", name: "get_weather", input: { city: "Paris" } },
      { type: "tool_use", id: "call_b", name: "get_time", input: { tz: "CET" } },
    ]);
    expect(final.stop_reason).toBe("tool_use");
  });

  it("a failure after the first byte is one error event", () => {
    const t = new MessagesStreamTranslator("m");
    t.chunk(chatChunks[1]!);
    expect(t.fail({ code: "upstream_timeout", message: "no token for 30 s" })).toEqual([`event: error\ndata: {"type":"error","error":{"type":"timeout_error","message":"no token for 30 s"}}\n\n`]);
  });
});
