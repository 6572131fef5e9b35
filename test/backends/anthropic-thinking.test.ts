// Extended thinking in the Anthropic backend's translation, as pure functions:
// OpenRouter's `reasoning` / chat's `reasoning_effort` → `thinking`, an
// assistant message's `reasoning_details` → thinking blocks, and thinking
// blocks (whole or streamed) → `reasoning` / `reasoning_details`. Through the
// router against the fake: test/router/anthropic-thinking.test.ts.
import { describe, expect, it } from "vitest";
import { thinksAdaptively, toCountTokensRequest, toMessagesRequest } from "../../apps/router/src/backends/anthropic/request.ts";
import { fromMessagesResponse } from "../../apps/router/src/backends/anthropic/response.ts";
import { MessagesStreamTranslator } from "../../apps/router/src/backends/anthropic/stream.ts";
import { AnthropicStreamError, UntranslatableRequest, type MessagesResponse } from "../../apps/router/src/backends/anthropic/wire.ts";

const defaults = { maxTokens: 4096 };
const user = (content: unknown) => ({ role: "user", content });
const claude = "anthropic-claude-v1";

/** What toMessagesRequest makes of the body, or the param of its refusal. */
function thinking(body: Record<string, unknown>, d = defaults, model = "claude-sonnet-4-5"): unknown {
  try {
    return toMessagesRequest({ messages: [user("x")], ...body }, model, d).thinking ?? "none";
  } catch (err) {
    if (!(err instanceof UntranslatableRequest)) throw err;
    return { refused: err.param, message: err.message };
  }
}

describe("reasoning → thinking on Claude 4.6 and later: adaptive, an effort as output_config.effort", () => {
  const sent = (body: Record<string, unknown>, model = "claude-opus-4-6") => {
    const req = toMessagesRequest({ messages: [user("x")], max_tokens: 8000, ...body }, model, defaults);
    return { thinking: req.thinking, output_config: req.output_config };
  };

  it("knows the models by their ids", () => {
    for (const m of ["claude-opus-4-6", "claude-sonnet-4-6-20260217", "claude-opus-4-8", "claude-haiku-5", "claude-sonnet-5-1"]) expect(thinksAdaptively(m), m).toBe(true);
    for (const m of ["claude-sonnet-4-5", "claude-opus-4-1-20250805", "claude-sonnet-4-20250514", "claude-3-7-sonnet-latest", "claude-3-5-haiku-latest", "m"]) expect(thinksAdaptively(m), m).toBe(false);
  });

  it("an effort (reasoning.effort, reasoning_effort) is adaptive thinking at that effort, no budget; minimal is Anthropic's low", () => {
    expect(sent({ reasoning: { effort: "high" } })).toEqual({ thinking: { type: "adaptive" }, output_config: { effort: "high" } });
    expect(sent({ reasoning: { enabled: true, effort: "xhigh" } })).toEqual({ thinking: { type: "adaptive" }, output_config: { effort: "xhigh" } });
    expect(sent({ reasoning_effort: "minimal" })).toEqual({ thinking: { type: "adaptive" }, output_config: { effort: "low" } });
    // No max_tokens room needed: no budget is sent.
    expect(sent({ reasoning: { effort: "high" }, max_tokens: 1000 })).toEqual({ thinking: { type: "adaptive" }, output_config: { effort: "high" } });
  });

  it("enabled alone is adaptive with no effort; a budget is a budget; none asked sends neither", () => {
    expect(sent({ reasoning: { enabled: true } })).toEqual({ thinking: { type: "adaptive" }, output_config: undefined });
    expect(sent({ reasoning: { max_tokens: 2048 } })).toEqual({ thinking: { type: "enabled", budget_tokens: 2048 }, output_config: undefined });
    expect(sent({})).toEqual({ thinking: undefined, output_config: undefined });
    expect(sent({ reasoning: { effort: "none" } })).toEqual({ thinking: undefined, output_config: undefined });
  });

  it("an older model gets the same effort as a budget", () => {
    expect(sent({ reasoning: { effort: "high" } }, "claude-sonnet-4-5")).toEqual({ thinking: { type: "enabled", budget_tokens: 6400 }, output_config: undefined });
  });
});

describe("reasoning → thinking", () => {
  it("reasoning.max_tokens is the budget as given", () => {
    expect(thinking({ reasoning: { max_tokens: 2048 }, max_tokens: 4096 })).toEqual({ type: "enabled", budget_tokens: 2048 });
    // Given with an effort too, the exact number wins.
    expect(thinking({ reasoning: { max_tokens: 3000, effort: "low" }, max_tokens: 4096 })).toEqual({ type: "enabled", budget_tokens: 3000 });
  });

  it("an effort is OpenRouter's share of max_tokens, at least 1024 and at most 32000", () => {
    const budget = (effort: string, max_tokens: number) => (thinking({ reasoning: { effort }, max_tokens }) as { budget_tokens: number }).budget_tokens;
    expect([budget("xhigh", 10_000), budget("high", 10_000), budget("medium", 10_000), budget("low", 10_000), budget("minimal", 20_000)]).toEqual([9500, 8000, 5000, 2000, 2000]);
    expect(budget("minimal", 10_000)).toBe(1024);
    expect(budget("high", 100_000)).toBe(32_000);
    // Without max_tokens, the share is of the default max_tokens sent instead.
    expect(thinking({ reasoning: { effort: "medium" } })).toEqual({ type: "enabled", budget_tokens: 2048 });
  });

  it("chat's reasoning_effort too; the reasoning object wins over it", () => {
    expect(thinking({ reasoning_effort: "low", max_tokens: 10_000 })).toEqual({ type: "enabled", budget_tokens: 2000 });
    expect(thinking({ reasoning_effort: "high", reasoning: { effort: "low" }, max_tokens: 10_000 })).toEqual({ type: "enabled", budget_tokens: 2000 });
    expect(thinking({ reasoning_effort: "high", reasoning: { enabled: false }, max_tokens: 10_000 })).toBe("none");
  });

  it("enabled alone is a medium effort's budget on a model before Claude 4.6 (which refuses adaptive thinking); enabled: false, effort none or nothing asked is none", () => {
    expect(thinking({ reasoning: { enabled: true }, max_tokens: 10_000 })).toEqual({ type: "enabled", budget_tokens: 5000 });
    expect(thinking({ reasoning: { exclude: true }, max_tokens: 10_000 })).toEqual({ type: "enabled", budget_tokens: 5000 });
    expect(thinking({ reasoning: { enabled: false, effort: "high" } })).toBe("none");
    expect(thinking({ reasoning: { effort: "none" } })).toBe("none");
    expect(thinking({ reasoning_effort: "none" })).toBe("none");
    expect(thinking({ reasoning: null })).toBe("none");
    expect(thinking({})).toBe("none");
  });

  it("a budget that leaves max_tokens no room, or that Anthropic refuses, is a 400 naming the field asked", () => {
    const over = thinking({ reasoning: { max_tokens: 4096 }, max_tokens: 4096 }) as { refused: string; message: string };
    expect(over.refused).toBe("reasoning.max_tokens");
    expect(over.message).toMatch(/^reasoning\.max_tokens: Anthropic needs max_tokens above the thinking budget: a budget of 4096 tokens with max_tokens 4096/);
    // An effort's floor of 1024 with no more room than that.
    expect(thinking({ reasoning: { effort: "low" }, max_tokens: 1024 })).toMatchObject({ refused: "reasoning.effort" });
    expect(thinking({ reasoning_effort: "minimal", max_tokens: 1000 })).toMatchObject({ refused: "reasoning_effort" });
    // The default max_tokens counts as the request's.
    expect(thinking({ reasoning: { max_tokens: 2048 } }, { maxTokens: 1024 })).toMatchObject({ refused: "reasoning.max_tokens" });
    expect(thinking({ reasoning: { max_tokens: 1000 }, max_tokens: 4096 })).toMatchObject({ refused: "reasoning.max_tokens", message: expect.stringContaining("at least 1024") });
    expect(thinking({ reasoning: { max_tokens: 1500.5 }, max_tokens: 4096 })).toMatchObject({ refused: "reasoning.max_tokens" });
    expect(thinking({ reasoning: { effort: "extreme" } })).toMatchObject({ refused: "reasoning.effort" });
    expect(thinking({ reasoning_effort: "max" })).toMatchObject({ refused: "reasoning_effort" });
    expect(thinking({ reasoning: "high" })).toMatchObject({ refused: "reasoning" });
  });

  it("a count carries thinking without holding the budget to a max_tokens it does not have", () => {
    const count = toCountTokensRequest({ messages: [user("x")], reasoning: { max_tokens: 8000 } }, "m", defaults);
    expect(count).toEqual({ model: "m", messages: [{ role: "user", content: "x" }], thinking: { type: "enabled", budget_tokens: 8000 } });
    expect(toCountTokensRequest({ messages: [user("x")], reasoning_effort: "high" }, "m", defaults).thinking).toEqual({ type: "enabled", budget_tokens: 3276 });
    expect(toCountTokensRequest({ messages: [user("x")] }, "m", defaults)).not.toHaveProperty("thinking");
  });
});

describe("reasoning_details in history → thinking blocks", () => {
  const tools = [{ type: "function", function: { name: "get_weather", parameters: { type: "object", properties: {} } } }];
  const call = { id: "toolu_1", type: "function", function: { name: "get_weather", arguments: '{"city":"Paris"}' } };

  it("go first in the assistant turn, streamed pieces merged by index, signed text and encrypted data kept", () => {
    const r = toMessagesRequest(
      {
        tools,
        reasoning: { max_tokens: 2048 },
        max_tokens: 4096,
        messages: [
          user("Weather in Paris?"),
          {
            role: "assistant",
            content: "Let me check.",
            tool_calls: [call],
            reasoning: "I should call the tool.",
            reasoning_details: [
              { type: "reasoning.text", text: "I should ", format: claude, index: 0 },
              { type: "reasoning.text", text: "call the tool.", format: claude, index: 0 },
              { type: "reasoning.text", signature: "c2lnLTA=", format: claude, index: 0 },
              { type: "reasoning.encrypted", data: "RW13S0FoZ0I=", format: claude, index: 1 },
            ],
          },
          { role: "tool", tool_call_id: "toolu_1", content: "18C" },
        ],
      },
      "m",
      defaults,
    );
    expect(r.messages[1]).toEqual({
      role: "assistant",
      content: [
        { type: "thinking", thinking: "I should call the tool.", signature: "c2lnLTA=" },
        { type: "redacted_thinking", data: "RW13S0FoZ0I=" },
        { type: "text", text: "Let me check." },
        { type: "tool_use", id: "toolu_1", name: "get_weather", input: { city: "Paris" } },
      ],
    });
  });

  it("drops what Anthropic cannot take back: another provider's reasoning, text without a signature, summaries", () => {
    const r = toMessagesRequest(
      {
        messages: [
          user("q"),
          {
            role: "assistant",
            content: "a",
            reasoning: "thoughts",
            reasoning_details: [
              { type: "reasoning.text", text: "openai's", signature: "x", format: "openai-responses-v1", index: 0 },
              { type: "reasoning.encrypted", data: "gAAAA", format: "google-gemini-v1", index: 1 },
              { type: "reasoning.text", text: "unsigned", format: claude, index: 2 },
              { type: "reasoning.summary", summary: "a summary", format: claude, index: 3 },
              // No format given: taken as Claude's.
              { type: "reasoning.text", text: "kept", signature: "c2ln", index: 4 },
            ],
          },
          user("more"),
        ],
      },
      "m",
      defaults,
    );
    expect(r.messages[1]).toEqual({ role: "assistant", content: [{ type: "thinking", thinking: "kept", signature: "c2ln" }, { type: "text", text: "a" }] });
    // Nothing Anthropic can take: the message is plain text, as before.
    const plain = toMessagesRequest({ messages: [user("q"), { role: "assistant", content: "a", reasoning: "t", reasoning_details: [{ type: "reasoning.text", text: "t", index: 0 }] }, user("r")] }, "m", defaults);
    expect(plain.messages[1]).toEqual({ role: "assistant", content: "a" });
  });

  it("same-role neighbours merge with every thinking block before the turn's text and tool calls", () => {
    const r = toMessagesRequest(
      {
        tools,
        messages: [
          user("q"),
          { role: "assistant", content: "first", reasoning_details: [{ type: "reasoning.text", text: "one", signature: "czE=", format: claude, index: 0 }] },
          { role: "assistant", content: null, tool_calls: [call], reasoning_details: [{ type: "reasoning.text", text: "two", signature: "czI=", format: claude, index: 0 }] },
          { role: "tool", tool_call_id: "toolu_1", content: "18C" },
        ],
      },
      "m",
      defaults,
    );
    expect((r.messages[1]!.content as Array<{ type: string }>).map((b) => b.type)).toEqual(["thinking", "thinking", "text", "tool_use"]);
  });

  it("a reasoning_details that is not a list of objects is a 400 naming it", () => {
    const param = (details: unknown) => {
      try {
        toMessagesRequest({ messages: [user("q"), { role: "assistant", content: "a", reasoning_details: details }] }, "m", defaults);
        return "accepted";
      } catch (err) {
        return (err as UntranslatableRequest).param;
      }
    };
    expect(param("x")).toBe("messages[1].reasoning_details");
    expect(param(["x"])).toBe("messages[1].reasoning_details[0]");
    expect(param(null)).toBe("accepted");
  });
});

describe("thinking blocks → reasoning", () => {
  const msg = (content: MessagesResponse["content"]): MessagesResponse => ({
    id: "msg_01t",
    type: "message",
    role: "assistant",
    model: "claude-sonnet-4-5",
    content,
    stop_reason: "end_turn",
    usage: { input_tokens: 10, output_tokens: 40 },
  });
  const message = (out: Record<string, unknown>) => (out.choices as Array<{ message: Record<string, unknown> }>)[0]!.message;

  it("a whole answer carries reasoning (the text) and reasoning_details (each block, signed)", () => {
    const out = fromMessagesResponse(
      msg([
        { type: "thinking", thinking: "Let me think.", signature: "c2lnMQ==" },
        { type: "redacted_thinking", data: "RW13S0FoZ0I=" },
        { type: "thinking", thinking: " More.", signature: "c2lnMg==" },
        { type: "text", text: "Answer." },
      ]),
    );
    expect(message(out)).toEqual({
      role: "assistant",
      content: "Answer.",
      refusal: null,
      reasoning: "Let me think. More.",
      reasoning_details: [
        { type: "reasoning.text", text: "Let me think.", signature: "c2lnMQ==", format: claude, index: 0 },
        { type: "reasoning.encrypted", data: "RW13S0FoZ0I=", format: claude, index: 1 },
        { type: "reasoning.text", text: " More.", signature: "c2lnMg==", format: claude, index: 2 },
      ],
    });
    expect(message(fromMessagesResponse(msg([{ type: "text", text: "Plain." }])))).toEqual({ role: "assistant", content: "Plain.", refusal: null, reasoning: null });
    // Redacted only: no text to show, the entry still to send back.
    expect(message(fromMessagesResponse(msg([{ type: "redacted_thinking", data: "ZA==" }, { type: "text", text: "x" }])))).toMatchObject({ reasoning: null, reasoning_details: [{ type: "reasoning.encrypted", index: 0 }] });
  });

  it("exclude: the answer carries none", () => {
    const out = fromMessagesResponse(msg([{ type: "thinking", thinking: "secret", signature: "cw==" }, { type: "text", text: "Answer." }]), { excludeReasoning: true });
    expect(message(out)).toEqual({ role: "assistant", content: "Answer.", refusal: null, reasoning: null });
  });
});

describe("streamed thinking → reasoning deltas", () => {
  const start = { type: "message_start", message: { id: "msg_01s", type: "message", role: "assistant", model: "claude-x", content: [], usage: { input_tokens: 5, output_tokens: 1 } } };
  const thinkingEvents = [
    { type: "content_block_start", index: 0, content_block: { type: "thinking", thinking: "", signature: "" } },
    { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "Let me " } },
    { type: "content_block_delta", index: 0, delta: { type: "thinking_delta", thinking: "think." } },
    { type: "content_block_delta", index: 0, delta: { type: "signature_delta", signature: "EqQBc2ln" } },
    { type: "content_block_stop", index: 0 },
    { type: "content_block_start", index: 1, content_block: { type: "redacted_thinking", data: "RW13S0FoZ0I=" } },
    { type: "content_block_stop", index: 1 },
    { type: "content_block_start", index: 2, content_block: { type: "text", text: "" } },
    { type: "content_block_delta", index: 2, delta: { type: "text_delta", text: "Answer." } },
    { type: "content_block_stop", index: 2 },
    { type: "message_delta", delta: { stop_reason: "end_turn" }, usage: { output_tokens: 30 } },
    { type: "message_stop" },
  ];
  const deltas = (excludeReasoning = false) => {
    const t = new MessagesStreamTranslator({ includeUsage: false, excludeReasoning });
    const out = [start, ...thinkingEvents].flatMap((e) => t.feed(JSON.stringify(e)));
    expect(out.at(-1)).toBe("[DONE]");
    return out.slice(0, -1).map((s) => JSON.parse(s).choices[0].delta as Record<string, unknown>);
  };

  it("thinking text, its signature and a redacted block go out as OpenRouter streams them, before the content", () => {
    expect(deltas()).toEqual([
      { role: "assistant", content: "" },
      { reasoning: "Let me ", reasoning_details: [{ type: "reasoning.text", text: "Let me ", format: claude, index: 0 }] },
      { reasoning: "think.", reasoning_details: [{ type: "reasoning.text", text: "think.", format: claude, index: 0 }] },
      { reasoning_details: [{ type: "reasoning.text", signature: "EqQBc2ln", format: claude, index: 0 }] },
      { reasoning_details: [{ type: "reasoning.encrypted", data: "RW13S0FoZ0I=", format: claude, index: 1 }] },
      { content: "Answer." },
      {},
    ]);
  });

  it("exclude: no reasoning goes out, the content does", () => {
    expect(deltas(true)).toEqual([{ role: "assistant", content: "" }, { content: "Answer." }, {}]);
  });

  it("reasoning is content: nothing goes out before it, so an error before it can still fail over", () => {
    const t = new MessagesStreamTranslator({ includeUsage: true });
    expect(t.feed(JSON.stringify(start))).toEqual([]);
    expect(t.feed(JSON.stringify(thinkingEvents[0]))).toEqual([]);
    expect(() => t.feed('{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}')).toThrow(AnthropicStreamError);
    const u = new MessagesStreamTranslator({ includeUsage: true });
    u.feed(JSON.stringify(start));
    u.feed(JSON.stringify(thinkingEvents[0]));
    // The first thinking piece is the stream's first event (after the role chunk).
    expect(u.feed(JSON.stringify(thinkingEvents[1])).map((s) => JSON.parse(s).choices[0].delta)).toEqual([
      { role: "assistant", content: "" },
      { reasoning: "Let me ", reasoning_details: [{ type: "reasoning.text", text: "Let me ", format: claude, index: 0 }] },
    ]);
  });
});
