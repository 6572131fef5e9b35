// Claude's extended thinking through a real router (real Redis and Postgres)
// to the official `openai` SDK, against the faithful Anthropic fake, which
// signs its thinking and refuses a thinking block whose signature does not
// verify: OpenRouter's `reasoning` asks for it, the answer carries it as
// `message.reasoning` / `reasoning_details` (streamed as OpenRouter streams
// them), and a client that sends the assistant message back — as a tool-use
// turn must — gets its thinking to Anthropic unmodified.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice } from "@switchyard/db";
import { FAKE_THINKING, FakeAnthropic, REDACTED_THINKING_TRIGGER, thinkingSignature } from "../fixtures/fake-anthropic.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const MODEL = "claude-sonnet-4-5";
const claude = "anthropic-claude-v1";
/** The fake streams one token per word of its thinking, all billed as output. */
const THINKING_TOKENS = FAKE_THINKING.split(" ").length;
const signedThinking = { type: "reasoning.text", text: FAKE_THINKING, signature: thinkingSignature(FAKE_THINKING), format: claude, index: 0 };
const weather = { type: "function" as const, function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };

let fx: RouterFixture;
let anthropic: FakeAnthropic;
let client: OpenAI;

beforeAll(async () => {
  anthropic = await new FakeAnthropic("sk-ant-think").start();
  fx = await startTestRouter({ "providers.anthropic": { apiKey: "sk-ant-think", baseUrl: anthropic.url }, "billing.refreshMs": 100 });
  await setPrice(fx.db.db, { backend: "anthropic", model: MODEL, inputMicroPerMtok: 3_000_000n, outputMicroPerMtok: 15_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 10_000n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", MODEL), { what: "price loaded" });
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await fx?.close();
  await anthropic?.stop();
});

/** OpenRouter's extension to the chat body and message, which the SDK's types do not name. */
type Params = OpenAI.Chat.ChatCompletionCreateParamsNonStreaming & { reasoning?: Record<string, unknown> };
type Message = OpenAI.Chat.ChatCompletionMessage & { reasoning?: string | null; reasoning_details?: Array<Record<string, unknown>> };
type Delta = { content?: string | null; reasoning?: string; reasoning_details?: Array<Record<string, unknown>>; tool_calls?: Array<{ index: number; id?: string; function?: { name?: string; arguments?: string } }> };

const ask = (body: Partial<Params>) => client.chat.completions.create({ model: MODEL, messages: [{ role: "user", content: "Weather in Paris?" }], max_tokens: 4096, ...body } as Params);

async function answer(body: Partial<Params>): Promise<{ message: Message; usage: OpenAI.CompletionUsage | undefined }> {
  const r = await ask(body);
  return { message: r.choices[0]!.message as Message, usage: r.usage };
}

/**
 * A streamed answer put together as a client does: content and tool calls
 * joined, reasoning_details merged by index (text joined, signature and
 * data taken) — and each delta, in order.
 */
async function streamed(body: Partial<Params>) {
  const stream = await client.chat.completions.create({ ...({ model: MODEL, messages: [{ role: "user", content: "Weather in Paris?" }], max_tokens: 4096 } as Params), ...body, stream: true, stream_options: { include_usage: true } } as OpenAI.Chat.ChatCompletionCreateParamsStreaming);
  const deltas: Delta[] = [];
  let usage: OpenAI.CompletionUsage | undefined;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    const d = chunk.choices[0]?.delta as Delta | undefined;
    if (d) deltas.push(d);
  }
  const details = new Map<number, Record<string, unknown>>();
  const calls = new Map<number, { id: string; type: "function"; function: { name: string; arguments: string } }>();
  let content = "";
  let reasoning = "";
  for (const d of deltas) {
    content += d.content ?? "";
    reasoning += d.reasoning ?? "";
    for (const piece of d.reasoning_details ?? []) {
      const at = details.get(piece.index as number);
      if (!at) details.set(piece.index as number, { ...piece });
      else {
        if (typeof piece.text === "string") at.text = String(at.text ?? "") + piece.text;
        if (piece.signature) at.signature = piece.signature;
        if (piece.data) at.data = piece.data;
      }
    }
    for (const c of d.tool_calls ?? []) {
      const at = calls.get(c.index) ?? { id: "", type: "function" as const, function: { name: "", arguments: "" } };
      if (c.id) at.id = c.id;
      at.function.name += c.function?.name ?? "";
      at.function.arguments += c.function?.arguments ?? "";
      calls.set(c.index, at);
    }
  }
  const message = {
    role: "assistant" as const,
    content: content === "" ? null : content,
    reasoning,
    reasoning_details: [...details.values()],
    ...(calls.size > 0 ? { tool_calls: [...calls.values()] } : {}),
  };
  return { deltas, message, usage };
}

const lastSent = () => anthropic.requests.at(-1)!.body as Record<string, unknown> & { messages: Array<{ role: string; content: unknown }> };

describe("an answer with thinking", () => {
  it("carries Claude's thinking as reasoning and signed reasoning_details; its tokens are billed as output", async () => {
    anthropic.enqueue({ kind: "ok", text: "It is sunny.", promptTokens: 12, completionTokens: 3 });
    const { message, usage } = await answer({ reasoning: { max_tokens: 2048 } });
    expect(lastSent()).toMatchObject({ max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 2048 } });
    expect(message).toMatchObject({ role: "assistant", content: "It is sunny.", reasoning: FAKE_THINKING, reasoning_details: [signedThinking] });
    expect(usage).toMatchObject({ prompt_tokens: 12, completion_tokens: 3 + THINKING_TOKENS });
  });

  it("streams it first, as OpenRouter does: text pieces, then the signature as a piece of its own", async () => {
    anthropic.enqueue({ kind: "ok", text: "It is sunny.", promptTokens: 12, completionTokens: 3 });
    const { deltas, message, usage } = await streamed({ reasoning: { effort: "medium" } });
    expect(lastSent().thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect(message).toMatchObject({ content: "It is sunny.", reasoning: FAKE_THINKING, reasoning_details: [signedThinking] });
    const firstContent = deltas.findIndex((d) => d.content);
    const lastReasoning = deltas.findLastIndex((d) => d.reasoning_details);
    expect(lastReasoning).toBeGreaterThan(0);
    expect(lastReasoning).toBeLessThan(firstContent);
    // The signature's piece carries no reasoning text.
    expect(deltas[lastReasoning]).toEqual({ reasoning_details: [{ type: "reasoning.text", signature: signedThinking.signature, format: claude, index: 0 }] });
    expect(usage).toMatchObject({ completion_tokens: 3 + THINKING_TOKENS });
  });

  it("carries a redacted block as an encrypted entry, whole and streamed", async () => {
    const ask = { messages: [{ role: "user" as const, content: REDACTED_THINKING_TRIGGER }], reasoning: { enabled: true } };
    const whole = await answer(ask);
    // Claude Sonnet 4.5 thinks by budget only: enabled alone is a medium effort's, half of max_tokens.
    expect(lastSent().thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect(whole.message.reasoning).toBe(FAKE_THINKING);
    expect(whole.message.reasoning_details).toEqual([signedThinking, { type: "reasoning.encrypted", data: expect.any(String), format: claude, index: 1 }]);
    const { message } = await streamed(ask);
    expect(message.reasoning_details).toEqual(whole.message.reasoning_details);
  });

  it("reasoning_effort asks for it too", async () => {
    await answer({ reasoning_effort: "medium", max_tokens: 4000 });
    expect(lastSent().thinking).toEqual({ type: "enabled", budget_tokens: 2000 });
  });

  it("exclude: thinking runs, and is billed, but the answer carries none", async () => {
    anthropic.enqueue({ kind: "ok", text: "It is sunny.", completionTokens: 3 });
    const { message, usage } = await answer({ reasoning: { max_tokens: 2048, exclude: true } });
    expect(lastSent().thinking).toEqual({ type: "enabled", budget_tokens: 2048 });
    expect(message.reasoning).toBeNull();
    expect(message).not.toHaveProperty("reasoning_details");
    expect(usage?.completion_tokens).toBe(3 + THINKING_TOKENS);
    anthropic.enqueue({ kind: "ok", text: "It is sunny.", completionTokens: 3 });
    const s = await streamed({ reasoning: { max_tokens: 2048, exclude: true } });
    expect(s.deltas.some((d) => d.reasoning !== undefined || d.reasoning_details !== undefined)).toBe(false);
    expect(s.message.content).toBe("It is sunny.");
  });

  it("without reasoning asked, none is sent and none comes back", async () => {
    const { message } = await answer({});
    expect(lastSent()).not.toHaveProperty("thinking");
    expect(message.reasoning).toBeNull();
  });
});

describe("a tool-use conversation with thinking", () => {
  const turn1 = (stream: boolean) => {
    anthropic.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const body = { tools: [weather], reasoning: { max_tokens: 2048 } };
    return stream ? streamed(body).then((s) => s.message) : answer(body).then((a) => a.message);
  };
  const turn2 = (assistant: Record<string, unknown>) =>
    ask({
      tools: [weather],
      reasoning: { max_tokens: 2048 },
      messages: [
        { role: "user", content: "Weather in Paris?" },
        assistant as unknown as OpenAI.Chat.ChatCompletionAssistantMessageParam,
        { role: "tool", tool_call_id: (assistant.tool_calls as Array<{ id: string }>)[0]!.id, content: "18C and sunny" },
      ],
    });

  it.each([false, true])("goes on when the client sends the assistant message back as it came (streamed: %s): Anthropic gets the signed thinking first", async (stream) => {
    const assistant = (await turn1(stream)) as unknown as Record<string, unknown>;
    expect(assistant.tool_calls).toEqual([expect.objectContaining({ type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } })]);
    expect(assistant.reasoning_details).toEqual([signedThinking]);
    const r = await turn2(assistant);
    expect(r.choices[0]!.message.content).toBeTruthy();
    expect(lastSent().messages[1]).toEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking: FAKE_THINKING, signature: signedThinking.signature },
        { type: "tool_use", id: (assistant.tool_calls as Array<{ id: string }>)[0]!.id, name: "get_weather", input: { city: "Paris" } },
      ],
    });
  });

  it("is refused by Anthropic when the thinking is dropped or altered", async () => {
    const assistant = (await turn1(false)) as unknown as Record<string, unknown>;
    const refusal = (over: Record<string, unknown>) => turn2({ ...assistant, ...over }).then(() => undefined, (err: unknown) => err as InstanceType<typeof OpenAI.APIError>);
    const dropped = await refusal({ reasoning_details: undefined });
    expect(dropped?.status).toBe(400);
    expect(dropped?.message).toContain("messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`");
    const altered = await refusal({ reasoning_details: [{ ...signedThinking, text: `${FAKE_THINKING} (edited)` }] });
    expect([altered?.status, altered?.message]).toEqual([400, expect.stringContaining("messages.1.content.0: Invalid `signature` in `thinking` block")]);
    const forged = await refusal({ reasoning_details: [{ ...signedThinking, signature: thinkingSignature("something else") }] });
    expect(forged?.message).toContain("Invalid `signature` in `thinking` block");
  });

  it("carries a redacted block back too", async () => {
    anthropic.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const { message } = await answer({ tools: [weather], reasoning: { max_tokens: 2048 }, messages: [{ role: "user", content: `Weather in Paris? ${REDACTED_THINKING_TRIGGER}` }] });
    const r = await turn2(message as unknown as Record<string, unknown>);
    expect(r.choices[0]!.message.content).toBeTruthy();
    expect((lastSent().messages[1]!.content as Array<{ type: string }>).map((b) => b.type)).toEqual(["thinking", "redacted_thinking", "tool_use"]);
  });
});

describe("what thinking cannot go with", () => {
  it("a budget with no room under max_tokens is the router's 400 naming the field; nothing is sent", async () => {
    const before = anthropic.requests.length;
    await expect(ask({ reasoning: { max_tokens: 8000 } })).rejects.toMatchObject({ status: 400, param: "reasoning.max_tokens" });
    await expect(ask({ reasoning_effort: "low", max_tokens: 1024 })).rejects.toMatchObject({ status: 400, param: "reasoning_effort" });
    // An effort OpenRouter does not document is the chat schema's 400.
    await expect(ask({ reasoning: { effort: "hgih" } })).rejects.toMatchObject({ status: 400, param: expect.stringMatching(/^reasoning/) });
    expect(anthropic.requests.length).toBe(before);
  });

  it("sampling changes and forced tool use are Anthropic's 400, passed on", async () => {
    await expect(ask({ reasoning: { max_tokens: 2048 }, temperature: 0.5 })).rejects.toMatchObject({ status: 400, message: expect.stringContaining("temperature may only be set to 1 when thinking is enabled") });
    await expect(ask({ reasoning: { max_tokens: 2048 }, tools: [weather], tool_choice: "required" })).rejects.toMatchObject({
      status: 400,
      message: expect.stringContaining("Thinking may not be enabled when tool_choice forces tool use"),
    });
    // Temperature 1 (OpenAI's default, or above it clamped) goes with thinking.
    expect((await answer({ reasoning: { max_tokens: 2048 }, temperature: 1.5 })).message.reasoning).toBe(FAKE_THINKING);
  });
});
