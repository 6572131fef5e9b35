// One contract for every Backend: the worker client, OpenRouter and Anthropic
// must hand the relay the same OpenAI shapes, usage and failures for the same
// upstream behaviour (test/fixtures/scenario.ts), whatever their wire speaks.
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { type Backend, type BackendRequest, UpstreamFailure, type UpstreamResponse } from "../../apps/router/src/backends/types.ts";
import { usageFrom } from "../../apps/router/src/backends/usage.ts";
import type { RelayContext } from "../../apps/router/src/relay/context.ts";
import type { Scenario } from "#testkit/scenario";

export interface BackendHarness {
  backend: Backend;
  /** What the faked upstream does with the next requests, one scenario each, in order. */
  arrange(...s: Scenario[]): void;
  /** Responses the faked upstream saw cut short by their client, so far. */
  aborted(): number;
  /**
   * How this upstream reports a failure after the stream started: "throws" —
   * events() throws an UpstreamFailure (providers: OpenRouter's error chunk,
   * Anthropic's `event: error`); "error_event" — events() yields the worker's
   * own `{"error":…}` payload and ends, which the relay turns into its one
   * error event (workers/agent/src/server/generate.ts).
   */
  midstreamErrorStyle: MidstreamErrorStyle;
  /**
   * Whether the upstream reports prompt-cache reads and writes (providers do;
   * a self-hosted worker reports neither, so its cached counts stay 0).
   */
  reportsPromptCache: boolean;
  /** Whether the upstream can count a prompt without running it (Backend.countTokens): workers and Anthropic can, OpenRouter cannot. */
  countsTokens: boolean;
  close(): Promise<void>;
}

export type MidstreamErrorStyle = "throws" | "error_event";

/** open() reads only the request id from the relay context. */
const ctx = { requestId: "req-contract" } as unknown as RelayContext;

const chat = (stream: boolean): BackendRequest => ({
  path: "/v1/chat/completions",
  stream,
  body: {
    model: "client-alias",
    messages: [{ role: "user", content: "Say hello" }],
    stream,
    ...(stream ? { stream_options: { include_usage: true } } : {}),
  },
});

// 30 characters in 5 tokens: every fake cuts it into the same five pieces.
const TEXT = "Hello from the contract suite!";
const ok: Scenario = { kind: "ok", text: TEXT, promptTokens: 11, completionTokens: 5, keepAlives: 2 };

interface Chunk {
  object?: string;
  choices?: Array<{ delta?: { content?: string | null }; finish_reason?: string | null }>;
  usage?: unknown;
}

const parse = (payload: string) => JSON.parse(payload) as Chunk;
const contentOf = (c: Chunk) => (c.choices ?? []).map((ch) => ch.delta?.content ?? "").join("");

/** Rejection of a promise as an UpstreamFailure (fails the test if it resolved or threw anything else). */
async function failureOf(p: Promise<unknown>): Promise<UpstreamFailure> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(UpstreamFailure);
  return err as UpstreamFailure;
}

/** Every payload of a stream that must end cleanly. */
async function drain(up: UpstreamResponse): Promise<string[]> {
  const out: string[] = [];
  for await (const e of up.events()) out.push(e);
  return out;
}

type MidstreamFailure = { style: "throws"; message: string; failure: UpstreamFailure } | { style: "error_event"; message: string };

/**
 * Reads a stream that must fail after it started, accepting either way a
 * backend may report that (see BackendHarness.midstreamErrorStyle): the
 * iterator throws an UpstreamFailure, or it yields a payload starting with
 * `{"error"` — the relay's test for a worker's error event — and then ends
 * with nothing after it. Either way no [DONE] may come first.
 */
async function readToMidstreamFailure(up: UpstreamResponse): Promise<{ before: string[]; failure: MidstreamFailure }> {
  const before: string[] = [];
  const it = up.events();
  for (;;) {
    let next: IteratorResult<string>;
    try {
      next = await it.next();
    } catch (err) {
      expect(err).toBeInstanceOf(UpstreamFailure);
      const failure = err as UpstreamFailure;
      return { before, failure: { style: "throws", message: failure.message, failure } };
    }
    if (next.done) throw new Error(`stream ended without an error after ${JSON.stringify(before)}`);
    expect(next.value).not.toBe("[DONE]");
    if (next.value.startsWith('{"error"')) {
      // The error event is the last thing the upstream says.
      expect(await it.next()).toMatchObject({ done: true });
      const e = (JSON.parse(next.value) as { error?: { message?: string } }).error;
      return { before, failure: { style: "error_event", message: e?.message ?? "" } };
    }
    before.push(next.value);
  }
}

/** A non-streamed call's failure, whether open() or text() reports it. */
async function callFailure(b: Backend, req: BackendRequest): Promise<UpstreamFailure> {
  return failureOf(b.open(req, ctx, new AbortController().signal).then((up) => up.text()));
}

async function poll(what: string, done: () => boolean, ms = 1_000): Promise<void> {
  const until = Date.now() + ms;
  while (!done()) {
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

export function backendContract(name: string, makeHarness: () => Promise<BackendHarness>): void {
  describe(`Backend contract: ${name}`, () => {
    let h: BackendHarness;
    beforeEach(async () => {
      h = await makeHarness();
    });
    afterEach(async () => {
      await h.close();
    });
    const open = (req: BackendRequest, signal = new AbortController().signal) => h.backend.open(req, ctx, signal);

    it("names itself by kind, serves chat, and is paid unless self-hosted", () => {
      const b = h.backend;
      expect(b.id.startsWith(`${b.kind}:`)).toBe(true);
      expect(b.supports("/v1/chat/completions")).toBe(true);
      // Self-hosted workers cost nothing against a budget; every provider bills.
      expect(b.paid).toBe(b.kind !== "worker");
    });

    it("a non-streamed chat answers an OpenAI chat.completion with the text and usage", async () => {
      h.arrange(ok);
      const text = await (await open(chat(false))).text();
      const body = JSON.parse(text) as { object?: string; choices?: Array<{ message?: { role?: string; content?: string } }> };
      expect(body.object).toBe("chat.completion");
      expect(body.choices).toHaveLength(1);
      expect(body.choices![0]!.message).toMatchObject({ role: "assistant", content: TEXT });
      expect(usageFrom(body, text)).toMatchObject({ prompt: 11, completion: 5 });
    });

    it("a streamed chat yields chunks of the text, one usage chunk, [DONE] and nothing else", async () => {
      h.arrange(ok);
      const events = await drain(await open(chat(true)));
      expect(events.at(-1)).toBe("[DONE]");
      expect(events.filter((e) => e === "[DONE]")).toHaveLength(1);
      // Keep-alives and pings are not progress: every other payload is a chunk.
      const chunks = events.slice(0, -1).map(parse);
      for (const c of chunks) expect(c.object).toBe("chat.completion.chunk");
      const usageChunk = chunks.at(-1)!;
      expect(usageChunk.choices).toEqual([]);
      expect(usageFrom(usageChunk)).toMatchObject({ prompt: 11, completion: 5 });
      const deltas = chunks.slice(0, -1);
      for (const c of deltas) {
        expect(c.choices).toHaveLength(1);
        expect(usageFrom(c)).toBeUndefined();
      }
      expect(deltas.map(contentOf).join("")).toBe(TEXT);
      expect(deltas.some((c) => c.choices![0]!.finish_reason === "stop")).toBe(true);
    });

    it("cached prompt tokens are counted inside the prompt, and as cached where the upstream reports them", async () => {
      const cached: Scenario = { kind: "ok", text: TEXT, promptTokens: 11, completionTokens: 5, cachedTokens: 4, cacheWriteTokens: 2 };
      h.arrange(cached, cached);
      const want = h.reportsPromptCache ? { prompt: 11, completion: 5, cached: 4, cacheWrite: 2 } : { prompt: 11, completion: 5, cached: 0, cacheWrite: 0 };
      const text = await (await open(chat(false))).text();
      expect(usageFrom(JSON.parse(text), text)).toMatchObject(want);
      const events = await drain(await open(chat(true)));
      const usages = events.filter((e) => e !== "[DONE]").flatMap((e) => usageFrom(JSON.parse(e), e) ?? []);
      expect(usages).toHaveLength(1);
      expect(usages[0]).toMatchObject(want);
    });

    for (const status of [429, 503]) {
      for (const stream of [false, true]) {
        it(`${status} before the ${stream ? "stream" : "body"} is a retryable failure`, async () => {
          h.arrange({ kind: "status", status });
          const f = await failureOf(open(chat(stream)));
          expect(f.retryable).toBe(true);
          expect(f.kind).not.toBe("client_error");
          expect(f.status).toBe(status);
        });
      }
    }

    it("counts a prompt where its upstream can, a whole number; failures as a run's: 503 retryable, 400 the client's, with its message", async () => {
      const b = h.backend;
      expect(b.countTokens !== undefined).toBe(h.countsTokens);
      if (!b.countTokens) return;
      const count = (): Promise<number> => b.countTokens!({ body: chat(false).body }, ctx, new AbortController().signal);
      h.arrange(ok);
      const n = await count();
      expect(Number.isSafeInteger(n) && n > 0).toBe(true);
      h.arrange({ kind: "status", status: 503 });
      const busy = await failureOf(count());
      expect(busy).toMatchObject({ retryable: true, status: 503 });
      expect(busy.kind).not.toBe("client_error");
      h.arrange({ kind: "status", status: 400, message: "messages: too many cooks" });
      const bad = await failureOf(count());
      expect(bad).toMatchObject({ kind: "client_error", retryable: false, status: 400, upstreamError: { message: "messages: too many cooks" } });
    });

    it("400 is a client error, not retried, carrying the upstream's message", async () => {
      h.arrange({ kind: "status", status: 400, message: "messages: too many cooks" });
      const f = await failureOf(open(chat(true)));
      expect(f.kind).toBe("client_error");
      expect(f.retryable).toBe(false);
      expect(f.status).toBe(400);
      expect(f.upstreamError?.message).toBe("messages: too many cooks");
    });

    it("a failure after 2 streamed tokens arrives after them, in this backend's declared style", async () => {
      h.arrange({ kind: "midstream_error", afterTokens: 2, message: "engine fell over" });
      const { before, failure } = await readToMidstreamFailure(await open(chat(true)));
      expect(failure.style).toBe(h.midstreamErrorStyle);
      expect(failure.message).toContain("engine fell over");
      if (failure.style === "throws") expect(failure.failure.kind).not.toBe("aborted");
      const chunks = before.map(parse);
      expect(chunks.filter((c) => contentOf(c) !== "")).toHaveLength(2);
      for (const c of chunks) expect(usageFrom(c)).toBeUndefined();
    });

    it("a failure after the upstream started, not streamed, is a retryable failure before any byte", async () => {
      h.arrange({ kind: "midstream_error", afterTokens: 2, message: "engine fell over" });
      const f = await callFailure(h.backend, chat(false));
      expect(f.retryable).toBe(true);
      expect(f.kind).not.toBe("client_error");
    });

    it("no usage reported: none anywhere, and the stream still ends with [DONE]", async () => {
      h.arrange({ kind: "no_usage", text: TEXT, completionTokens: 5 }, { kind: "no_usage", text: TEXT, completionTokens: 5 });
      const events = await drain(await open(chat(true)));
      expect(events.at(-1)).toBe("[DONE]");
      const chunks = events.slice(0, -1).map(parse);
      for (const c of chunks) expect(usageFrom(c)).toBeUndefined();
      expect(chunks.map(contentOf).join("")).toBe(TEXT);

      const text = await (await open(chat(false))).text();
      expect(JSON.parse(text)).toMatchObject({ object: "chat.completion", choices: [{ message: { content: TEXT } }] });
      expect(usageFrom(JSON.parse(text), text)).toBeUndefined();
    });

    it("aborting the signal mid-stream ends iteration with an aborted failure and disconnects the upstream", async () => {
      h.arrange({ kind: "slow", interTokenMs: 50, completionTokens: 40 });
      const abortedBefore = h.aborted();
      const controller = new AbortController();
      const up = await open(chat(true), controller.signal);
      const it = up.events();
      const first = await it.next();
      expect(first.done).toBe(false);
      controller.abort();
      const f = await failureOf(
        (async () => {
          for (let next = await it.next(); !next.done; next = await it.next()) {
            // tokens already in flight may still arrive; [DONE] may not
            expect(next.value).not.toBe("[DONE]");
          }
        })(),
      );
      expect(f.kind).toBe("aborted");
      await poll("the upstream to see the disconnect", () => h.aborted() > abortedBefore);
    });
  });
}
