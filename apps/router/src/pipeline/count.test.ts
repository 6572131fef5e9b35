import { describe, expect, it } from "vitest";
import { IMAGE_TOKENS_UNKNOWN_SIZE } from "../billing/media.ts";
import { estimateTokens } from "./count.ts";

describe("the router's token estimate (backends that cannot count)", () => {
  const one = (content: unknown) => estimateTokens({ messages: [{ role: "user", content }] });
  const framing = one("");

  it("is 3 for the reply and 4 per message, with ASCII text at 4 characters a token, rounded up", () => {
    expect(framing).toBe(7);
    expect(one("abcd")).toBe(framing + 1);
    expect(one("abcde")).toBe(framing + 2);
    expect(estimateTokens({ messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }] })).toBe(3 + 4 + 2 + 4 + 1);
  });

  it("counts every other character as a token, a surrogate pair as one", () => {
    expect(one("東京")).toBe(framing + 2);
    expect(one("café")).toBe(framing + 1 + 1);
    expect(one("🚢📦")).toBe(framing + 2);
  });

  it("counts text parts, images by the providers' formulas, tool calls and tool definitions", () => {
    expect(one([{ type: "text", text: "abcd" }, { type: "text", text: "efgh" }])).toBe(framing + 2);
    expect(one([{ type: "image_url", image_url: { url: "https://example.com/a.png" } }])).toBe(framing + IMAGE_TOKENS_UNKNOWN_SIZE);
    const call = { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get", arguments: '{"a":1}' } }] };
    expect(estimateTokens({ messages: [call] })).toBe(3 + 4 + 4 + 1 + 2);
    const tools = [{ type: "function", function: { name: "get", parameters: {} } }];
    expect(estimateTokens({ messages: [], tools })).toBe(3 + Math.ceil(JSON.stringify(tools).length / 4));
  });
});
