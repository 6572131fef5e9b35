// Extended thinking on POST /v1/messages through a real router (real Redis,
// real Postgres keys, budgets and ledger) with the official
// `@anthropic-ai/sdk` and the faithful OpenRouter fake serving a Claude model:
// `thinking` reaches OpenRouter as its `reasoning`, Claude's reasoning comes
// back as thinking blocks with their signatures (whole and streamed, first,
// indexes consecutive), and thinking blocks sent back in history reach
// OpenRouter as reasoning_details, unmodified.
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice } from "@switchyard/db";
import { FAKE_REASONING, FakeOpenRouter, fakeReasoningSignature } from "../fixtures/fake-openrouter.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let client: Anthropic;

const CLAUDE = "anthropic/claude-sonnet-4";
/** OpenRouter's variant that always reasons, asked or not. */
const CLAUDE_THINKING = "anthropic/claude-3.7-sonnet:thinking";
const SIGNATURE = fakeReasoningSignature(FAKE_REASONING);
/** The fake's answer text in 5 pieces, its reasoning in 9: thinking tokens are output tokens. */
const ANSWER = "Hello from the fake OpenRouter.";
const OUTPUT_TOKENS = 5 + 9;

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-think" }).start();
  fx = await startTestRouter({ "providers.openrouter": { apiKey: "sk-or-think", baseUrl: openrouter.url }, "billing.refreshMs": 100 });
  for (const model of [CLAUDE, CLAUDE_THINKING]) {
    await setPrice(fx.db.db, { backend: "openrouter", model, inputMicroPerMtok: 3_000_000n, outputMicroPerMtok: 15_000_000n });
    await waitFor(() => fx.router.deps.guard.deps.prices.price("openrouter", model), { what: "price loaded" });
  }
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 1_000n });
  client = new Anthropic({ apiKey: fx.key, baseURL: fx.router.url, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await fx?.close();
  await openrouter?.stop();
});

const post = (body: Record<string, unknown>, path = "/v1/messages") =>
  fetch(`${fx.router.url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", "anthropic-version": "2023-06-01", "x-api-key": fx.key },
    body: JSON.stringify({ model: CLAUDE, messages: [{ role: "user", content: "hello" }], ...body }),
  });

const sent = () => openrouter.requests.at(-1)!.body;

async function ledgerRows(requestId: string) {
  return waitFor(async () => {
    await fx.router.deps.guard.flush();
    const rows = await fx.db.sql`select * from spend_ledger where request_id = ${requestId}`;
    return rows.length ? rows : undefined;
  });
}

describe("thinking on /v1/messages, served by OpenRouter", () => {
  const params = { model: CLAUDE, max_tokens: 4096, thinking: { type: "enabled" as const, budget_tokens: 2048 }, messages: [{ role: "user" as const, content: "hello" }] };

  it("a whole answer: OpenRouter asked for reasoning with the budget, the thinking block with its signature first, its tokens in output_tokens and the ledger", async () => {
    const { data: msg, response } = await client.messages.create(params).withResponse();
    expect(sent()).toMatchObject({ model: CLAUDE, max_tokens: 4096, reasoning: { max_tokens: 2048 } });
    expect(msg.content).toEqual([
      { type: "thinking", thinking: FAKE_REASONING, signature: SIGNATURE },
      { type: "text", text: ANSWER },
    ]);
    expect(msg).toMatchObject({ stop_reason: "end_turn", usage: { output_tokens: OUTPUT_TOKENS } });
    const rows = await ledgerRows(response.headers.get("x-request-id")!);
    expect(rows[0]).toMatchObject({ backend: "openrouter", model: CLAUDE, completion_tokens: OUTPUT_TOKENS, status: "ok" });
  });

  it("streamed: a thinking block (thinking_delta pieces, then signature_delta) stops before the text block starts, indexes consecutive, and the SDK assembles the same message", async () => {
    const stream = client.messages.stream(params);
    const events: string[] = [];
    let thinking = "";
    stream.on("streamEvent", (e) => {
      if (e.type === "content_block_start") events.push(`start:${e.index}:${e.content_block.type}`);
      else if (e.type === "content_block_delta") events.push(`delta:${e.index}:${e.delta.type}`);
      else if (e.type === "content_block_stop") events.push(`stop:${e.index}`);
      else events.push(e.type);
    });
    stream.on("thinking", (delta) => (thinking += delta));
    const final = await stream.finalMessage();
    expect(sent()).toMatchObject({ stream: true, reasoning: { max_tokens: 2048 } });
    expect(events).toEqual([
      "message_start",
      "start:0:thinking",
      ...Array.from({ length: 9 }, () => "delta:0:thinking_delta"),
      "delta:0:signature_delta",
      "stop:0",
      "start:1:text",
      ...Array.from({ length: 5 }, () => "delta:1:text_delta"),
      "stop:1",
      "message_delta",
      "message_stop",
    ]);
    expect(thinking).toBe(FAKE_REASONING);
    expect(final.content).toEqual([
      { type: "thinking", thinking: FAKE_REASONING, signature: SIGNATURE },
      { type: "text", text: ANSWER },
    ]);
    expect(final.usage.output_tokens).toBe(OUTPUT_TOKENS);
    // On the wire, the thinking block opens empty, as Anthropic's does.
    const text = await (await post({ ...params, stream: true })).text();
    expect(text).toContain(`event: content_block_start\ndata: {"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":"","signature":""}}\n\n`);
    expect(text).toContain(`event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":${JSON.stringify(SIGNATURE)}}}\n\n`);
  });

  it("adaptive asks for reasoning without a budget; disabled asks for none and shows none", async () => {
    const adaptive = await client.messages.create({ ...params, thinking: { type: "adaptive" } });
    expect(sent().reasoning).toEqual({ enabled: true });
    expect(adaptive.content.map((b) => b.type)).toEqual(["thinking", "text"]);
    // With Claude Code's effort: OpenRouter's effort (max, which it lacks, as its top, xhigh); beside a budget, the budget.
    await client.messages.create({ ...params, thinking: { type: "adaptive" }, output_config: { effort: "medium" } });
    expect(sent().reasoning).toEqual({ enabled: true, effort: "medium" });
    await client.messages.create({ ...params, thinking: { type: "adaptive" }, output_config: { effort: "max" } });
    expect(sent().reasoning).toEqual({ enabled: true, effort: "xhigh" });
    await client.messages.create({ ...params, output_config: { effort: "high" } });
    expect(sent().reasoning).toEqual({ max_tokens: 2048 });
    const disabled = await client.messages.create({ ...params, thinking: { type: "disabled" } });
    expect(sent()).not.toHaveProperty("reasoning");
    expect(disabled.content).toEqual([{ type: "text", text: ANSWER }]);
    expect(disabled.usage.output_tokens).toBe(5);
  });

  it("display omitted: the signature without the thinking text, whole and streamed", async () => {
    const omitted = { ...params, thinking: { type: "enabled" as const, budget_tokens: 2048, display: "omitted" as const } };
    const whole = await client.messages.create(omitted);
    expect(whole.content).toEqual([
      { type: "thinking", thinking: "", signature: SIGNATURE },
      { type: "text", text: ANSWER },
    ]);
    const streamed = await client.messages.stream(omitted).finalMessage();
    expect(streamed.content).toEqual(whole.content);
  });

  it("a request without thinking gets no thinking blocks, even from a model that reasons unasked (its tokens still counted)", async () => {
    const whole = await client.messages.create({ model: CLAUDE_THINKING, max_tokens: 4096, messages: [{ role: "user", content: "hello" }] });
    expect(sent()).not.toHaveProperty("reasoning");
    expect(whole.content).toEqual([{ type: "text", text: ANSWER }]);
    expect(whole.usage.output_tokens).toBe(OUTPUT_TOKENS);
    const events: string[] = [];
    const stream = client.messages.stream({ model: CLAUDE_THINKING, max_tokens: 4096, messages: [{ role: "user", content: "hello" }] });
    stream.on("streamEvent", (e) => events.push(e.type === "content_block_start" ? `start:${e.index}:${e.content_block.type}` : e.type));
    const streamed = await stream.finalMessage();
    expect(streamed.content).toEqual([{ type: "text", text: ANSWER }]);
    expect(events.filter((e) => e.startsWith("start:"))).toEqual(["start:0:text"]);
  });

  it("Anthropic's budget rules are a 400 naming thinking.budget_tokens; another type names thinking.type; nothing reaches OpenRouter", async () => {
    const before = openrouter.requests.length;
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 1023 } }, "thinking.budget_tokens"],
      [{ max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 1500.5 } }, "thinking.budget_tokens"],
      [{ max_tokens: 4096, thinking: { type: "enabled" } }, "thinking.budget_tokens"],
      [{ max_tokens: 2048, thinking: { type: "enabled", budget_tokens: 2048 } }, "thinking.budget_tokens"],
      [{ max_tokens: 4096, thinking: { type: "between_tools" } }, "thinking.type"],
      [{ max_tokens: 4096, thinking: { type: "enabled", budget_tokens: 2048, display: "full" } }, "thinking.display"],
    ];
    for (const [body, field] of cases) {
      const res = await post(body);
      expect(res.status, field).toBe(400);
      const err = (await res.json()) as { type: string; error: { type: string; message: string } };
      expect(err).toMatchObject({ type: "error", error: { type: "invalid_request_error" } });
      expect(err.error.message.startsWith(`${field}:`), err.error.message).toBe(true);
    }
    await expect(client.messages.create({ ...params, max_tokens: 1024, thinking: { type: "enabled", budget_tokens: 1024 } })).rejects.toBeInstanceOf(Anthropic.BadRequestError);
    expect(openrouter.requests.length).toBe(before);
  });

  it("thinking and redacted_thinking blocks in history reach OpenRouter as the turn's reasoning_details, in order, signature and data unmodified; a turn of thinking alone is kept", async () => {
    const signature = "EqQBCkgIARABGAIiQL2sig+/==";
    const data = "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP";
    const tools = [{ name: "get_weather", input_schema: { type: "object" as const, properties: { city: { type: "string" } } } }];
    await client.messages.create({
      ...params,
      tools,
      messages: [
        { role: "user", content: "weather in Paris?" },
        {
          role: "assistant",
          content: [
            { type: "thinking", thinking: "I should look it up.", signature },
            { type: "redacted_thinking", data },
            { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
          ],
        },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "toolu_1", content: "sunny" }] },
        { role: "assistant", content: [{ type: "thinking", thinking: "Nothing to add.", signature: "Eq2" }] },
        { role: "user", content: "thanks" },
      ],
    });
    expect(sent().messages).toEqual([
      { role: "user", content: "weather in Paris?" },
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } }],
        reasoning: "I should look it up.",
        reasoning_details: [
          { type: "reasoning.text", text: "I should look it up.", signature, format: "anthropic-claude-v1", index: 0 },
          { type: "reasoning.encrypted", data, format: "anthropic-claude-v1", index: 1 },
        ],
      },
      { role: "tool", tool_call_id: "toolu_1", content: "sunny" },
      { role: "assistant", content: "", reasoning: "Nothing to add.", reasoning_details: [{ type: "reasoning.text", text: "Nothing to add.", signature: "Eq2", format: "anthropic-claude-v1", index: 0 }] },
      { role: "user", content: "thanks" },
    ]);
    // An answer's blocks go back as they came: the next turn carries the signature the fake signed.
    const answer = await client.messages.create(params);
    await client.messages.create({ ...params, messages: [{ role: "user", content: "hello" }, { role: "assistant", content: answer.content }, { role: "user", content: "and again" }] });
    expect((sent().messages as Array<Record<string, unknown>>)[1]).toEqual({
      role: "assistant",
      content: ANSWER,
      reasoning: FAKE_REASONING,
      reasoning_details: [{ type: "reasoning.text", text: FAKE_REASONING, signature: SIGNATURE, format: "anthropic-claude-v1", index: 0 }],
    });
    // A thinking block without its signature is the 400 Anthropic gives.
    const unsigned = await post({ max_tokens: 64, messages: [{ role: "user", content: "x" }, { role: "assistant", content: [{ type: "thinking", thinking: "hm" }] }, { role: "user", content: "y" }] });
    expect(unsigned.status).toBe(400);
    expect(await unsigned.json()).toMatchObject({ error: { message: expect.stringMatching(/^messages\[1\]\.content\[0\]\.signature:/) } });
  });

  it("count_tokens takes thinking: the prompt counted where the message would run, budget checked without max_tokens", async () => {
    const before = openrouter.requests.length;
    const { data, response } = await client.messages
      .countTokens({ model: CLAUDE, thinking: { type: "enabled", budget_tokens: 2048 }, messages: [{ role: "user", content: "hello there" }] })
      .withResponse();
    expect(response.headers.get("x-switchyard-backend")).toBe(`openrouter:${CLAUDE}`);
    expect(response.headers.get("switchyard-token-count")).toBe("estimate");
    // 3 for the reply, 4 for the message, 11 ASCII characters at 4 a token: thinking adds no prompt.
    expect(data).toEqual({ input_tokens: 3 + 4 + 3 });
    expect(openrouter.requests.length).toBe(before);
    const small = await post({ thinking: { type: "enabled", budget_tokens: 512 } }, "/v1/messages/count_tokens");
    expect(small.status).toBe(400);
    expect(await small.json()).toMatchObject({ error: { type: "invalid_request_error", message: expect.stringMatching(/^thinking\.budget_tokens:/) } });
  });

  it("context_management's clear_thinking (Claude Code sends it with thinking on) keeps the last N thinking turns' blocks and clears the earlier ones from what OpenRouter gets; other edits, or without thinking, a 400 naming them", async () => {
    const thought = (n: number) => ({ type: "thinking" as const, thinking: `thought ${n}`, signature: `sig-${n}` });
    const messages = [
      { role: "user" as const, content: "one" },
      { role: "assistant" as const, content: [thought(1), { type: "text" as const, text: "first" }] },
      { role: "user" as const, content: "two" },
      { role: "assistant" as const, content: [thought(2), { type: "text" as const, text: "second" }] },
      { role: "user" as const, content: "three" },
      { role: "assistant" as const, content: [thought(3), { type: "text" as const, text: "third" }] },
      { role: "user" as const, content: "four" },
    ];
    const kept = () => (sent().messages as Array<{ role: string; reasoning_details?: Array<{ text: string }> }>).filter((m) => m.role === "assistant").map((m) => m.reasoning_details?.[0]?.text ?? null);
    const ask = (context_management: unknown) => client.messages.create({ ...params, messages, context_management } as Anthropic.MessageCreateParamsNonStreaming);
    await ask({ edits: [{ type: "clear_thinking_20251015", keep: { type: "thinking_turns", value: 2 } }] });
    expect(kept()).toEqual([null, "thought 2", "thought 3"]);
    await ask({ edits: [{ type: "clear_thinking_20251015" }] });
    expect(kept()).toEqual([null, null, "thought 3"]);
    await ask({ edits: [{ type: "clear_thinking_20251015", keep: "all" }] });
    expect(kept()).toEqual(["thought 1", "thought 2", "thought 3"]);
    // The cleared turns keep their text.
    expect((sent().messages as Array<{ content: unknown }>)[1]!.content).toBe("first");

    const before = openrouter.requests.length;
    const refused = async (body: Record<string, unknown>) => {
      const res = await post({ max_tokens: 4096, ...body });
      expect(res.status).toBe(400);
      return ((await res.json()) as { error: { message: string } }).error.message;
    };
    expect(await refused({ context_management: { edits: [{ type: "clear_tool_uses_20250919" }] } })).toMatch(/^context_management\.edits\[0\]\.type: context edits of type 'clear_tool_uses_20250919'/);
    expect(await refused({ context_management: { edits: [{ type: "clear_thinking_20251015" }] } })).toMatch(/^context_management\.edits\[0\]\.type: clear_thinking_20251015 needs thinking/);
    expect(await refused({ thinking: { type: "adaptive" }, context_management: { edits: [{ type: "clear_thinking_20251015", keep: { type: "thinking_turns", value: 0 } }] } })).toMatch(/^context_management\.edits\[0\]\.keep:/);
    expect(openrouter.requests.length).toBe(before);
    // count_tokens takes it too.
    const count = await post({ thinking: { type: "adaptive" }, context_management: { edits: [{ type: "clear_thinking_20251015", keep: "all" }] } }, "/v1/messages/count_tokens");
    expect(count.status).toBe(200);
  });
});

