import { describe, expect, it } from "vitest";
import type { BackendRequest } from "../backends/types.ts";
import { resumable, StreamResume } from "./resume.ts";

const chatReq = (extra: Record<string, unknown> = {}): BackendRequest => ({
  path: "/v1/chat/completions",
  stream: true,
  body: { model: "m", stream: true, messages: [{ role: "user", content: "count" }], ...extra },
});

const chunk = (content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", created: 100, model: "m-a", choices: [{ index: 0, delta: { content, ...extra }, finish_reason: null }] });

describe("StreamResume", () => {
  it("replays the chat so far as a final assistant message, with max_tokens reduced", () => {
    const r = new StreamResume(chatReq({ max_tokens: 10 }), 2);
    r.track(chunk("one ", { role: "assistant" }));
    r.track(chunk("two "));
    r.track(chunk("three "));
    const c = r.continuation();
    expect(c.kind).toBe("request");
    if (c.kind !== "request") return;
    expect(c.req.body.messages).toEqual([
      { role: "user", content: "count" },
      { role: "assistant", content: "one two three " },
    ]);
    expect(c.req.body).toMatchObject({ max_tokens: 7, continue_final_message: true, add_generation_prompt: false, stream: true });
    expect(r.resumes).toBe(1);
  });

  it("appends the text so far to a completion prompt", () => {
    const r = new StreamResume({ path: "/v1/completions", stream: true, body: { model: "m", prompt: "Once", stream: true, max_completion_tokens: 5 } }, 2);
    r.track(JSON.stringify({ id: "cmpl-1", object: "text_completion", created: 1, model: "m", choices: [{ index: 0, text: " upon", finish_reason: null }] }));
    const c = r.continuation();
    expect(c.kind === "request" && c.req.body).toMatchObject({ prompt: "Once upon", max_completion_tokens: 4 });
  });

  it("makes the continuation's chunks look like the first upstream's: same id, created, model; no second role", () => {
    const r = new StreamResume(chatReq(), 2);
    r.track(chunk("one ", { role: "assistant" }));
    r.track(chunk("two "));
    r.continuation();
    const other = JSON.stringify({ id: "chatcmpl-OTHER", object: "chat.completion.chunk", created: 999, model: "m-b", choices: [{ index: 0, delta: { role: "assistant", content: "three " }, finish_reason: null }] });
    const p = JSON.parse(r.rewrite(other));
    expect(p).toMatchObject({ id: "chatcmpl-1", created: 100, model: "m-a" });
    expect(p.choices[0].delta).toEqual({ content: "three " });
    // Usage: the replayed answer counts as output, not as prompt.
    const usage = JSON.parse(r.rewrite(JSON.stringify({ id: "x", choices: [], usage: { prompt_tokens: 12, completion_tokens: 3, total_tokens: 15 } })));
    expect(usage.usage).toEqual({ prompt_tokens: 10, completion_tokens: 5, total_tokens: 15 });
    expect(r.rewrite("[DONE]")).toBe("[DONE]");
  });

  it("ends without another call when the answer was complete or max_tokens was reached", () => {
    const done = new StreamResume(chatReq(), 2);
    done.track(chunk("x"));
    done.track(JSON.stringify({ id: "chatcmpl-1", choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }));
    expect(done.continuation()).toEqual({ kind: "finish", payloads: ["[DONE]"] });

    const full = new StreamResume(chatReq({ max_tokens: 2 }), 2);
    full.track(chunk("a"));
    full.track(chunk("b"));
    const c = full.continuation();
    expect(c.kind).toBe("finish");
    if (c.kind !== "finish") return;
    expect(JSON.parse(c.payloads[0]!)).toMatchObject({ id: "chatcmpl-1", choices: [{ finish_reason: "length" }] });
    expect(c.payloads[1]).toBe("[DONE]");
  });

  it("only single-prompt chat and completion streams are resumable", () => {
    expect(resumable(chatReq())).toBe(true);
    expect(resumable({ ...chatReq(), stream: false })).toBe(false);
    expect(resumable({ path: "/v1/completions", stream: true, body: { prompt: ["a", "b"] } })).toBe(false);
    expect(resumable({ path: "/v1/embeddings", stream: true, body: { input: "a" } })).toBe(false);
    expect(new StreamResume({ path: "/v1/completions", stream: true, body: { prompt: ["a", "b"] } }, 1).continuation().kind).toBe("impossible");
  });
});
