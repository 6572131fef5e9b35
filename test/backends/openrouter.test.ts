// OpenRouterBackend against the fake OpenRouter: request shape, usage and
// cost passed through exactly, keep-alives dropped, every error class mapped,
// aborts reaching the upstream. No router: the backend is driven directly.
import { afterAll, beforeAll, beforeEach, describe, expect, it, vi } from "vitest";
import { usdToMicro } from "@switchyard/db";
import { OpenRouterBackend, OpenRouterConnections } from "../../apps/router/src/backends/openrouter/client.ts";
import { type BackendRequest, UpstreamFailure } from "../../apps/router/src/backends/types.ts";
import { usageFrom } from "../../apps/router/src/backends/usage.ts";
import type { RelayContext } from "../../apps/router/src/relay/context.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";

const KEY = "sk-or-v1-test-key";
const MODEL = "openai/gpt-4o-mini";

let fake: FakeOpenRouter;
let connections: OpenRouterConnections;
let backend: OpenRouterBackend;

// open() reads only the request id from the relay context.
const ctx = (requestId = "req-test") => ({ requestId }) as unknown as RelayContext;

const chat = (stream: boolean, extra: Record<string, unknown> = {}): BackendRequest => ({
  path: "/v1/chat/completions",
  stream,
  body: { model: "client-alias", messages: [{ role: "user", content: "Say hello" }], stream, ...extra },
});

/** Every payload the backend yields, or the failure that ended the stream. */
async function drain(req: BackendRequest, b = backend): Promise<{ events: string[]; failure?: UpstreamFailure }> {
  const up = await b.open(req, ctx(), new AbortController().signal);
  const events: string[] = [];
  try {
    for await (const e of up.events()) events.push(e);
  } catch (err) {
    if (!(err instanceof UpstreamFailure)) throw err;
    return { events, failure: err };
  }
  return { events };
}

async function openFailure(req: BackendRequest, b = backend): Promise<UpstreamFailure> {
  const err = await b.open(req, ctx(), new AbortController().signal).then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(UpstreamFailure);
  return err as UpstreamFailure;
}

beforeAll(async () => {
  fake = await new FakeOpenRouter({ apiKey: KEY }).start();
  connections = new OpenRouterConnections({ baseUrl: fake.url, apiKey: KEY, referer: "https://switchyard.test", title: "Switchyard tests", connectTimeoutMs: 1_000 });
  backend = new OpenRouterBackend(MODEL, connections);
});

afterAll(async () => {
  await connections?.close();
  await fake?.stop();
});

beforeEach(() => {
  fake.requests.length = 0;
  fake.reportedCostsUsd.length = 0;
});

describe("OpenRouterBackend", () => {
  it("is a paid backend named after its model, serving everything but hidden states", () => {
    expect(backend.id).toBe(`openrouter:${MODEL}`);
    expect(backend.kind).toBe("openrouter");
    expect(backend.paid).toBe(true);
    expect(backend.supports("/v1/chat/completions")).toBe(true);
    expect(backend.supports("/v1/completions")).toBe(true);
    expect(backend.supports("/v1/embeddings")).toBe(true);
    expect(backend.supports("/v1/hidden_states")).toBe(false);
  });

  it("sends the upstream model, usage accounting, the key, attribution and the request id", async () => {
    const up = await backend.open(chat(false, { usage: { something: 1 } }), ctx("req-42"), new AbortController().signal);
    await up.text();
    const got = fake.requests[0]!;
    expect(got.path).toBe("/api/v1/chat/completions");
    expect(got.body.model).toBe(MODEL);
    expect(got.body.usage).toEqual({ something: 1, include: true });
    expect(got.body.messages).toEqual([{ role: "user", content: "Say hello" }]);
    expect(got.headers.authorization).toBe(`Bearer ${KEY}`);
    expect(got.headers["http-referer"]).toBe("https://switchyard.test");
    expect(got.headers["x-title"]).toBe("Switchyard tests");
    expect(got.headers["x-request-id"]).toBe("req-42");
  });

  it("returns a non-streamed chat body whose usage carries OpenRouter's exact cost and generation id", async () => {
    // Prompts of different sizes: costs differ, and each must survive to the micro-cent.
    for (const content of ["hi", "a somewhat longer prompt for a different cost", "x".repeat(301)]) {
      const up = await backend.open(chat(false, { messages: [{ role: "user", content }] }), ctx(), new AbortController().signal);
      const text = await up.text();
      const body = JSON.parse(text) as { id: string; object: string; choices: { message: { content: string } }[] };
      expect(body.object).toBe("chat.completion");
      expect(body.choices[0]!.message.content).toBe("Hello from the fake OpenRouter.");
      const usage = usageFrom(body, text)!;
      const i = fake.reportedCostsUsd.length - 1;
      expect(usage.providerCostMicro).toBe(usdToMicro(fake.reportedCostsUsd[i]!));
      expect(usage.providerCostMicro! > 0n).toBe(true);
      expect(usage.generationId).toMatch(/^gen-\d+-[A-Za-z0-9]{20}$/);
      expect(usage.completion).toBe(5);
    }
    expect(new Set(fake.reportedCostsUsd).size).toBe(3);
  });

  it("passes a scenario's cost through to the digit", async () => {
    fake.enqueue({ kind: "ok", costUsd: "0.00012345", promptTokens: 100, cachedTokens: 40, completionTokens: 3 });
    const up = await backend.open(chat(false), ctx(), new AbortController().signal);
    const text = await up.text();
    expect(text).toContain('"cost":0.00012345,');
    const usage = usageFrom(JSON.parse(text), text)!;
    expect(usage).toMatchObject({ prompt: 100, cached: 40, completion: 3, providerCostMicro: 12_345n });
  });

  it("streams token chunks, then the usage chunk, then [DONE], without the keep-alive comments", async () => {
    fake.enqueue({ kind: "ok", text: "one two three", keepAlives: 3 });
    const { events, failure } = await drain(chat(true));
    expect(failure).toBeUndefined();
    expect(events.some((e) => e.includes("OPENROUTER PROCESSING"))).toBe(false);
    expect(events.at(-1)).toBe("[DONE]");
    const chunks = events.slice(0, -1).map((e) => JSON.parse(e) as { id: string; choices: { delta?: { content?: string }; finish_reason: string | null }[]; usage?: unknown });
    expect(chunks.slice(0, 3).map((c) => c.choices[0]!.delta!.content)).toEqual(["one ", "two ", "three"]);
    expect(chunks[3]!.choices[0]!.finish_reason).toBe("stop");
    const last = chunks[4]!;
    expect(last.choices).toEqual([]);
    const usage = usageFrom(last, events[4])!;
    expect(usage.completion).toBe(3);
    expect(usage.providerCostMicro).toBe(usdToMicro(fake.reportedCostsUsd[0]!));
    expect(usage.generationId).toBe(chunks[0]!.id);
    expect(chunks.length).toBe(5);
  });

  it("throws a retryable failure on OpenRouter's mid-stream error chunk, after the tokens before it", async () => {
    fake.enqueue({ kind: "midstream_error", afterTokens: 2, message: "Provider disconnected unexpectedly" });
    const { events, failure } = await drain(chat(true));
    expect(events).toHaveLength(2);
    expect(failure).toMatchObject({ kind: "bad_status", retryable: true, message: "openrouter: Provider disconnected unexpectedly" });
  });

  it("fails the very first event when the error chunk comes before any token", async () => {
    fake.enqueue({ kind: "midstream_error", afterTokens: 0 });
    const { events, failure } = await drain(chat(true));
    expect(events).toEqual([]);
    expect(failure).toMatchObject({ kind: "bad_status", retryable: true });
  });

  it("treats a 200 whose body is an error (provider failed after starting) as a retryable failure", async () => {
    fake.enqueue({ kind: "midstream_error", afterTokens: 0, message: "upstream went away" });
    const up = await backend.open(chat(false), ctx(), new AbortController().signal);
    await expect(up.text()).rejects.toMatchObject({ kind: "bad_status", retryable: true, message: "openrouter: upstream went away" });
  });

  it.each([429, 503, 402, 403, 502, 408])("maps %i before the stream to a retryable bad_status", async (status) => {
    fake.enqueue({ kind: "status", status });
    const f = await openFailure(chat(true));
    expect(f).toMatchObject({ kind: "bad_status", retryable: true, status });
    expect(f.upstreamError?.code).toBe(String(status));
  });

  it.each([
    [429, "7", { reason: "rate_limited", retryAfterS: 7 }],
    [503, "2", { reason: "overloaded", retryAfterS: 2 }],
    // An HTTP-date Retry-After is not taken on trust of two clocks: the router's own default then.
    [429, "Wed, 21 Oct 2026 07:28:00 GMT", { reason: "rate_limited" }],
    [502, "5", undefined],
  ] as const)("a %i (Retry-After %s) says whether OpenRouter is busy, for the client's answer when no candidate is left", async (status, retryAfter, busy) => {
    fake.enqueue({ kind: "status", status, retryAfter });
    const f = await openFailure(chat(false));
    expect(f.busy).toEqual(busy);
  });

  it("a 200 whose body is OpenRouter's 429 error is busy too", async () => {
    fake.enqueue({ kind: "midstream_error", afterTokens: 0, message: "Rate limit exceeded", code: 429 });
    const up = await backend.open(chat(false), ctx(), new AbortController().signal);
    await expect(up.text()).rejects.toMatchObject({ kind: "bad_status", status: 429, busy: { reason: "rate_limited" } });
  });

  it.each([400, 413, 422])("passes %i through as a client error with OpenRouter's message", async (status) => {
    fake.enqueue({ kind: "status", status, message: "max_tokens must be at most 16384" });
    const f = await openFailure(chat(false));
    expect(f).toMatchObject({ kind: "client_error", retryable: false, status });
    expect(f.upstreamError).toEqual({ message: "max_tokens must be at most 16384", param: null, code: String(status) });
  });

  it("sends no usage chunk when OpenRouter reports none", async () => {
    fake.enqueue({ kind: "no_usage", text: "a b" }, { kind: "no_usage" });
    const { events } = await drain(chat(true));
    expect(events.at(-1)).toBe("[DONE]");
    expect(events.some((e) => e.includes('"usage"'))).toBe(false);
    const up = await backend.open(chat(false), ctx(), new AbortController().signal);
    const text = await up.text();
    expect(usageFrom(JSON.parse(text), text)).toBeUndefined();
    expect(fake.reportedCostsUsd).toEqual([]);
  });

  it("serves legacy completions", async () => {
    const up = await backend.open({ path: "/v1/completions", stream: false, body: { model: "x", prompt: "Once upon" } }, ctx(), new AbortController().signal);
    const text = await up.text();
    expect(fake.requests[0]!.path).toBe("/api/v1/completions");
    expect((JSON.parse(text) as { choices: { text: string }[] }).choices[0]!.text).toBe("Hello from the fake OpenRouter.");
    expect(usageFrom(JSON.parse(text), text)?.providerCostMicro).toBe(usdToMicro(fake.reportedCostsUsd[0]!));
  });

  it("serves embeddings with their cost", async () => {
    const up = await backend.open({ path: "/v1/embeddings", stream: false, body: { model: "x", input: ["alpha", "beta"] } }, ctx(), new AbortController().signal);
    const text = await up.text();
    const body = JSON.parse(text) as { object: string; data: { embedding: number[]; index: number }[]; model: string };
    expect(fake.requests[0]!.path).toBe("/api/v1/embeddings");
    expect(body.object).toBe("list");
    expect(body.model).toBe(MODEL);
    expect(body.data.map((d) => d.index)).toEqual([0, 1]);
    expect(body.data[0]!.embedding.length).toBeGreaterThan(0);
    const usage = usageFrom(body, text)!;
    expect(usage.providerCostMicro).toBe(usdToMicro(fake.reportedCostsUsd[0]!));
    expect(usage.generationId).toMatch(/^gen-/);
  });

  it("aborting the signal mid-stream stops the upstream response", async () => {
    fake.enqueue({ kind: "slow", interTokenMs: 50, completionTokens: 200 });
    const aborted = fake.aborted;
    const controller = new AbortController();
    const up = await backend.open(chat(true), ctx(), controller.signal);
    const events = up.events();
    expect((await events.next()).done).toBe(false);
    controller.abort();
    await expect(events.next()).rejects.toMatchObject({ kind: "aborted", retryable: false });
    await vi.waitFor(() => expect(fake.aborted).toBe(aborted + 1), { timeout: 2_000 });
    expect(fake.reportedCostsUsd).toEqual([]);
  });

  it("maps a wrong key to a retryable 401 carrying OpenRouter's message", async () => {
    const wrong = new OpenRouterConnections({ baseUrl: fake.url, apiKey: "sk-or-v1-wrong", connectTimeoutMs: 1_000 });
    try {
      const f = await openFailure(chat(false), new OpenRouterBackend(MODEL, wrong));
      expect(f).toMatchObject({ kind: "bad_status", retryable: true, status: 401, upstreamError: { message: "User not found.", code: "401" } });
      const got = fake.requests.at(-1)!;
      expect(got.headers["http-referer"]).toBeUndefined();
      expect(got.headers["x-title"]).toBeUndefined();
    } finally {
      await wrong.close();
    }
  });

  it("reports a refused connection as a retryable connect failure", async () => {
    const closed = await new FakeOpenRouter().start();
    const url = closed.url;
    await closed.stop();
    const dead = new OpenRouterConnections({ baseUrl: url, apiKey: KEY, connectTimeoutMs: 500 });
    try {
      const f = await openFailure(chat(false), new OpenRouterBackend(MODEL, dead));
      expect(f).toMatchObject({ kind: "connect", retryable: true });
    } finally {
      await dead.close();
    }
  });
});
