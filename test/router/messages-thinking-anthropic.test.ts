// Claude Code's shape of request end to end: the official `@anthropic-ai/sdk`
// on POST /v1/messages, thinking on with Claude Code's budget (31,999 of
// 32,000 tokens), tools, streamed — through a real router (real Redis and
// Postgres, budgets, ledger) to the Anthropic backend and its faithful fake,
// which signs its thinking and refuses a block whose signature does not
// verify. Both translations meet here: Messages → chat → Messages out, and
// back. The thinking block a client keeps from the stream goes back in the
// tool-result turn and reaches Anthropic unmodified; the budget is scaled
// with the output cap that lowered max_tokens (billing.maxOutputTokens).
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice } from "@switchyard/db";
import { FAKE_THINKING, FakeAnthropic, thinkingSignature } from "../fixtures/fake-anthropic.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const MODEL = "claude-sonnet-4-5";
/** Claude 4.6 and later think adaptively, at an effort. */
const OPUS = "claude-opus-4-6";
const CAP = 4096;

let fx: RouterFixture;
let anthropic: FakeAnthropic;
let client: Anthropic;

beforeAll(async () => {
  anthropic = await new FakeAnthropic("sk-ant-cc").start();
  fx = await startTestRouter({ "providers.anthropic": { apiKey: "sk-ant-cc", baseUrl: anthropic.url }, "billing.refreshMs": 100, "billing.maxOutputTokens": CAP });
  for (const model of [MODEL, OPUS]) await setPrice(fx.db.db, { backend: "anthropic", model, inputMicroPerMtok: 3_000_000n, outputMicroPerMtok: 15_000_000n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", OPUS), { what: "price loaded" });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 10_000n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", MODEL), { what: "price loaded" });
  client = new Anthropic({ apiKey: fx.key, baseURL: fx.router.url, maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await fx?.close();
  await anthropic?.stop();
});

const tools = [{ name: "get_weather", description: "The weather in a city", input_schema: { type: "object" as const, properties: { city: { type: "string" } }, required: ["city"] } }];
const thinking = { type: "enabled" as const, budget_tokens: 31_999 };
const lastSent = () => anthropic.requests.at(-1)!.body as { max_tokens: number; thinking: unknown; messages: Array<{ role: string; content: unknown }> };

describe("Claude Code's thinking through /v1/messages to Anthropic", () => {
  it("streams signed thinking then the tool call; the tool-result turn sends the thinking back as it came and goes on", async () => {
    anthropic.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const first = client.messages.stream({ model: MODEL, max_tokens: 32_000, thinking, tools, messages: [{ role: "user", content: "Weather in Paris?" }] });
    const events: string[] = [];
    first.on("streamEvent", (e) => events.push(e.type === "content_block_delta" ? `delta:${e.delta.type}` : e.type === "content_block_start" ? `start:${e.content_block.type}` : e.type));
    const turn1 = await first.finalMessage();
    // The cap lowered max_tokens, and the budget with it, at the client's share: 31,999/32,000 of 4,096.
    expect(lastSent()).toMatchObject({ max_tokens: CAP, thinking: { type: "enabled", budget_tokens: CAP - 1 } });
    expect(turn1.content).toEqual([
      { type: "thinking", thinking: FAKE_THINKING, signature: thinkingSignature(FAKE_THINKING) },
      { type: "tool_use", id: expect.stringMatching(/^toolu_/), name: "get_weather", input: { city: "Paris" } },
    ]);
    expect(turn1.stop_reason).toBe("tool_use");
    // Anthropic's order: the thinking block (its text, then its signature), closed before the tool's block opens.
    const blocks = events.filter((e) => e !== "ping" && e !== "delta:thinking_delta" && e !== "delta:input_json_delta");
    expect(blocks).toEqual(["message_start", "start:thinking", "delta:signature_delta", "content_block_stop", "start:tool_use", "content_block_stop", "message_delta", "message_stop"]);
    expect(events).toContain("delta:thinking_delta");

    const toolUse = turn1.content[1] as Anthropic.ToolUseBlock;
    anthropic.enqueue({ kind: "ok", text: "It is sunny in Paris." });
    const turn2 = await client.messages
      .stream({
        model: MODEL,
        max_tokens: 32_000,
        thinking,
        tools,
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: turn1.content },
          { role: "user", content: [{ type: "tool_result", tool_use_id: toolUse.id, content: "18C and sunny" }] },
        ],
      })
      .finalMessage();
    expect(turn2.content.at(-1)).toEqual({ type: "text", text: "It is sunny in Paris." });
    // What Anthropic got back: the signed block first in the assistant turn, untouched (the fake verified it).
    expect(lastSent().messages[1]).toEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking: FAKE_THINKING, signature: thinkingSignature(FAKE_THINKING) },
        { type: "tool_use", id: toolUse.id, name: "get_weather", input: { city: "Paris" } },
      ],
    });
  });

  it("an altered thinking block in history is Anthropic's 400, as the client would get it from Anthropic", async () => {
    anthropic.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const turn1 = await client.messages.create({ model: MODEL, max_tokens: 8_000, thinking: { type: "enabled", budget_tokens: 2_048 }, tools, messages: [{ role: "user", content: "Weather in Paris?" }] });
    // Fits under the cap: sent as asked.
    expect(lastSent()).toMatchObject({ max_tokens: CAP, thinking: { type: "enabled", budget_tokens: 2_048 } });
    const [think, call] = turn1.content as [Anthropic.ThinkingBlock, Anthropic.ToolUseBlock];
    const err = await client.messages
      .create({
        model: MODEL,
        max_tokens: 8_000,
        thinking: { type: "enabled", budget_tokens: 2_048 },
        tools,
        messages: [
          { role: "user", content: "Weather in Paris?" },
          { role: "assistant", content: [{ ...think, thinking: `${think.thinking} (edited)` }, call] },
          { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "18C and sunny" }] },
        ],
      })
      .then(() => undefined, (e: unknown) => e as InstanceType<typeof Anthropic.APIError>);
    expect(err?.status).toBe(400);
    expect(err?.message).toContain("Invalid `signature` in `thinking` block");
  });

  it("today's Claude Code on Claude 4.6+: adaptive thinking at the effort of its slider reaches Anthropic as sent (max as xhigh, chat's top); signed thinking streams back and goes back", async () => {
    for (const [effort, sent] of [["high", "high"], ["max", "xhigh"]] as const) {
      anthropic.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
      const ask = { model: OPUS, max_tokens: 32_000, thinking: { type: "adaptive" as const }, output_config: { effort }, tools };
      const turn1 = await client.messages.stream({ ...ask, messages: [{ role: "user", content: "Weather in Paris?" }] }).finalMessage();
      expect(lastSent()).toMatchObject({ max_tokens: CAP, thinking: { type: "adaptive" }, output_config: { effort: sent } });
      expect(turn1.content.map((b) => b.type)).toEqual(["thinking", "tool_use"]);
      const call = turn1.content[1] as Anthropic.ToolUseBlock;
      anthropic.enqueue({ kind: "ok", text: "Sunny." });
      const turn2 = await client.messages
        .stream({ ...ask, messages: [{ role: "user", content: "Weather in Paris?" }, { role: "assistant", content: turn1.content }, { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: "18C" }] }] })
        .finalMessage();
      expect(turn2.content.at(-1)).toEqual({ type: "text", text: "Sunny." });
      expect((lastSent().messages[1]!.content as Array<{ type: string }>)[0]).toEqual(turn1.content[0]);
    }
  });

  it("an effort without thinking asks none (a hint on how much text to spend, which no chat backend takes); an unknown effort is a 400 naming it", async () => {
    anthropic.enqueue({ kind: "ok", text: "Sunny." });
    const msg = await client.messages.create({ model: OPUS, max_tokens: 1024, output_config: { effort: "low" }, messages: [{ role: "user", content: "Weather?" }] });
    expect(msg.content).toEqual([{ type: "text", text: "Sunny." }]);
    expect(lastSent()).not.toHaveProperty("thinking");
    expect(lastSent()).not.toHaveProperty("output_config");
    const before = anthropic.requests.length;
    const err = await client.messages
      .create({ model: OPUS, max_tokens: 1024, output_config: { effort: "extreme" as "low" }, messages: [{ role: "user", content: "Weather?" }] })
      .then(() => undefined, (e: unknown) => e as InstanceType<typeof Anthropic.APIError>);
    expect(err?.status).toBe(400);
    expect(err?.message).toContain("output_config.effort: must be one of low, medium, high, xhigh, max");
    expect(anthropic.requests.length).toBe(before);
  });
});
