// Reasoning on POST /v1/responses through a real router (real Redis response
// store, real Postgres keys and ledger), driven by the official `openai`
// SDK: against the faithful Anthropic fake — which thinks, signs its
// thinking and refuses a tool-result turn whose assistant message does not
// start with it — and the OpenRouter fake serving a Claude model. The answer
// carries a reasoning item first (whole and streamed), its encrypted_content
// when included; a tool-use turn goes on with the signed thinking, stored
// (previous_response_id) or sent back by the client (store: false); listed
// and counted as OpenAI's input items.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice } from "@switchyard/db";
import { FAKE_THINKING, FakeAnthropic, thinkingSignature } from "../fixtures/fake-anthropic.ts";
import { FAKE_REASONING, FakeOpenRouter, fakeReasoningSignature } from "../fixtures/fake-openrouter.ts";
import { mintEncryptedContent, readEncryptedContent } from "../../apps/router/src/translate/responses/reasoning.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const MODEL = "claude-sonnet-4-5";
const OR_MODEL = "anthropic/claude-sonnet-4";
const claude = "anthropic-claude-v1";
/** The fake streams its thinking one word (one token) at a time. */
const THINKING_PIECES = FAKE_THINKING.match(/\S+\s*/g)!;
const signedThinking = { type: "reasoning.text", text: FAKE_THINKING, signature: thinkingSignature(FAKE_THINKING), format: claude, index: 0 };
/** What Anthropic must get first in the tool-use turn. */
const thinkingBlock = { type: "thinking", thinking: FAKE_THINKING, signature: signedThinking.signature };
const weather: OpenAI.Responses.FunctionTool = { type: "function", name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] }, strict: false };
const ENCRYPTED: OpenAI.Responses.ResponseIncludable[] = ["reasoning.encrypted_content"];

let fx: RouterFixture;
let anthropic: FakeAnthropic;
let openrouter: FakeOpenRouter;
let client: OpenAI;

beforeAll(async () => {
  anthropic = await new FakeAnthropic("sk-ant-rr").start();
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-rr" }).start();
  fx = await startTestRouter({ "providers.anthropic": { apiKey: "sk-ant-rr", baseUrl: anthropic.url }, "providers.openrouter": { apiKey: "sk-or-rr", baseUrl: openrouter.url }, "billing.refreshMs": 100 });
  await setPrice(fx.db.db, { backend: "anthropic", model: MODEL, inputMicroPerMtok: 3_000_000n, outputMicroPerMtok: 15_000_000n });
  await setPrice(fx.db.db, { backend: "openrouter", model: OR_MODEL, inputMicroPerMtok: 3_000_000n, outputMicroPerMtok: 15_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 10_000n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", MODEL) && fx.router.deps.guard.deps.prices.price("openrouter", OR_MODEL), { what: "prices loaded" });
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await fx?.close();
  await anthropic?.stop();
  await openrouter?.stop();
});

type Body = Partial<OpenAI.Responses.ResponseCreateParamsNonStreaming>;
/** A request that thinks: medium effort, a 2048-token budget under 4096 for Claude Sonnet 4.5. */
const thinking = (body: Body): OpenAI.Responses.ResponseCreateParamsNonStreaming => ({ model: MODEL, input: "Weather in Paris?", reasoning: { effort: "medium" }, max_output_tokens: 4096, ...body });
const create = (body: Body) => client.responses.create(thinking(body));

/** A streamed response: its events, and the response.completed one's response. */
async function streamed(body: Body): Promise<{ events: OpenAI.Responses.ResponseStreamEvent[]; response: OpenAI.Responses.Response }> {
  const stream = await client.responses.create({ ...thinking(body), stream: true });
  const events: OpenAI.Responses.ResponseStreamEvent[] = [];
  for await (const e of stream) events.push(e);
  const last = events.at(-1)!;
  if (last.type !== "response.completed") throw new Error(`stream ended with ${last.type}`);
  return { events, response: last.response };
}

const answer = (stream: boolean, body: Body) => (stream ? streamed(body).then((s) => s.response) : create(body));

const lastSent = (path = "/v1/messages") => anthropic.requests.filter((r) => r.path === path).at(-1)!.body as Record<string, unknown> & { messages: Array<{ role: string; content: unknown }> };

/** Output items without their ids (minted per answer), encrypted_content read back as the reasoning_details it carries. */
const shape = (output: OpenAI.Responses.ResponseOutputItem[]) =>
  output.map((item) => {
    const { id: _, ...rest } = item as unknown as Record<string, unknown>;
    return typeof rest.encrypted_content === "string" ? { ...rest, encrypted_content: readEncryptedContent(rest.encrypted_content, "x") } : rest;
  });

async function refusal(p: Promise<unknown>): Promise<InstanceType<typeof OpenAI.APIError>> {
  const err = await p.then(() => undefined, (e: unknown) => e);
  if (!(err instanceof OpenAI.APIError)) throw new Error("expected an API error");
  return err;
}

describe("an answer that reasoned", () => {
  it("has a reasoning item first, its summary Claude's thinking; encrypted_content only with include, carrying the signed reasoning_details", async () => {
    anthropic.enqueue({ kind: "ok", text: "It is sunny.", completionTokens: 3 });
    const res = await create({});
    expect(lastSent().thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect(res.output.map((o) => o.type)).toEqual(["reasoning", "message"]);
    // OpenAI leaves encrypted_content out unless include asks for it.
    expect(res.output[0]).toEqual({ id: expect.stringMatching(/^rs_[0-9a-f]{32}$/), type: "reasoning", summary: [{ type: "summary_text", text: FAKE_THINKING }] });
    expect(res.output_text).toBe("It is sunny.");
    // Thinking is output; Anthropic does not say how much of it was thinking.
    expect(res.usage).toMatchObject({ output_tokens: 3 + THINKING_PIECES.length, output_tokens_details: { reasoning_tokens: 0 } });

    const withContent = await create({ include: ENCRYPTED });
    const rs = withContent.output[0] as OpenAI.Responses.ResponseReasoningItem;
    expect(rs.encrypted_content).toMatch(/^swy\.rd1\.[A-Za-z0-9_-]+$/);
    expect(readEncryptedContent(rs.encrypted_content, "x")).toEqual([signedThinking]);
    expect(await client.responses.retrieve(withContent.id)).toEqual(withContent);
  });

  it("streams the reasoning item and its summary before the message, in OpenAI's event order; response.completed has the whole answer's items", async () => {
    anthropic.enqueue({ kind: "ok", text: "It is sunny.", completionTokens: 3 });
    const { events, response } = await streamed({ include: ENCRYPTED });
    expect(events.map((e) => `${e.type}${"output_index" in e ? `:${e.output_index}` : ""}`)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added:0",
      "response.reasoning_summary_part.added:0",
      ...THINKING_PIECES.map(() => "response.reasoning_summary_text.delta:0"),
      "response.reasoning_summary_text.done:0",
      "response.reasoning_summary_part.done:0",
      "response.output_item.done:0",
      "response.output_item.added:1",
      "response.content_part.added:1",
      "response.output_text.delta:1",
      "response.output_text.delta:1",
      "response.output_text.delta:1",
      "response.output_text.done:1",
      "response.content_part.done:1",
      "response.output_item.done:1",
      "response.completed",
    ]);
    expect(events.map((e) => e.sequence_number)).toEqual(events.map((_, i) => i));
    const rsId = response.output[0]!.id;
    const deltas = events.filter((e) => e.type === "response.reasoning_summary_text.delta");
    expect(deltas.map((e) => e.delta)).toEqual(THINKING_PIECES);
    expect(deltas.every((e) => e.item_id === rsId && e.summary_index === 0)).toBe(true);
    expect(events.find((e) => e.type === "response.reasoning_summary_text.done")).toMatchObject({ item_id: rsId, output_index: 0, summary_index: 0, text: FAKE_THINKING });
    expect(events[2]).toMatchObject({ item: { id: rsId, type: "reasoning", summary: [] } });
    expect(events.find((e) => e.type === "response.output_item.done" && e.output_index === 0)).toMatchObject({ item: response.output[0] });

    anthropic.enqueue({ kind: "ok", text: "It is sunny.", completionTokens: 3 });
    const whole = await create({ include: ENCRYPTED });
    expect(shape(response.output)).toEqual(shape(whole.output));
    expect(response.usage).toEqual(whole.usage);
    expect((await client.responses.retrieve(response.id)).output).toEqual(response.output);
  });

  it("from OpenRouter: the reasoning item, and its reasoning tokens in usage", async () => {
    const res = await client.responses.create({ model: OR_MODEL, input: "hello", reasoning: { effort: "low" } });
    expect(openrouter.requests.at(-1)!.body).toMatchObject({ reasoning_effort: "low" });
    expect(res.output[0]).toMatchObject({ type: "reasoning", summary: [{ type: "summary_text", text: FAKE_REASONING }] });
    expect(res.usage?.output_tokens_details.reasoning_tokens).toBe(FAKE_REASONING.match(/\S+\s*/g)!.length);
    // A continuation hands OpenRouter the signed reasoning back on the assistant turn.
    await client.responses.create({ model: OR_MODEL, input: "and again", previous_response_id: res.id });
    const sent = openrouter.requests.at(-1)!.body as { messages: Array<Record<string, unknown>> };
    expect(sent.messages[1]).toMatchObject({ role: "assistant", reasoning: FAKE_REASONING, reasoning_details: [{ type: "reasoning.text", text: FAKE_REASONING, signature: fakeReasoningSignature(FAKE_REASONING), format: claude, index: 0 }] });
  });
});

describe("a tool-use conversation with thinking", () => {
  const toolTurn = (stream: boolean, body: Body = {}) => {
    anthropic.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    return answer(stream, { tools: [weather], ...body });
  };
  const callOf = (r: OpenAI.Responses.Response) => r.output.find((o): o is OpenAI.Responses.ResponseFunctionToolCall => o.type === "function_call")!;
  const result = (r: OpenAI.Responses.Response): OpenAI.Responses.ResponseInputItem => ({ type: "function_call_output", call_id: callOf(r).call_id, output: "18C and sunny" });
  const expectThinkingFirst = (r: OpenAI.Responses.Response) =>
    expect(lastSent().messages[1]).toEqual({ role: "assistant", content: [thinkingBlock, { type: "tool_use", id: callOf(r).call_id, name: "get_weather", input: { city: "Paris" } }] });

  it.each([false, true])("goes on from the stored response with previous_response_id: Anthropic gets the signed thinking first (streamed: %s)", async (stream) => {
    const first = await toolTurn(stream);
    expect(first.output.map((o) => o.type)).toEqual(["reasoning", "function_call"]);
    const second = await answer(stream, { tools: [weather], previous_response_id: first.id, input: [result(first)] });
    expect(second.status).toBe("completed");
    expectThinkingFirst(first);
  });

  it("lists the stored reasoning item among the continuation's input items, as OpenAI lists one: by its summary", async () => {
    const first = await toolTurn(false, { include: ENCRYPTED });
    const second = await create({ tools: [weather], previous_response_id: first.id, input: [result(first)] });
    const items: OpenAI.Responses.ResponseItem[] = [];
    for await (const item of client.responses.inputItems.list(second.id, { order: "asc" })) items.push(item);
    expect(items.map((i) => i.type)).toEqual(["message", "reasoning", "function_call", "function_call_output"]);
    expect(items[1]).toEqual({ id: first.output[0]!.id, type: "reasoning", summary: [{ type: "summary_text", text: FAKE_THINKING }] });
    expect(items[2]).toMatchObject({ id: first.output[1]!.id, call_id: callOf(first).call_id });
  });

  it.each([false, true])("goes on statelessly (store: false) when the client sends the output back with its encrypted_content (streamed: %s)", async (stream) => {
    const first = await toolTurn(stream, { store: false, include: ENCRYPTED });
    const input = [{ role: "user" as const, content: "Weather in Paris?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), result(first)];
    const second = await answer(stream, { tools: [weather], store: false, include: ENCRYPTED, input });
    expect(second.status).toBe("completed");
    expectThinkingFirst(first);
  });

  it("without encrypted_content the thinking cannot come back: Anthropic's 400, passed on", async () => {
    const first = await toolTurn(false, { store: false });
    const input = [{ role: "user" as const, content: "Weather in Paris?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), result(first)];
    const err = await refusal(create({ tools: [weather], store: false, input }));
    expect(err.status).toBe(400);
    expect(err.message).toContain("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`");
  });

  it("skips another provider's reasoning item; a minted one that was tampered with is a 400 naming it, nothing sent", async () => {
    anthropic.enqueue({ kind: "ok", text: "Hello." });
    const foreign = { type: "reasoning" as const, id: "rs_openai", summary: [{ type: "summary_text" as const, text: "Thinking about greetings" }], encrypted_content: "gAAAAABoOpenAIsOwnEncryptedState" };
    const ok = await create({ input: [{ role: "user", content: "hi" }, foreign, { role: "assistant", content: "Hello!" }, { role: "user", content: "again" }] });
    expect(ok.status).toBe("completed");
    expect(lastSent().messages).toEqual([
      { role: "user", content: "hi" },
      { role: "assistant", content: "Hello!" },
      { role: "user", content: "again" },
    ]);

    const first = await toolTurn(false, { store: false, include: ENCRYPTED });
    const rs = first.output[0] as OpenAI.Responses.ResponseReasoningItem;
    const before = anthropic.requests.length;
    const tampered = { ...rs, encrypted_content: `${rs.encrypted_content!.slice(0, -4)}!!!!` };
    const input = [{ role: "user" as const, content: "Weather in Paris?" }, tampered, first.output[1] as OpenAI.Responses.ResponseInputItem, result(first)];
    const err = await refusal(create({ tools: [weather], store: false, input }));
    expect([err.status, (err.error as { param?: string }).param]).toEqual([400, "input[1].encrypted_content"]);
    expect(anthropic.requests.length).toBe(before);
    // A well-formed one whose signature was edited reads, and is Anthropic's to refuse.
    const edited = { ...rs, encrypted_content: mintEncryptedContent([{ ...signedThinking, text: `${FAKE_THINKING} (edited)` }]) };
    const forged = await refusal(create({ tools: [weather], store: false, input: [input[0]!, edited, ...input.slice(2)] }));
    expect([forged.status, forged.message]).toEqual([400, expect.stringContaining("Invalid `signature` in `thinking` block")]);
    expect(anthropic.requests.length).toBe(before + 1);
  });

  it("counts input tokens with reasoning items in the input: the thinking counted where it goes, a malformed one the same 400", async () => {
    const first = await toolTurn(false, { store: false, include: ENCRYPTED });
    const input = [{ role: "user" as const, content: "Weather in Paris?" }, ...(first.output as OpenAI.Responses.ResponseInputItem[]), result(first)];
    const count = await client.responses.inputTokens.count({ model: MODEL, input, tools: [weather], reasoning: { effort: "medium" } });
    expect(count.input_tokens).toBeGreaterThan(0);
    expect(lastSent("/v1/messages/count_tokens").messages[1]!.content).toEqual([thinkingBlock, expect.objectContaining({ type: "tool_use" })]);
    const bad = [input[0]!, { ...(first.output[0] as OpenAI.Responses.ResponseReasoningItem), encrypted_content: "swy.rd1.e30" }, ...input.slice(2)];
    const err = await refusal(client.responses.inputTokens.count({ model: MODEL, input: bad, tools: [weather] }));
    expect([err.status, (err.error as { param?: string }).param]).toEqual([400, "input[1].encrypted_content"]);
  });
});
