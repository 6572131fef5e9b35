// A streamed chat answer as Gemini's SSE (stream.ts) without a router: the
// exact frames for realistic chunks (reasoning with its details split across
// chunks, text, a call whose arguments come in pieces, the usage after the
// finish), the merged details in the signature, and the failure frame.
import { describe, expect, it } from "vitest";
import type { Json } from "../boundary.ts";
import { GeminiStreamTranslator } from "./stream.ts";
import { readThoughtSignature } from "./signature.ts";

const chunk = (delta: Json, finish: string | null = null): Json => ({
  id: "chatcmpl-1",
  object: "chat.completion.chunk",
  created: 1,
  model: "claude-sonnet-4-5",
  choices: [{ index: 0, delta, finish_reason: finish }],
});

const chunks: Json[] = [
  chunk({ role: "assistant", content: "" }),
  chunk({ reasoning: "Let me ", reasoning_details: [{ type: "reasoning.text", text: "Let me ", format: "anthropic-claude-v1", index: 0 }] }),
  chunk({ reasoning: "look.", reasoning_details: [{ type: "reasoning.text", text: "look.", index: 0 }] }),
  chunk({ reasoning_details: [{ type: "reasoning.text", signature: "EqQBCkYIBxgCKkA=", index: 0 }] }),
  chunk({ content: "Reading " }),
  chunk({ content: "it." }),
  chunk({ tool_calls: [{ index: 0, id: "toolu_1", type: "function", function: { name: "read_file", arguments: "" } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '{"pa' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: 'th":"a' } }] }),
  chunk({ tool_calls: [{ index: 0, function: { arguments: '.ts"}' } }] }),
  chunk({}, "tool_calls"),
  { id: "chatcmpl-1", object: "chat.completion.chunk", created: 1, model: "claude-sonnet-4-5", choices: [], usage: { prompt_tokens: 900, completion_tokens: 60, prompt_tokens_details: { cached_tokens: 800 }, completion_tokens_details: { reasoning_tokens: 20 } } },
];

const merged: Json[] = [{ type: "reasoning.text", text: "Let me look.", signature: "EqQBCkYIBxgCKkA=", format: "anthropic-claude-v1", index: 0 }];

/** Every frame is `data: <json>\r\n\r\n`, read back. */
function parse(frames: string[]): Json[] {
  return frames.map((f) => {
    expect(f).toMatch(/^data: [^\n]*\r\n\r\n$/);
    return JSON.parse(f.slice("data: ".length)) as Json;
  });
}

async function run(t: GeminiStreamTranslator, input: Json[]): Promise<{ perChunk: number[]; frames: Json[] }> {
  const perChunk: number[] = [];
  const frames: string[] = [];
  for (const c of input) {
    const out = t.chunk(c);
    perChunk.push(out.length);
    frames.push(...out);
  }
  frames.push(...(await t.done()));
  return { perChunk, frames: parse(frames) };
}

const frame = (parts: Json[], end: Json = {}) => ({
  candidates: [{ content: { role: "model", parts }, index: 0, ...(end.finishReason ? { finishReason: end.finishReason } : {}) }],
  ...(end.usageMetadata ? { usageMetadata: end.usageMetadata } : {}),
  modelVersion: "gemini-2.5-pro",
  responseId: "resp-1",
});

describe("GeminiStreamTranslator", () => {
  it("sends thoughts and text as they come, the call whole once complete, then the finish and usage", async () => {
    const { perChunk, frames } = await run(new GeminiStreamTranslator("gemini-2.5-pro", { includeThoughts: true, responseId: "resp-1" }), chunks);
    // The role chunk, the signature piece and the call's pieces send nothing.
    expect(perChunk).toEqual([0, 1, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0]);
    expect(frames).toEqual([
      frame([{ text: "Let me ", thought: true }]),
      frame([{ text: "look.", thought: true }]),
      frame([{ text: "Reading " }]),
      frame([{ text: "it." }]),
      frame([{ functionCall: { id: "toolu_1", name: "read_file", args: { path: "a.ts" } }, thoughtSignature: expect.any(String) }]),
      frame([{ text: "" }], {
        finishReason: "STOP",
        usageMetadata: { promptTokenCount: 900, candidatesTokenCount: 40, thoughtsTokenCount: 20, cachedContentTokenCount: 800, totalTokenCount: 960 },
      }),
    ]);
    const parts = (frames[4]!.candidates as Json[])[0]!.content as Json;
    expect(readThoughtSignature((parts.parts as Json[])[0]!.thoughtSignature, "at")).toEqual(merged);
  });

  it("without includeThoughts sends no thought, and signs the last frame's empty part when no call carries it", async () => {
    const noCall = chunks.filter((c) => !((c.choices as Json[])[0]?.delta as Json | undefined)?.tool_calls);
    const { frames } = await run(new GeminiStreamTranslator("gemini-2.5-pro", { includeThoughts: false, responseId: "resp-1" }), noCall);
    expect(frames.map((f) => ((f.candidates as Json[])[0]!.content as Json).parts)).toEqual([[{ text: "Reading " }], [{ text: "it." }], [{ text: "", thoughtSignature: expect.any(String) }]]);
    const last = ((frames[2]!.candidates as Json[])[0]!.content as Json).parts as Json[];
    expect(readThoughtSignature(last[0]!.thoughtSignature, "at")).toEqual(merged);
  });

  it("sends a call when the next opens, parallel calls at one index told apart by id, the signature on the first only", async () => {
    const t = new GeminiStreamTranslator("m", { includeThoughts: false, responseId: "r" });
    t.chunk(chunk({ reasoning_details: [{ type: "reasoning.text", text: "x", signature: "s", index: 0 }] }));
    expect(t.chunk(chunk({ tool_calls: [{ index: 0, id: "a", function: { name: "f", arguments: '{"n":1}' } }] }))).toEqual([]);
    const second = parse(t.chunk(chunk({ tool_calls: [{ index: 0, id: "b", function: { name: "g", arguments: "{}" } }] })));
    expect(((second[0]!.candidates as Json[])[0]!.content as Json).parts).toEqual([{ functionCall: { id: "a", name: "f", args: { n: 1 } }, thoughtSignature: expect.any(String) }]);
    const end = parse(await t.done());
    expect(end.map((f) => ((f.candidates as Json[])[0]!.content as Json).parts)).toEqual([[{ functionCall: { id: "b", name: "g", args: {} } }], [{ text: "" }]]);
  });

  it("leaves out a call the output limit cut, with MAX_TOKENS", async () => {
    const t = new GeminiStreamTranslator("m", { includeThoughts: false, responseId: "r" });
    t.chunk(chunk({ tool_calls: [{ index: 0, id: "a", function: { name: "f", arguments: '{"path":"a' } }] }, "length"));
    const end = parse(await t.done());
    expect(end).toHaveLength(1);
    expect((end[0]!.candidates as Json[])[0]).toEqual({ content: { role: "model", parts: [{ text: "" }] }, index: 0, finishReason: "MAX_TOKENS" });
    expect(end[0]!.usageMetadata).toEqual({ promptTokenCount: 0, candidatesTokenCount: 0, totalTokenCount: 0 });
  });

  it("fails with one error frame in Google's shape", () => {
    const t = new GeminiStreamTranslator("m", { includeThoughts: false, responseId: "r" });
    expect(parse(t.fail({ code: "bad_upstream", message: "the stream ended before it was complete" }))).toEqual([
      { error: { code: 502, message: "the stream ended before it was complete", status: "UNAVAILABLE" } },
    ]);
    expect(parse(t.fail({ code: "upstream_timeout", message: "slow" }))[0]!.error).toEqual({ code: 504, message: "slow", status: "DEADLINE_EXCEEDED" });
    expect(parse(t.fail({ code: "worker_timeout", message: "slow" }))[0]!.error).toEqual({ code: 504, message: "slow", status: "DEADLINE_EXCEEDED" });
    expect(parse(t.fail({ code: "internal_error", message: "internal error" }))[0]!.error).toEqual({ code: 500, message: "internal error", status: "INTERNAL" });
    expect(parse(t.fail({ code: "something_else", message: "x" }))[0]!.error).toEqual({ code: 500, message: "x", status: "INTERNAL" });
  });
});
