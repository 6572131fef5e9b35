// Whole chat answers as Gemini's GenerateContentResponse (response.ts)
// without a router: parts and their order, where the thoughtSignature goes
// and that it reads back as the answer's reasoning_details, finish reasons,
// usage, and Google's error shape.
import { describe, expect, it } from "vitest";
import type { Json } from "../boundary.ts";
import { geminiErrorBody, geminiStatus, responseFromCompletion } from "./response.ts";
import { readThoughtSignature } from "./signature.ts";

const details: Json[] = [
  { type: "reasoning.text", text: "The user wants both files.", signature: "EqQBCkYIBxgCKkA=", format: "anthropic-claude-v1", index: 0 },
  { type: "reasoning.encrypted", data: "RWRhY3RlZA==", format: "anthropic-claude-v1", index: 1 },
];

function completion(message: Json, finish: string | null = "tool_calls", usage?: Json): Json {
  return { id: "chatcmpl-1", object: "chat.completion", model: "claude-sonnet-4-5", choices: [{ index: 0, message: { role: "assistant", ...message }, finish_reason: finish }], ...(usage ? { usage } : {}) };
}

const reasoned = completion({
  content: "Reading both.",
  reasoning: "The user wants both files.",
  reasoning_details: details,
  tool_calls: [
    { id: "toolu_1", type: "function", function: { name: "read_file", arguments: '{"path":"a.ts"}' } },
    { id: "toolu_2", type: "function", function: { name: "read_file", arguments: '{"path":"b.ts"}' } },
  ],
});

const partsOf = (r: Json) => ((r.candidates as Json[])[0]!.content as Json).parts as Json[];
const candidate = (r: Json) => (r.candidates as Json[])[0]!;

describe("responseFromCompletion", () => {
  it("puts the thought first, then the text, then one functionCall per call, the signature on the first call", () => {
    const r = responseFromCompletion(reasoned, "gemini-2.5-pro", { includeThoughts: true, responseId: "resp-1" });
    const parts = partsOf(r);
    expect(parts).toEqual([
      { text: "The user wants both files.", thought: true },
      { text: "Reading both." },
      { functionCall: { id: "toolu_1", name: "read_file", args: { path: "a.ts" } }, thoughtSignature: expect.any(String) },
      { functionCall: { id: "toolu_2", name: "read_file", args: { path: "b.ts" } } },
    ]);
    expect(readThoughtSignature(parts[2]!.thoughtSignature, "contents[1].parts[2].thoughtSignature")).toEqual(details);
    expect(r).toEqual({
      candidates: [{ content: { role: "model", parts }, finishReason: "STOP", index: 0 }],
      usageMetadata: { promptTokenCount: 0, candidatesTokenCount: 0, totalTokenCount: 0 },
      modelVersion: "gemini-2.5-pro",
      responseId: "resp-1",
    });
  });

  it("without includeThoughts hides the thought but keeps the signature", () => {
    const parts = partsOf(responseFromCompletion(reasoned, "m", { includeThoughts: false, responseId: "r" }));
    expect(parts.map((p) => Object.keys(p))).toEqual([["text"], ["functionCall", "thoughtSignature"], ["functionCall"]]);
    expect(readThoughtSignature(parts[1]!.thoughtSignature, "at")).toEqual(details);
  });

  it("signs the first text part when there is no call, and an empty part of its own when there is neither", () => {
    const text = partsOf(responseFromCompletion(completion({ content: "Done.", reasoning: "hm", reasoning_details: details }, "stop"), "m", { includeThoughts: true, responseId: "r" }));
    expect(text).toEqual([{ text: "hm", thought: true }, { text: "Done.", thoughtSignature: expect.any(String) }]);
    const bare = partsOf(responseFromCompletion(completion({ content: "", reasoning: "hm", reasoning_details: details }, "stop"), "m", { includeThoughts: true, responseId: "r" }));
    expect(bare).toEqual([{ text: "hm", thought: true }, { text: "", thoughtSignature: expect.any(String) }]);
    expect(readThoughtSignature(bare[1]!.thoughtSignature, "at")).toEqual(details);
  });

  it("answers with no parts at all with one empty text part, and without a signature when nothing reasoned", () => {
    expect(partsOf(responseFromCompletion(completion({ content: null }, "stop"), "m", { includeThoughts: true, responseId: "r" }))).toEqual([{ text: "" }]);
    expect(partsOf(responseFromCompletion(completion({ content: "hi", reasoning: "x" }, "stop"), "m", { includeThoughts: false, responseId: "r" }))).toEqual([{ text: "hi" }]);
  });

  it("maps finish reasons", () => {
    const reason = (finish: string | null) => candidate(responseFromCompletion(completion({ content: "x" }, finish), "m", { includeThoughts: false, responseId: "r" })).finishReason;
    expect(reason("stop")).toBe("STOP");
    expect(reason("tool_calls")).toBe("STOP");
    expect(reason("length")).toBe("MAX_TOKENS");
    expect(reason("content_filter")).toBe("SAFETY");
    expect(reason(null)).toBe("STOP");
    expect(reason("eos_token")).toBe("OTHER");
  });

  it("leaves out a call whose arguments are not a JSON object, the finishReason saying why", () => {
    const calls = (args: string[]) => args.map((a, i) => ({ id: `c${i}`, type: "function", function: { name: "f", arguments: a } }));
    // The output limit cut the last call: the whole ones before it go out, and MAX_TOKENS says it was cut.
    const cut = responseFromCompletion(completion({ content: null, tool_calls: calls(['{"a":1}', '{"a":']) }, "length"), "m", { includeThoughts: false, responseId: "r" });
    expect(partsOf(cut)).toEqual([{ functionCall: { id: "c0", name: "f", args: { a: 1 } } }]);
    expect(candidate(cut).finishReason).toBe("MAX_TOKENS");
    const malformed = responseFromCompletion(completion({ content: null, reasoning_details: details, tool_calls: calls(["[1]"]) }), "m", { includeThoughts: false, responseId: "r" });
    expect(partsOf(malformed)).toEqual([{ text: "", thoughtSignature: expect.any(String) }]);
    expect(candidate(malformed).finishReason).toBe("MALFORMED_FUNCTION_CALL");
    // Empty arguments are a call with none.
    expect(partsOf(responseFromCompletion(completion({ content: null, tool_calls: calls([""]) }), "m", { includeThoughts: false, responseId: "r" }))).toEqual([{ functionCall: { id: "c0", name: "f", args: {} } }]);
  });

  it("counts thinking apart from the answer, and cached prompt tokens", () => {
    const usage = { prompt_tokens: 1200, completion_tokens: 300, prompt_tokens_details: { cached_tokens: 1000 }, completion_tokens_details: { reasoning_tokens: 120 } };
    expect(responseFromCompletion(completion({ content: "x" }, "stop", usage), "m", { includeThoughts: false, responseId: "r" }).usageMetadata).toEqual({
      promptTokenCount: 1200,
      candidatesTokenCount: 180,
      thoughtsTokenCount: 120,
      cachedContentTokenCount: 1000,
      totalTokenCount: 1500,
    });
    const plain = { prompt_tokens: 10, completion_tokens: 5, prompt_tokens_details: { cached_tokens: 0 }, completion_tokens_details: { reasoning_tokens: 0 } };
    expect(responseFromCompletion(completion({ content: "x" }, "stop", plain), "m", { includeThoughts: false, responseId: "r" }).usageMetadata).toEqual({ promptTokenCount: 10, candidatesTokenCount: 5, totalTokenCount: 15 });
  });
});

describe("Google's error shape", () => {
  it("names the canonical status for each HTTP status", () => {
    expect(geminiErrorBody(400, "contents: is required")).toEqual({ error: { code: 400, message: "contents: is required", status: "INVALID_ARGUMENT" } });
    const statuses = [401, 402, 403, 404, 409, 413, 418, 429, 499, 500, 501, 502, 503, 504, 507].map((s) => [s, geminiStatus(s)]);
    expect(Object.fromEntries(statuses)).toEqual({
      401: "UNAUTHENTICATED",
      402: "FAILED_PRECONDITION",
      403: "PERMISSION_DENIED",
      404: "NOT_FOUND",
      409: "ABORTED",
      413: "INVALID_ARGUMENT",
      418: "FAILED_PRECONDITION",
      429: "RESOURCE_EXHAUSTED",
      499: "CANCELLED",
      500: "INTERNAL",
      501: "UNIMPLEMENTED",
      502: "UNAVAILABLE",
      503: "UNAVAILABLE",
      504: "DEADLINE_EXCEEDED",
      507: "INTERNAL",
    });
  });
});
