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
import { readEncryptedContent } from "./responses/reasoning.ts";

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
/** A whole chat.completion of one assistant message that ended in tool calls. */
const toolCallCompletion = (message: Json, usage: Json): Json => ({
  id,
  object: "chat.completion",
  choices: [{ index: 0, finish_reason: "tool_calls", message: { role: "assistant", ...message } }],
  usage,
});
const completion = toolCallCompletion(
  {
    content: "Checking both.",
    tool_calls: [
      { id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } },
      { id: "call_b", type: "function", function: { name: "get_time", arguments: '{"tz":"CET"}' } },
    ],
  },
  { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42, prompt_tokens_details: { cached_tokens: 10 } },
);

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

// Claude's thinking as the chat hop carries it (OpenRouter's reasoning_details):
// an empty opening piece, a thinking entry in pieces with its signature last,
// an encrypted one whole, a second thinking entry, then text and a tool call.
const CLAUDE = "anthropic-claude-v1";
const SIG_A = "EqQBCkgIARABGAIiQsigA";
const SIG_B = "EqQBCkgIARABGAIiQsigB";
const REDACTED = "EmwKAhgBEgy3va3pzix/LafPsn4a";
const thinkingChunks: Json[] = [
  chunk({ role: "assistant", content: "", reasoning: null, reasoning_details: [] }),
  chunk({ content: "", reasoning: "", reasoning_details: [{ type: "reasoning.text", text: "", signature: "", format: CLAUDE, index: 0 }] }),
  chunk({ content: "", reasoning: "Weather ", reasoning_details: [{ type: "reasoning.text", text: "Weather ", format: CLAUDE, index: 0 }] }),
  chunk({ content: "", reasoning: "first.", reasoning_details: [{ type: "reasoning.text", text: "first.", format: CLAUDE, index: 0 }] }),
  chunk({ content: "", reasoning_details: [{ type: "reasoning.text", signature: SIG_A, format: CLAUDE, index: 0 }] }),
  chunk({ content: "", reasoning_details: [{ type: "reasoning.encrypted", data: REDACTED, format: CLAUDE, index: 1 }] }),
  chunk({ content: "", reasoning: "Then time.", reasoning_details: [{ type: "reasoning.text", text: "Then time.", format: CLAUDE, index: 2 }] }),
  chunk({ content: "", reasoning_details: [{ type: "reasoning.text", signature: SIG_B, format: CLAUDE, index: 2 }] }),
  chunk({ content: "Checking." }),
  chunk({ tool_calls: [{ index: 0, id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }] }),
  chunk({}, "tool_calls"),
  chatChunks.at(-1)!,
];
/** The same answer whole, its details still in pieces (merged by index). */
const thinkingCompletion = toolCallCompletion(
  {
    content: "Checking.",
    tool_calls: [{ id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
    reasoning: "Weather first.Then time.",
    reasoning_details: [
      { type: "reasoning.text", text: "Weather ", format: CLAUDE, index: 0 },
      { type: "reasoning.text", text: "first.", signature: SIG_A, format: CLAUDE, index: 0 },
      { type: "reasoning.encrypted", data: REDACTED, format: CLAUDE, index: 1 },
      { type: "reasoning.text", text: "Then time.", signature: SIG_B, format: CLAUDE, index: 2 },
    ],
  },
  { prompt_tokens: 30, completion_tokens: 12, total_tokens: 42 },
);
const thinkingContent = [
  { type: "thinking", thinking: "Weather first.", signature: SIG_A },
  { type: "redacted_thinking", data: REDACTED },
  { type: "thinking", thinking: "Then time.", signature: SIG_B },
  { type: "text", text: "Checking." },
  { type: "tool_use", id: "call_a", name: "get_weather", input: { city: "Paris" } },
];

/** The frames' data objects, in order. */
const eventsOf = (frames: string): Json[] =>
  frames
    .trim()
    .split("\n\n")
    .map((f) => JSON.parse(f.split("\n")[1]!.slice("data: ".length)) as Json);

async function framesOf(t: StreamTranslator, chunks: Json[] = chatChunks): Promise<string> {
  let out = "";
  for (const c of chunks) out += t.chunk(c).join("");
  return out + (await t.done()).join("");
}

let server: Server;
let base: string;
const seed = { id: `resp_${"1".repeat(32)}`, createdAt: 1_700_000_000, body: { model: "m", input: "x" } as Json };
/** A request that asks for its reasoning items' encrypted_content. */
const encryptedSeed = { ...seed, body: { ...seed.body, include: ["reasoning.encrypted_content"] } as Json };

beforeAll(async () => {
  server = createServer((req, res) => {
    void (async () => {
      // Under /same-index the answer is sameIndexChunks', under /thinking thinkingChunks' with thinking asked for.
      const prefix = /^\/(same-index|thinking)\//.exec(req.url ?? "")?.[1];
      const path = prefix ? req.url!.slice(prefix.length + 1) : req.url;
      const t = path === "/v1/responses" ? new ResponsesStreamTranslator(prefix === "thinking" ? encryptedSeed : seed, async () => {}) : new MessagesStreamTranslator("m", prefix === "thinking" ? { thinking: "summarized" } : {});
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(await framesOf(t, prefix === "same-index" ? sameIndexChunks : prefix === "thinking" ? thinkingChunks : chatChunks));
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

describe("Responses: reasoning", () => {
  /** thinkingCompletion's reasoning_details merged by index, as a streamed answer's are stored. */
  const merged = [
    { type: "reasoning.text", text: "Weather first.", signature: SIG_A, format: CLAUDE, index: 0 },
    { type: "reasoning.encrypted", data: REDACTED, format: CLAUDE, index: 1 },
    { type: "reasoning.text", text: "Then time.", signature: SIG_B, format: CLAUDE, index: 2 },
  ];
  const decoded = (item: unknown) => readEncryptedContent((item as Json).encrypted_content, "x");

  it("streams a reasoning item first — its summary the reasoning text, OpenAI's summary events — and the SDK assembles it before the message and call", async () => {
    const client = new OpenAI({ apiKey: "k", baseURL: `${base}/thinking/v1`, maxRetries: 0 });
    const stream = client.responses.stream({ model: "m", input: "x", include: ["reasoning.encrypted_content"] });
    const events: OpenAI.Responses.ResponseStreamEvent[] = [];
    stream.on("event", (e) => events.push(e));
    const final = await stream.finalResponse();
    expect(events.map((e) => `${e.type}${"output_index" in e ? `:${e.output_index}` : ""}`)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added:0",
      "response.reasoning_summary_part.added:0",
      "response.reasoning_summary_text.delta:0",
      "response.reasoning_summary_text.delta:0",
      "response.reasoning_summary_text.delta:0",
      "response.reasoning_summary_text.done:0",
      "response.reasoning_summary_part.done:0",
      "response.output_item.done:0",
      "response.output_item.added:1",
      "response.content_part.added:1",
      "response.output_text.delta:1",
      "response.output_text.done:1",
      "response.content_part.done:1",
      "response.output_item.done:1",
      "response.output_item.added:2",
      "response.function_call_arguments.delta:2",
      "response.function_call_arguments.done:2",
      "response.output_item.done:2",
      "response.completed",
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const rs = final.output[0] as OpenAI.Responses.ResponseReasoningItem;
    expect(rs).toEqual({ id: expect.stringMatching(/^rs_[0-9a-f]{32}$/), type: "reasoning", summary: [{ type: "summary_text", text: "Weather first.Then time." }], encrypted_content: expect.stringMatching(/^swy\.rd1\.[A-Za-z0-9_-]+$/) });
    expect(events[2]).toMatchObject({ item: { id: rs.id, type: "reasoning", summary: [] } });
    expect(events[3]).toEqual({ type: "response.reasoning_summary_part.added", sequence_number: 3, item_id: rs.id, output_index: 0, summary_index: 0, part: { type: "summary_text", text: "" } });
    expect(events.slice(4, 7).map((e) => (e as OpenAI.Responses.ResponseReasoningSummaryTextDeltaEvent).delta)).toEqual(["Weather ", "first.", "Then time."]);
    expect(events[7]).toEqual({ type: "response.reasoning_summary_text.done", sequence_number: 7, item_id: rs.id, output_index: 0, summary_index: 0, text: "Weather first.Then time." });
    expect(events[8]).toEqual({ type: "response.reasoning_summary_part.done", sequence_number: 8, item_id: rs.id, output_index: 0, summary_index: 0, part: { type: "summary_text", text: "Weather first.Then time." } });
    // The stream's pieces, merged by index: signatures and the redacted data as sent.
    expect(decoded(rs)).toEqual(merged);
    expect(final.output.map((o) => o.type)).toEqual(["reasoning", "message", "function_call"]);
    expect(final.output_text).toBe("Checking.");
  });

  it("the whole answer has the same items; encrypted_content carries its reasoning_details exactly, only when asked for", () => {
    const asked = outputFromCompletion(thinkingCompletion, true);
    const message = (thinkingCompletion.choices as Json[])[0]!.message as Json;
    expect(asked.output.map((o) => o.type)).toEqual(["reasoning", "message", "function_call"]);
    expect(asked.output[0]).toEqual({ id: expect.stringMatching(/^rs_/), type: "reasoning", summary: [{ type: "summary_text", text: "Weather first.Then time." }], encrypted_content: expect.any(String) });
    expect(decoded(asked.output[0])).toEqual(message.reasoning_details);
    // The stored turn is the chat message, reasoning and all.
    expect(asked.turn).toEqual({ role: "assistant", content: "Checking.", tool_calls: message.tool_calls, reasoning: message.reasoning, reasoning_details: message.reasoning_details });
    const plain = outputFromCompletion(thinkingCompletion);
    expect(plain.output[0]).toEqual({ id: expect.stringMatching(/^rs_/), type: "reasoning", summary: [{ type: "summary_text", text: "Weather first.Then time." }] });
    // Reasoning text alone (no details): a summary, and nothing to carry.
    const textOnly = outputFromCompletion({ choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "ok", reasoning: "Hmm." } }] }, true);
    expect(textOnly.output[0]).toMatchObject({ type: "reasoning", summary: [{ type: "summary_text", text: "Hmm." }], encrypted_content: null });
    expect(textOnly.turn).toEqual({ role: "assistant", content: "ok", reasoning: "Hmm." });
    // None: no item, and the turn as before.
    const none = outputFromCompletion({ choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "ok", reasoning: null } }] }, true);
    expect(none.output.map((o) => o.type)).toEqual(["message"]);
    expect(none.turn).toEqual({ role: "assistant", content: "ok" });
  });

  it("its items sent back as input are the same chat turn again; without encrypted_content the reasoning is not there", () => {
    const asked = outputFromCompletion(thinkingCompletion, true);
    const back = inputMessages([{ role: "user", content: "x" }, ...asked.output, { type: "function_call_output", call_id: "call_a", output: "sunny" }]);
    expect(back.slice(1)).toEqual([asked.turn, { role: "tool", tool_call_id: "call_a", content: "sunny" }]);
    // Reasoning, then only the call: the call's turn takes it.
    const callOnly = inputMessages([asked.output[0], asked.output[2]]);
    expect(callOnly).toEqual([{ role: "assistant", content: null, tool_calls: asked.turn.tool_calls, reasoning: asked.turn.reasoning, reasoning_details: asked.turn.reasoning_details }]);
    const plain = outputFromCompletion(thinkingCompletion);
    expect(inputMessages(plain.output)).toEqual([{ role: "assistant", content: "Checking.", tool_calls: asked.turn.tool_calls }]);
  });

  it("a streamed answer's stored turn has its reasoning, merged; cut while thinking, it has the empty incomplete message a whole one has", async () => {
    let turn: Json | undefined;
    await framesOf(new ResponsesStreamTranslator(seed, async (f) => void (turn = f.turn)), thinkingChunks);
    expect(turn).toEqual({ role: "assistant", content: "Checking.", tool_calls: [{ id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }], reasoning: "Weather first.Then time.", reasoning_details: merged });

    const cutChunks = [...thinkingChunks.slice(0, 4), chunk({}, "length")];
    const frames = eventsOf(await framesOf(new ResponsesStreamTranslator(seed, async () => {}), cutChunks));
    const last = frames.at(-1)!;
    expect(last.type).toBe("response.incomplete");
    const output = (last.response as Json).output as Json[];
    expect(output.map((i) => [i.type, i.status])).toEqual([
      ["reasoning", undefined],
      ["message", "incomplete"],
    ]);
    const whole = outputFromCompletion({ choices: [{ index: 0, finish_reason: "length", message: { role: "assistant", content: "", reasoning: "Weather first." } }] });
    expect(whole.output.map((i) => [i.type, i.status])).toEqual([
      ["reasoning", undefined],
      ["message", "incomplete"],
    ]);
    expect(output[0]).toEqual({ ...whole.output[0], id: output[0]!.id });
  });

  it("input: another provider's reasoning item is skipped; a minted one that does not read is a 400 naming it; two join one turn, indexes apart; one before a user message goes nowhere", () => {
    const call = { type: "function_call", call_id: "c1", name: "f", arguments: "{}" };
    expect(inputMessages([{ type: "reasoning", summary: [{ type: "summary_text", text: "hmm" }], encrypted_content: "gAAAAABopenai" }, call])).toEqual([{ role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] }]);
    for (const bad of ["swy.rd1.not base64!", "swy.rd1.", `swy.rd1.${Buffer.from('{"a":1}').toString("base64url")}`, `swy.rd1.${Buffer.from("[1]").toString("base64url")}`]) {
      expect(() => inputMessages([{ role: "user", content: "x" }, { type: "reasoning", summary: [], encrypted_content: bad }, call])).toThrow(expect.objectContaining({ status: 400, param: "input[1].encrypted_content" }));
    }
    const one = outputFromCompletion(thinkingCompletion, true).output[0]!;
    const [turn] = inputMessages([one, { ...one, summary: [] }, call]);
    expect((turn!.reasoning_details as Json[]).map((d) => d.index)).toEqual([0, 0, 1, 2, 3, 3, 4, 5]);
    expect(turn!.reasoning).toBe("Weather first.Then time.");
    expect(inputMessages([one, { role: "user", content: "y" }, call])).toEqual([{ role: "user", content: "y" }, { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: "{}" } }] }]);
  });

  it("usage's reasoning tokens come from the chat usage's completion_tokens_details", () => {
    const { usage } = outputFromCompletion({ choices: [], usage: { prompt_tokens: 5, completion_tokens: 20, completion_tokens_details: { reasoning_tokens: 12 } } });
    expect(usage).toMatchObject({ output_tokens: 20, output_tokens_details: { reasoning_tokens: 12 } });
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

  it("thinking, redacted thinking, text and a tool call: blocks in the chat answer's order, indexes consecutive, signatures as sent; the SDK assembles them", async () => {
    const client = new Anthropic({ apiKey: "k", baseURL: `${base}/thinking`, maxRetries: 0 });
    const stream = client.messages.stream({ model: "m", max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 2048 }, messages: [{ role: "user", content: "x" }] });
    const types: string[] = [];
    stream.on("streamEvent", (e) =>
      types.push(e.type === "content_block_start" ? `start:${e.index}:${e.content_block.type}` : e.type === "content_block_delta" ? `delta:${e.index}:${e.delta.type}` : e.type === "content_block_stop" ? `stop:${e.index}` : e.type),
    );
    const final = await stream.finalMessage();
    expect(types).toEqual([
      "message_start",
      "start:0:thinking",
      "delta:0:thinking_delta",
      "delta:0:thinking_delta",
      "delta:0:signature_delta",
      "stop:0",
      "start:1:redacted_thinking",
      "stop:1",
      "start:2:thinking",
      "delta:2:thinking_delta",
      "delta:2:signature_delta",
      "stop:2",
      "start:3:text",
      "delta:3:text_delta",
      "stop:3",
      "start:4:tool_use",
      "delta:4:input_json_delta",
      "stop:4",
      "message_delta",
      "message_stop",
    ]);
    expect(final.content).toEqual(thinkingContent);
    // The redacted block comes whole in its start, as Anthropic sends it.
    const frames = eventsOf(await framesOf(new MessagesStreamTranslator("m", { thinking: "summarized" }), thinkingChunks));
    expect(frames.find((f) => f.index === 1 && f.type === "content_block_start")).toEqual({ type: "content_block_start", index: 1, content_block: { type: "redacted_thinking", data: REDACTED } });
  });

  it("the whole answer's reasoning_details, merged by index, are the same blocks first; they go back in as the same entries, merged", () => {
    const msg = messageFromCompletion(thinkingCompletion, "m", { thinking: "summarized" });
    expect(msg.content).toEqual(thinkingContent);
    const { chat } = messagesToChat({ model: "m", max_tokens: 4096, messages: [{ role: "user", content: "x" }, { role: "assistant", content: msg.content }] });
    expect((chat.messages as Json[])[1]).toEqual({
      role: "assistant",
      content: "Checking.",
      tool_calls: [{ id: "call_a", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
      reasoning: "Weather first.Then time.",
      reasoning_details: [
        { type: "reasoning.text", text: "Weather first.", signature: SIG_A, format: CLAUDE, index: 0 },
        { type: "reasoning.encrypted", data: REDACTED, format: CLAUDE, index: 1 },
        { type: "reasoning.text", text: "Then time.", signature: SIG_B, format: CLAUDE, index: 2 },
      ],
    });
  });

  it("thinking not asked for shows none, whole or streamed, whatever the model reasoned", async () => {
    expect(messageFromCompletion(thinkingCompletion, "m").content).toEqual(thinkingContent.slice(3));
    const starts = eventsOf(await framesOf(new MessagesStreamTranslator("m"), thinkingChunks)).filter((f) => f.type === "content_block_start");
    expect(starts.map((f) => [f.index, (f.content_block as Json).type])).toEqual([
      [0, "text"],
      [1, "tool_use"],
    ]);
  });

  it("a model that reports only reasoning text (no details) gets one thinking block with an empty signature; display omitted keeps signatures only", async () => {
    const raw: Json = { choices: [{ index: 0, finish_reason: "stop", message: { role: "assistant", content: "ok", reasoning: "Hmm, fine." } }] };
    expect(messageFromCompletion(raw, "m", { thinking: "summarized" }).content).toEqual([
      { type: "thinking", thinking: "Hmm, fine.", signature: "" },
      { type: "text", text: "ok" },
    ]);
    const events = eventsOf(await framesOf(new MessagesStreamTranslator("m", { thinking: "summarized" }), [chunk({ reasoning: "Hmm, " }), chunk({ reasoning: "fine." }), chunk({ content: "ok" }), chunk({}, "stop")]));
    expect(events.slice(1, -2)).toEqual([
      { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } },
      { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "Hmm, " } },
      { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "fine." } },
      { type: "content_block_stop", index: 0 },
      { type: "content_block_start", index: 1, content_block: { type: "text", text: "" } },
      { type: "content_block_delta", index: 1, delta: { type: "text_delta", text: "ok" } },
      { type: "content_block_stop", index: 1 },
    ]);
    // Omitted: nothing of the text, the signatures and redacted data kept; unsigned reasoning leaves no block.
    expect(messageFromCompletion(thinkingCompletion, "m", { thinking: "omitted" }).content).toEqual([
      { type: "thinking", thinking: "", signature: SIG_A },
      { type: "redacted_thinking", data: REDACTED },
      { type: "thinking", thinking: "", signature: SIG_B },
      ...thinkingContent.slice(3),
    ]);
    expect(messageFromCompletion(raw, "m", { thinking: "omitted" }).content).toEqual([{ type: "text", text: "ok" }]);
    const omitted = eventsOf(await framesOf(new MessagesStreamTranslator("m", { thinking: "omitted" }), thinkingChunks));
    expect(omitted.filter((f) => f.type === "content_block_delta" && (f.delta as Json).type === "thinking_delta")).toEqual([]);
    expect(omitted.filter((f) => f.type === "content_block_delta").map((f) => f.delta)).toEqual([
      { type: "signature_delta", signature: SIG_A },
      { type: "signature_delta", signature: SIG_B },
      { type: "text_delta", text: "Checking." },
      { type: "input_json_delta", partial_json: '{"city":"Paris"}' },
    ]);
  });

  it("a failure after the first byte is one error event", () => {
    const t = new MessagesStreamTranslator("m");
    t.chunk(chatChunks[1]!);
    expect(t.fail({ code: "upstream_timeout", message: "no token for 30 s" })).toEqual([`event: error\ndata: {"type":"error","error":{"type":"timeout_error","message":"no token for 30 s"}}\n\n`]);
  });
});
