import { describe, expect, it } from "vitest";
import { promptTokensUpperBound } from "./estimate.ts";

describe("a prompt's token bound", () => {
  // Byte-level BPE makes at most one token per UTF-8 byte: the bound counts the bytes a worker or provider is sent.
  const utf8 = (s: string) => new TextEncoder().encode(s).length;
  const chat = (content: string) => promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content }] });
  const framing = chat("");

  for (const [name, text] of [
    ["ASCII", "plain words, digits 0123 and punctuation!"],
    ["two-byte characters", "café crème, naïve façade"],
    ["three-byte characters", "€ 20 — 東京 へ"],
    ["surrogate pairs (four bytes each)", "ship it 🚢📦 now"],
    ["a lone surrogate (sent as U+FFFD, three bytes)", "broken \ud800 half"],
  ] as const) {
    it(`counts ${name} as their UTF-8 bytes`, () => {
      expect(chat(text) - framing).toBe(utf8(text));
    });
  }

  it("counts every message and its framing", () => {
    const two = promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: "é" }, { role: "assistant", content: [{ type: "text", text: "€" }] }] });
    expect(two - promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: "" }, { role: "assistant", content: [{ type: "text", text: "" }] }] })).toBe(2 + 3);
  });
});
