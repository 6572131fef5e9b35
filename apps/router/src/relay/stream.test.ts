// The stream relay writing by slices of the upstream's buffer: the events one
// upstream chunk completed go out in one write, an unchanged event as the
// upstream's own bytes, every other as the router's text, in order and once
// each; a failure after the first byte is one error event after whole
// events; a continuation leg's rewritten events go as text.
import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import type { Backend, BackendRequest, UpstreamResponse } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { createLogger } from "../observability/log.ts";
import { RouterMetrics } from "../observability/metrics.ts";
import { startAttempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";
import { StreamResume } from "./resume.ts";
import { parseSseBatches, SseSplitter } from "./sse.ts";
import { checkEvent, Coalescer, firstEvent, openContinuation, relayStream, type Leg } from "./stream.ts";

/** A ServerResponse stand-in that keeps every piece written, as written. */
class Socketish extends EventEmitter {
  pieces: Array<Uint8Array | string> = [];
  destroyed = false;
  writableFinished = false;
  /** Return false from this many writes (the client is slow), then 'drain' when told. */
  full = 0;
  ended: Promise<void>;
  private resolveEnded!: () => void;
  constructor() {
    super();
    this.ended = new Promise((r) => (this.resolveEnded = r));
  }
  writeHead(): void {}
  flushHeaders(): void {}
  write(piece: Uint8Array | string): boolean {
    this.pieces.push(piece);
    if (this.full > 0) {
      this.full--;
      return false;
    }
    return true;
  }
  end(): void {
    this.writableFinished = true;
    this.resolveEnded();
  }
  get text(): string {
    return this.pieces.map((p) => (typeof p === "string" ? p : Buffer.from(p.buffer, p.byteOffset, p.byteLength).toString("utf8"))).join("");
  }
  /** Each write as text. */
  get writes(): string[] {
    return this.pieces.map((p) => (typeof p === "string" ? p : Buffer.from(p.buffer, p.byteOffset, p.byteLength).toString("utf8")));
  }
}

const chunkJson = (content: string, extra: Record<string, unknown> = {}) =>
  JSON.stringify({ id: "c-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content }, finish_reason: null }], ...extra });
const ev = (payload: string) => `data: ${payload}\n\n`;

/** An upstream that sends these chunks (a function throws instead), each after a turn of the event loop. */
function upstream(chunks: Array<string | Buffer | (() => never)>, pulled?: { n: number }): UpstreamResponse & { sent: Buffer[]; aborted: boolean } {
  const sent: Buffer[] = [];
  const body = (async function* () {
    for (const c of chunks) {
      await new Promise((r) => setImmediate(r));
      if (pulled) pulled.n++;
      if (typeof c === "function") c();
      const b = typeof c === "string" ? Buffer.from(c) : (c as Buffer);
      sent.push(b);
      yield b;
    }
  })();
  const up = {
    sent,
    aborted: false,
    text: () => Promise.reject(new Error("stream only")),
    raw: () => {
      throw new Error("stream only");
    },
    events: () => {
      throw new Error("the relay reads batches");
    },
    batches: () => parseSseBatches(body, { label: "w" }),
    abort: () => {
      up.aborted = true;
    },
  };
  return up;
}

function backend(id: string, up: () => UpstreamResponse): Backend {
  return { id, kind: "worker", paid: false, model: "m", supports: () => true, open: async () => up() };
}

function context(out: Socketish, settled: unknown[], extra: Partial<RelayContext> = {}): RelayContext {
  return {
    requestId: "req-1",
    deadlines: { connectMs: 1_000, headersMs: 1_000, answerMs: 1_000, firstTokenMs: 1_000, idleMs: 1_000, totalMs: 10_000 },
    signal: new AbortController().signal,
    startedAt: performance.now(),
    log: createLogger("error", {}, () => {}),
    metrics: new RouterMetrics(),
    maxAttempts: 1,
    route: "chat",
    outgoing: out as unknown as ServerResponse,
    settle: (o) => settled.push(o),
    ...extra,
  };
}

async function relay(chunks: Array<string | Buffer | (() => never)>, extra: Partial<RelayContext> = {}) {
  const out = new Socketish();
  const settled: Array<{ status: string; chunks?: number; usage?: unknown }> = [];
  const up = upstream(chunks);
  const b = backend("w1", () => up);
  const ctx = context(out, settled, extra);
  const a = startAttempt(ctx, b);
  const { batches, held, first } = await firstEvent(b, await b.open({} as BackendRequest, { requestId: "req-1" }, a.controller), a, 1_000);
  const leg: Leg = { backend: b, batches, held, up, a, ttftMs: 0 };
  relayStream(leg, first, ctx, performance.now());
  await out.ended;
  return { out, up, settled };
}

describe("relayStream by slices", () => {
  it("several events in one chunk: one write, the upstream's own bytes", async () => {
    const one = ev(chunkJson("a")) + ev(chunkJson("b")) + ev(chunkJson("c"));
    const { out, up, settled } = await relay([one, ev("[DONE]")]);
    expect(out.writes).toEqual([one, ev("[DONE]")]);
    // Not a copy: a view of the very chunk the upstream sent.
    const first = out.pieces[0] as Buffer;
    expect(Buffer.isBuffer(first)).toBe(true);
    expect(first.buffer).toBe(up.sent[0]!.buffer);
    expect(first.byteOffset).toBe(up.sent[0]!.byteOffset);
    // A chunk of whole events only is written as that very chunk.
    expect(first).toBe(up.sent[0]);
    expect(settled).toMatchObject([{ status: "ok", chunks: 3 }]);
  });

  it("an event split across chunks goes out with the chunk that ends it, in order, once", async () => {
    const a = ev(chunkJson("a"));
    const b = ev(chunkJson("b"));
    const c = ev(chunkJson("c"));
    const { out } = await relay([a + b.slice(0, 10), b.slice(10) + c, ev("[DONE]")]);
    expect(out.writes).toEqual([a, b + c, ev("[DONE]")]);
  });

  it("cut at every byte, the client gets the same bytes, in no more writes than chunks, each write whole events", async () => {
    const full = ev(chunkJson("é")) + ": keep-alive\n\n" + ev(chunkJson("b")) + ev("[DONE]");
    const want = ev(chunkJson("é")) + ev(chunkJson("b")) + ev("[DONE]");
    const bytes = Buffer.from(full);
    for (let i = 1; i < bytes.length; i++) {
      const { out } = await relay([bytes.subarray(0, i), bytes.subarray(i)]);
      expect(out.text).toBe(want);
      expect(out.pieces.length).toBeLessThanOrEqual(2);
      for (const w of out.writes) expect(w).toMatch(/^(data: [^\n]+\n\n)+$/);
    }
  });

  it("CRLF events go out as the router's LF text, beside the slices of the same chunk", async () => {
    const { out } = await relay([`data: ${chunkJson("a")}\r\n\r\n` + ev(chunkJson("b")), "data: [DONE]\r\n\r\n"]);
    expect(out.writes).toEqual([ev(chunkJson("a")) + ev(chunkJson("b")), ev("[DONE]")]);
  });

  it("comments and keep-alives never reach the client", async () => {
    const { out } = await relay([": hi\n\n" + ev(chunkJson("a")) + ": ping\n\n" + ev(chunkJson("b")), ": ping\n\n", ev("[DONE]")]);
    expect(out.text).toBe(ev(chunkJson("a")) + ev(chunkJson("b")) + ev("[DONE]"));
    // The chunk with only a comment completes no event: no write for it.
    expect(out.pieces).toHaveLength(2);
  });

  it("nothing after [DONE], even in the same chunk; the upstream is read to its end", async () => {
    const { out, up, settled } = await relay([ev(chunkJson("a")) + ev("[DONE]") + ev(chunkJson("late")), ev(chunkJson("later"))]);
    expect(out.writes).toEqual([ev(chunkJson("a")) + ev("[DONE]")]);
    expect(up.sent).toHaveLength(2);
    expect(settled).toMatchObject([{ status: "ok" }]);
  });

  it("a bad event mid-chunk: the whole events before it, then exactly one error event, nothing after", async () => {
    const { out, settled } = await relay([ev(chunkJson("a")), ev(chunkJson("b")) + "data: not json\n\n" + ev(chunkJson("c")), ev("[DONE]")]);
    const w = out.writes;
    // The events accepted before the bad one and the error event share the chunk's one write.
    expect(w).toHaveLength(2);
    expect(w[0]).toBe(ev(chunkJson("a")));
    expect(w[1]!.startsWith(ev(chunkJson("b")))).toBe(true);
    expect(w[1]!.slice(ev(chunkJson("b")).length)).toMatch(/^data: \{"error":\{[^\n]*"code":"bad_upstream"[^\n]*\}\n\n$/);
    expect(out.text).not.toContain('"c"');
    expect(settled).toMatchObject([{ status: "error" }]);
  });

  it("an upstream that breaks mid-event: the client never sees the partial event, only the error after whole ones", async () => {
    const broken = (): never => {
      throw new UpstreamFailure("connect", "socket reset", true);
    };
    const { out } = await relay([ev(chunkJson("a")) + `data: ${chunkJson("b").slice(0, 20)}`, broken]);
    expect(out.writes).toHaveLength(2);
    expect(out.writes[0]).toBe(ev(chunkJson("a")));
    expect(out.writes[1]).toMatch(/^data: \{"error":/);
  });

  it("the worker's own error event ends the stream with our one error event", async () => {
    const { out } = await relay([ev(chunkJson("a")) + ev(JSON.stringify({ error: { message: "engine died" } })) + ev(chunkJson("x"))]);
    expect(out.writes).toHaveLength(1);
    const [first, error, ...rest] = out.text.split("\n\n");
    expect(first).toBe(`data: ${chunkJson("a")}`);
    expect(error).toMatch(/^data: \{"error":.*engine died/);
    expect(rest).toEqual([""]);
  });

  it("the usage-only chunk asked for on the client's behalf is held back; the events around it still pass as bytes", async () => {
    const usage = JSON.stringify({ id: "c-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [], usage: { prompt_tokens: 3, completion_tokens: 2, total_tokens: 5 } });
    const { out, settled } = await relay([ev(chunkJson("a")) + ev(chunkJson("b")) + ev(usage) + ev("[DONE]")], { stripUsage: true });
    expect(out.writes).toEqual([ev(chunkJson("a")) + ev(chunkJson("b")) + ev("[DONE]")]);
    expect(settled).toMatchObject([{ status: "ok", usage: { prompt: 3, completion: 2 } }]);
  });

  it("waits for the client to drain before reading the next chunk (backpressure)", async () => {
    const out = new Socketish();
    out.full = 1;
    const pulled = { n: 0 };
    const up = upstream([ev(chunkJson("a")), ev(chunkJson("b")), ev("[DONE]")], pulled);
    const b = backend("w1", () => up);
    const ctx = context(out, []);
    const a = startAttempt(ctx, b);
    const { batches, held, first } = await firstEvent(b, up, a, 1_000);
    relayStream({ backend: b, batches, held, up, a, ttftMs: 0 }, first, ctx, performance.now());
    for (let i = 0; i < 10; i++) await new Promise((r) => setImmediate(r));
    expect(out.pieces).toHaveLength(1);
    expect(pulled.n).toBe(1);
    out.emit("drain");
    await out.ended;
    expect(out.text).toBe(ev(chunkJson("a")) + ev(chunkJson("b")) + ev("[DONE]"));
  });

  it("a continuation leg: its first chunk's events rewritten as the first upstream's, as text, in one write with the rest", async () => {
    const req: BackendRequest = { path: "/v1/chat/completions", stream: true, body: { model: "m", stream: true, messages: [{ role: "user", content: "count" }] } };
    const state = new StreamResume(req, 2);
    const out = new Socketish();
    const settled: Array<{ status: string }> = [];
    const broken = (): never => {
      throw new UpstreamFailure("connect", "socket reset", true);
    };
    const up1 = upstream([ev(chunkJson("one ", {})) + ev(chunkJson("two ")), broken]);
    const other = (content: string) => JSON.stringify({ id: "c-2", object: "chat.completion.chunk", created: 2, model: "m-b", choices: [{ index: 0, delta: { role: "assistant", content }, finish_reason: null }] });
    const up2 = upstream([ev(other("three ")) + ev(other("four ")), ev("[DONE]")]);
    const b1 = backend("w1", () => up1);
    const b2 = backend("w2", () => up2);
    const ctx = context(out, settled);
    const a = startAttempt(ctx, b1);
    const { batches, held, first } = await firstEvent(b1, up1, a, 1_000);
    const tried = new Set<Backend>([b1]);
    relayStream({ backend: b1, batches, held, up: up1, a, ttftMs: 0 }, first, ctx, performance.now(), {
      state,
      open: (failed) => openContinuation(state, [b1, b2], tried, failed, req.path, ctx),
    });
    await out.ended;
    const rewritten = (content: string) => JSON.stringify({ id: "c-1", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content }, finish_reason: null }] });
    expect(out.writes).toEqual([ev(chunkJson("one ")) + ev(chunkJson("two ")), ev(rewritten("three ")) + ev(rewritten("four ")), ev("[DONE]")]);
    // The first leg's chunk passed as its bytes; the continuation's were rewritten (text).
    expect(Buffer.isBuffer(out.pieces[0])).toBe(true);
    expect(up1.aborted).toBe(true);
    expect(settled).toMatchObject([{ status: "ok" }]);
  });
});

describe("Coalescer", () => {
  it("joins adjacent slices of one chunk into one view, and mixes text and other chunks into one buffer", () => {
    const c = new Coalescer();
    const chunk = Buffer.from("data: a\n\ndata: b\n\n");
    c.bytes(chunk, 0, 9);
    c.bytes(chunk, 9, 18);
    const one = c.take() as Buffer;
    expect(one.buffer).toBe(chunk.buffer);
    expect(one.toString()).toBe("data: a\n\ndata: b\n\n");
    expect(c.take()).toBeUndefined();
    c.bytes(chunk, 0, 9);
    c.text("data: x\n\n");
    c.bytes(chunk, 9, 18);
    expect(Buffer.from(c.take() as Uint8Array).toString()).toBe("data: a\n\ndata: x\n\ndata: b\n\n");
    c.text("data: only\n\n");
    expect(c.take()).toBe("data: only\n\n");
    // A token's chunk, whole: the chunk itself, no view and no copy.
    c.bytes(chunk, 0, chunk.length);
    expect(c.take()).toBe(chunk);
    expect(c.take()).toBeUndefined();
  });
});

describe("checkEvent", () => {
  const backend = { id: "worker w1" } as Backend;
  it("passes an event that came as one canonical line as it is, and writes a multi-line one again as one line", () => {
    const batch = new SseSplitter().feed(Buffer.from('data: {"a":1}\n\ndata: {"b":\ndata: 2}\n\n'))!;
    const [one, multi] = batch.events;
    expect(one!.start).toBeGreaterThanOrEqual(0);
    expect(checkEvent(backend, one!)).toEqual({ line: '{"a":1}', obj: { a: 1 } });
    expect(multi!.start).toBe(-1);
    expect(multi!.data).toBe('{"b":\n2}');
    expect(checkEvent(backend, multi!)).toEqual({ line: '{"b":2}', obj: { b: 2 } });
    expect(() => checkEvent(backend, { data: "[1]", start: 0, end: 5 })).toThrow(/not a JSON object/);
  });
});
