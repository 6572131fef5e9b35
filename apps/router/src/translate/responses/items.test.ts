// Input items (items.ts) without a router: that they say what the chat path
// ran, that a client's ids are kept only while unique, and that the items
// derived for an older record's chat conversation keep their ids.
import { describe, expect, it } from "vitest";
import type { Json } from "../boundary.ts";
import { inputItems, itemsFromMessages, outputAsItems } from "./items.ts";
import { mintEncryptedContent } from "./reasoning.ts";
import { inputMessages } from "./request.ts";

const input: Json[] = [
  { role: "developer", content: "be brief" },
  { role: "user", content: [{ type: "input_text", text: "what is " }, { type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=", detail: "high" }, { type: "input_text", text: "this?" }] },
  { role: "assistant", content: [{ type: "output_text", text: "Let me look.", logprobs: [{ token: "x", logprob: 0 }] }] },
  { type: "function_call", id: "fc_mine", call_id: "c1", name: "look", arguments: "{}" },
  { type: "function_call", id: "fc_mine", call_id: "c2", name: "look", arguments: '{"again":true}' },
  { type: "function_call_output", call_id: "c1", output: "a cat" },
  { type: "function_call_output", call_id: "c2", output: [{ type: "input_text", text: "still " }, { type: "input_text", text: "a cat" }] },
  { type: "reasoning", summary: [{ type: "summary_text", text: "hmm" }], encrypted_content: "opaque" },
];

describe("input items", () => {
  it("read back through the chat path, are the chat messages the input made (reasoning aside)", () => {
    const items = inputItems(input, new Set());
    expect(inputMessages(items)).toEqual(inputMessages(input));
    expect(items.map((i) => i.type)).toEqual(["message", "message", "message", "function_call", "function_call", "function_call_output", "function_call_output", "reasoning"]);
    expect(items[1]!.content).toEqual([
      { type: "input_text", text: "what is " },
      { type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=", detail: "high" },
      { type: "input_text", text: "this?" },
    ]);
    // OpenAI's default detail, said (the item type requires it).
    expect(inputItems([{ role: "user", content: [{ type: "input_image", image_url: "https://x/y.png" }] }], new Set())[0]!.content).toEqual([{ type: "input_image", image_url: "https://x/y.png", detail: "auto" }]);
    // An assistant message's text without the logprobs it was sent with; reasoning without another provider's opaque state.
    expect(items[2]!.content).toEqual([{ type: "output_text", text: "Let me look.", annotations: [] }]);
    expect(items[7]).toEqual({ id: expect.stringMatching(/^rs_[0-9a-f]{32}$/), type: "reasoning", summary: [{ type: "summary_text", text: "hmm" }] });
  });

  it("keep a client's id while no other item has it", () => {
    const taken = new Set(["msg_history"]);
    const items = inputItems([{ type: "message", id: "msg_history", role: "user", content: "x" }, ...input, { role: "user", id: "has space", content: "y" }], taken);
    const ids = items.map((i) => i.id as string);
    expect(ids[0]).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(ids[4]).toBe("fc_mine");
    expect(ids[5]).toMatch(/^fc_[0-9a-f]{32}$/);
    expect(ids[9]).toMatch(/^msg_[0-9a-f]{32}$/);
    expect(new Set(ids).size).toBe(ids.length);
    expect(taken.size).toBe(ids.length + 1);
  });

  it("derived from an older record's chat messages, say what those ran, under ids that are the same every time", () => {
    const chat = inputMessages(input);
    const derived = itemsFromMessages(chat, "resp_1");
    expect(inputMessages(derived)).toEqual(chat);
    expect(itemsFromMessages(chat, "resp_1")).toEqual(derived);
    expect(itemsFromMessages(chat, "resp_2").map((i) => i.id)).not.toContain(derived[0]!.id);
    expect(derived.map((i) => [i.type, (i.id as string).split("_")[0]])).toEqual([
      ["message", "msg"],
      ["message", "msg"],
      ["message", "msg"],
      ["function_call", "fc"],
      ["function_call", "fc"],
      ["function_call_output", "fco"],
      ["function_call_output", "fco"],
    ]);
    // Chat kept no developer role; images as input_image parts.
    expect(derived[0]).toMatchObject({ role: "system" });
    expect(derived[1]!.content).toEqual([
      { type: "input_text", text: "what is " },
      { type: "input_image", image_url: "data:image/png;base64,iVBORw0KGgo=", detail: "high" },
      { type: "input_text", text: "this?" },
    ]);
  });

  it("list reasoning by its summary alone: an output's encrypted_content, or a minted one sent back, is not kept (its reasoning is in the chat turn)", () => {
    const minted = mintEncryptedContent([{ type: "reasoning.text", text: "hmm", signature: "sig", format: "anthropic-claude-v1", index: 0 }]);
    const output = [
      { id: "rs_1", type: "reasoning", summary: [{ type: "summary_text", text: "hmm" }], encrypted_content: minted },
      { id: "msg_1", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: "hi", annotations: [], logprobs: [] }] },
    ];
    expect(outputAsItems(output)).toEqual([
      { id: "rs_1", type: "reasoning", summary: [{ type: "summary_text", text: "hmm" }] },
      { id: "msg_1", type: "message", status: "completed", role: "assistant", content: [{ type: "output_text", text: "hi", annotations: [] }] },
    ]);
    expect(inputItems([output[0]], new Set())).toEqual([{ id: "rs_1", type: "reasoning", summary: [{ type: "summary_text", text: "hmm" }] }]);
  });
});
