// SSE event injection by a worker (issue 10, item 10): crafted line endings
// and multi-line data must reach a standard client (the `openai` SDK) as
// exactly the events the worker legitimately sent — the ones a spec parser
// reads from the worker's own bytes — never as an extra, injected event.
// The router re-serialises every event as one `data:` line of JSON it
// validated; a payload that is not JSON is a failure of that worker.
import OpenAI from "openai";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";
import { chunk, HostileWorker } from "./hostile-worker.ts";

let fx: RouterFixture;
const workers: HostileWorker[] = [];

beforeAll(async () => {
  fx = await startTestRouter({ "deadlines.idleMs": 5_000, "deadlines.totalMs": 20_000 });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
  await waitFor(() => fx.router.deps.directory.all().length === 0, { what: "registry empty" });
});

afterAll(async () => {
  await fx?.close();
});

/** A worker that answers every stream with these exact bytes. */
async function sends(id: string, bytes: string): Promise<HostileWorker> {
  const w = await new HostileWorker(id, fx.registry, (_req, res) => {
    res.writeHead(200, { "content-type": "text/event-stream" });
    res.end(bytes);
  }).start();
  workers.push(w);
  await waitFor(() => fx.router.deps.directory.all().some((r) => r.id === id), { what: `${id} visible` });
  return w;
}

const data = (v: unknown) => `data: ${JSON.stringify(v)}`;

/** What the openai SDK yields from a stream at `baseURL`, and the error that ended it, if any. */
async function sdkRead(baseURL: string, apiKey: string): Promise<{ chunks: unknown[]; error?: Error }> {
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
  const chunks: unknown[] = [];
  try {
    const stream = await client.chat.completions.create({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] });
    for await (const c of stream) chunks.push(c);
    return { chunks };
  } catch (error) {
    return { chunks, error: error as Error };
  }
}

const viaRouter = () => sdkRead(`${fx.router.url}/v1`, fx.key);
const direct = (w: HostileWorker) => sdkRead(`${w.url}/v1`, "unused");

/** The router's raw answer: every event must be exactly one `data:` line. */
async function rawEvents(): Promise<string[]> {
  const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] }),
  });
  expect(res.status).toBe(200);
  const text = await res.text();
  expect(text).toMatch(/^(data: [^\r\n]*\n\n)*$/);
  return text
    .split("\n\n")
    .filter((b) => b.length > 0)
    .map((b) => b.slice(6));
}

const c1 = chunk("c1", "hello");
const c2 = chunk("c1", " world");
const fin = chunk("c1", "", "stop");

describe("SSE injection by a worker", () => {
  it("one multi-line event hiding a `data:` line is one (invalid) event: the stream ends with one error event, never the injected one", async () => {
    const injected = `${data(c1)}\n\ndata: A\ndata: \ndata: data: {"injected":true}\n\n${data(fin)}\n\ndata: [DONE]\n\n`;
    const w = await sends("multi-line-inject", injected);
    const sdk = await viaRouter();
    expect(sdk.chunks).toEqual([c1]);
    expect(sdk.error?.message ?? "").toMatch(/not a JSON object/);
    expect(JSON.stringify(sdk.chunks)).not.toContain("injected");
    // What a standard client reads from the worker itself: the same one chunk, then a failure (the event is not JSON).
    const raw = await direct(w);
    expect(raw.chunks).toEqual([c1]);
    expect(raw.error).toBeDefined();
    const events = await rawEvents();
    expect(events).toHaveLength(2);
    expect(JSON.parse(events[1]!).error).toMatchObject({ code: "bad_upstream", type: "upstream_error" });
    expect(events.join("")).not.toContain("injected");
  });

  it("the same hidden line as the first event is a failure before any byte (502), and counts against the worker", async () => {
    await sends("first-inject", 'data: A\ndata: \ndata: data: {"injected":true}\n\n');
    const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(502);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("bad_upstream");
    expect(fx.router.deps.directory.scorer.health!.view("first-inject").consecutiveFailures).toBe(1);
  });

  it("CR-only line endings: the router reads the events a standard client reads, and relays each as one LF-framed line", async () => {
    const bytes = [data(c1), "", ": keep-alive", "", data(c2), "", data(fin), "", "data: [DONE]", "", ""].join("\r");
    const w = await sends("cr-only", bytes);
    const standard = await direct(w);
    expect(standard.error).toBeUndefined();
    expect(standard.chunks).toEqual([c1, c2, fin]);
    const sdk = await viaRouter();
    expect(sdk.error).toBeUndefined();
    expect(sdk.chunks).toEqual(standard.chunks);
    expect(await rawEvents()).toEqual([JSON.stringify(c1), JSON.stringify(c2), JSON.stringify(fin), "[DONE]"]);
  });

  it("a CR inside what an LF-only parser calls one line: two events for the router exactly as for the client", async () => {
    // An LF-only router would see one event and relay `\r\rdata: …` inside it, and the client two.
    const bytes = `${data(c1)}\r\r${data(c2)}\n\n${data(fin)}\r\n\r\ndata: [DONE]\n\n`;
    const w = await sends("cr-split", bytes);
    const standard = await direct(w);
    expect(standard.chunks).toEqual([c1, c2, fin]);
    const sdk = await viaRouter();
    expect(sdk.error).toBeUndefined();
    expect(sdk.chunks).toEqual(standard.chunks);
    expect(await rawEvents()).toHaveLength(4);
  });

  it("JSON spread over several data lines is one event, re-serialised as one line", async () => {
    const pretty = JSON.stringify(c2, null, 1).split("\n").map((l) => `data: ${l}`).join("\n");
    const bytes = `${data(c1)}\n\n${pretty}\n\n${data(fin)}\n\ndata: [DONE]\n\n`;
    const w = await sends("pretty-json", bytes);
    const standard = await direct(w);
    expect(standard.chunks).toEqual([c1, c2, fin]);
    const sdk = await viaRouter();
    expect(sdk.chunks).toEqual(standard.chunks);
    const events = await rawEvents();
    expect(events).toEqual([JSON.stringify(c1), JSON.stringify(c2), JSON.stringify(fin), "[DONE]"]);
  });

  it("event:, id:, retry: and unknown fields never reach the client; a non-JSON payload mid-stream ends it with one error event", async () => {
    const bytes = `event: error\nid: 1\nretry: 1\nx-evil: 1\n${data(c1)}\n\ndata: not json\n\n${data(fin)}\n\ndata: [DONE]\n\n`;
    await sends("fields", bytes);
    const events = await rawEvents();
    expect(events).toHaveLength(2);
    expect(JSON.parse(events[0]!)).toEqual(c1);
    expect(JSON.parse(events[1]!).error.message).toMatch(/not a JSON object/);
    const sdk = await viaRouter();
    expect(sdk.chunks).toEqual([c1]);
    expect(sdk.error).toBeDefined();
  });

  it("a JSON payload that is not an object (an array, a string) is refused too", async () => {
    await sends("not-object", `${data(c1)}\n\ndata: [{"injected":true}]\n\ndata: [DONE]\n\n`);
    const events = await rawEvents();
    expect(events).toHaveLength(2);
    expect(JSON.parse(events[1]!).error.code).toBe("bad_upstream");
  });
});
