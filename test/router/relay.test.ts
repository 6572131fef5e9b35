// Relay behaviour against sim workers with faults: every deadline, failover
// before the first byte, one error event after it, client disconnects.
import { spawn } from "node:child_process";
import { Socket } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { SimWorker, type SimBehavior } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

let fx: RouterFixture;
const workers: SimWorker[] = [];

beforeAll(async () => {
  fx = await startTestRouter({
    "deadlines.connectMs": 300,
    "deadlines.headersMs": 400,
    "deadlines.answerMs": 1_500,
    "deadlines.firstTokenMs": 400,
    "deadlines.idleMs": 400,
    "deadlines.totalMs": 5_000,
  });
});

afterEach(async () => {
  await Promise.all(workers.splice(0).map((w) => w.stop()));
  await waitFor(async () => (await fx.registry.list()).length === 0 && fx.router.deps.directory.all().length === 0, { what: "registry empty" });
});

afterAll(async () => {
  await fx?.close();
});

async function sim(id: string, behavior: Partial<SimBehavior>, model = "m"): Promise<SimWorker> {
  const w = await new SimWorker({ id, models: [model], registry: fx.registry, behavior }).start();
  workers.push(w);
  return w;
}

async function waitForWorkers(n: number) {
  await waitFor(() => fx.router.deps.directory.all().length === n, { what: `${n} workers visible` });
}

function post(body: unknown, init: { signal?: AbortSignal } = {}) {
  return fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
    signal: init.signal,
  });
}

const chat = (stream: boolean) => ({ model: "m", stream, messages: [{ role: "user", content: "hi" }] });

// eslint-disable-next-line @typescript-eslint/no-explicit-any
const json = (res: Response): Promise<any> => res.json();

/** Reads an SSE body to the end and returns its data payloads. */
async function payloads(res: Response): Promise<string[]> {
  const text = await res.text();
  return text
    .split("\n\n")
    .filter((b) => b.startsWith("data: "))
    .map((b) => b.slice(6));
}

describe("deadlines", () => {
  it("connect: a worker that never completes the TCP handshake times out (504), quickly", async () => {
    // A listener that never accepts, with its accept queue full: the kernel
    // drops further SYNs, so connecting hangs until our connect deadline.
    // Node always accepts, so a tiny Python process holds the socket.
    const py = spawn("python3", ["-c", "import socket,time\ns=socket.socket()\ns.bind(('127.0.0.1',0))\ns.listen(0)\nprint(s.getsockname()[1],flush=True)\ntime.sleep(30)"]);
    const port = Number(await new Promise<string>((r) => py.stdout.once("data", (d: Buffer) => r(d.toString()))));
    const held: Socket[] = [];
    try {
      for (let i = 0; i < 3; i++) {
        const s = new Socket();
        s.on("error", () => {});
        s.connect(port, "127.0.0.1");
        held.push(s);
      }
      await new Promise((r) => setTimeout(r, 200));
      const w = new SimWorker({ id: "blackhole", models: ["m"], registry: fx.registry });
      await fx.registry.publish({ ...w.record(), url: `http://127.0.0.1:${port}` }, 3000);
      await waitForWorkers(1);
      const t0 = performance.now();
      const res = await post(chat(false));
      const ms = performance.now() - t0;
      expect(res.status).toBe(504);
      expect((await json(res)).error).toMatchObject({ code: "upstream_timeout" });
      expect(ms).toBeGreaterThanOrEqual(280);
      expect(ms).toBeLessThan(2_000);
    } finally {
      held.forEach((s) => s.destroy());
      py.kill();
      await fx.registry.remove("blackhole");
    }
  });

  it("headers: a stream's headers not within headersMs → 504; a whole answer's not within answerMs → 504", async () => {
    await sim("slow-headers", { stallBeforeHeaders: true });
    await waitForWorkers(1);
    let t0 = performance.now();
    const streamed = await post(chat(true));
    expect(streamed.status).toBe(504);
    expect((await json(streamed)).error).toMatchObject({ code: "upstream_timeout", type: "timeout_error", message: expect.stringMatching(/headers deadline of 400 ms/) });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(380);
    t0 = performance.now();
    const whole = await post(chat(false));
    expect(whole.status).toBe(504);
    expect((await json(whole)).error).toMatchObject({ code: "upstream_timeout", message: expect.stringMatching(/answer deadline of 1500 ms/) });
    expect(performance.now() - t0).toBeGreaterThanOrEqual(1_480);
  });

  it("a whole answer's worker that leaves the registry (its heartbeats stop: a cut cable) is given up within a headersMs step, not at answerMs", async () => {
    const gone = await sim("goes-silent", { stallBeforeHeaders: true });
    await waitForWorkers(1);
    const t0 = performance.now();
    const res = post(chat(false));
    // While it waits, its record goes (dispatch then fails over to any other candidate: "fails over before the first byte").
    await sleep(100);
    gone.stopHeartbeats();
    await fx.registry.remove("goes-silent");
    const r = await res;
    expect(r.status).toBe(504);
    expect((await json(r)).error.message).toMatch(/headers deadline of 400 ms/);
    // Given up at a step (400 ms or 800 ms), not at answerMs (1500 ms).
    expect(performance.now() - t0).toBeLessThan(1_400);
  });

  it("a whole answer may take longer than headersMs: its headers come only once it is generated", async () => {
    await sim("slow-whole", { headersDelayMs: 800 });
    await waitForWorkers(1);
    const res = await post(chat(false));
    expect(res.status).toBe(200);
    expect((await json(res)).choices[0].message.content.length).toBeGreaterThan(0);
  });

  it("first token: headers but no event within firstTokenMs → 504 (nothing was sent yet)", async () => {
    await sim("no-first-token", { stallAfterEvents: 0 });
    await waitForWorkers(1);
    const res = await post(chat(true));
    expect(res.status).toBe(504);
    expect((await json(res)).error.message).toMatch(/first token deadline/);
  });

  it("idle: a stream that goes quiet ends with one error event", async () => {
    await sim("goes-quiet", { stallAfterEvents: 2 });
    await waitForWorkers(1);
    const res = await post(chat(true));
    expect(res.status).toBe(200);
    const events = await payloads(res);
    expect(events).toHaveLength(3);
    expect(JSON.parse(events[2]!).error).toMatchObject({ code: "upstream_timeout" });
    expect(events[2]).toMatch(/idle deadline/);
    expect(events).not.toContain("[DONE]");
  });

  it("total: a stream slower than totalMs is cut with an error event", async () => {
    const local = await startTestRouter({ "deadlines.totalMs": 600, "deadlines.idleMs": 1000 });
    try {
      const w = await new SimWorker({ id: "slowpoke", models: ["m"], registry: local.registry, behavior: { tokens: 50, interTokenMs: 50 } }).start();
      await waitFor(() => local.router.deps.directory.all().length === 1);
      const t0 = performance.now();
      const res = await fetch(`${local.router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${local.key}`, "content-type": "application/json" },
        body: JSON.stringify(chat(true)),
      });
      const events = await payloads(res);
      const ms = performance.now() - t0;
      await w.stop();
      const last = JSON.parse(events[events.length - 1]!);
      expect(last.error.code).toBe("upstream_timeout");
      expect(events.filter((e) => e.includes('"error"'))).toHaveLength(1);
      expect(ms).toBeLessThan(1500);
    } finally {
      await local.close();
    }
  });
});

describe("a whole answer's bytes", () => {
  it("reach the client as the worker sent them (content-length in bytes), and bytes that are not UTF-8 as the text the router parsed", async () => {
    const text = "héllo — 日本語 🎉 ok";
    await sim("utf8", { tokens: 3, text });
    await waitForWorkers(1);
    const res = await post(chat(false));
    expect(res.status).toBe(200);
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(Number(res.headers.get("content-length"))).toBe(bytes.length);
    expect(JSON.parse(bytes.toString("utf8")).choices[0].message.content).toBe(text);
    await Promise.all(workers.splice(0).map((w) => w.stop()));
    await waitForWorkers(0);

    // A broken upstream: 0xff bytes inside the content. The answer is still JSON, in UTF-8, with U+FFFD where they were.
    await sim("latin", { tokens: 2, text: "caf\u0001 au lait", notUtf8: true });
    await waitForWorkers(1);
    const bad = await post(chat(false));
    expect(bad.status).toBe(200);
    const got = Buffer.from(await bad.arrayBuffer());
    expect(got.includes(0xff)).toBe(false);
    expect(Number(bad.headers.get("content-length"))).toBe(got.length);
    expect(JSON.parse(got.toString("utf8")).choices[0].message.content).toBe("caf\ufffd au lait");
  });
});

describe("failover and mid-stream failure", () => {
  it("fails over before the first byte: a 500 and a reset both move to the next worker", async () => {
    const broken = await sim("broken", { failStatus: 500 });
    const reset = await sim("reset", { resetBeforeHeaders: true });
    const good = await sim("good", { tokens: 3 });
    await waitForWorkers(3);
    for (let i = 0; i < 6; i++) {
      const res = await post(chat(i % 2 === 0));
      expect(res.status).toBe(200);
      expect(res.headers.get("x-switchyard-backend")).toBe("worker:good");
      if (i % 2 === 0) expect((await payloads(res)).at(-1)).toBe("[DONE]");
      else expect((await json(res)).choices[0].message.content).toBe("tok0 tok1 tok2 ");
    }
    // Each request tried the broken ones only when they came first; the good one served all.
    expect((good.served.get("/v1/chat/completions") ?? 0)).toBe(6);
    expect((broken.served.get("/v1/chat/completions") ?? 0) + (reset.served.get("/v1/chat/completions") ?? 0)).toBeGreaterThan(0);
  });

  it("caps attempts per request and answers 502 when every worker fails", async () => {
    for (let i = 0; i < 5; i++) await sim(`bad-${i}`, { failStatus: 503 });
    await waitForWorkers(5);
    const res = await post(chat(false));
    expect(res.status).toBe(502);
    expect((await json(res)).error.code).toBe("bad_upstream");
    const tried = workers.reduce((n, w) => n + (w.served.get("/v1/chat/completions") ?? 0), 0);
    expect(tried).toBe(3); // router.maxAttempts
  });

  it("passes a worker's 400 through without failing over", async () => {
    const w1 = await sim("picky-1", { failStatus: 400 });
    const w2 = await sim("picky-2", { failStatus: 400 });
    await waitForWorkers(2);
    const res = await post(chat(false));
    expect(res.status).toBe(400);
    expect((await json(res)).error.message).toMatch(/sim failure 400/);
    expect((w1.served.get("/v1/chat/completions") ?? 0) + (w2.served.get("/v1/chat/completions") ?? 0)).toBe(1);
  });

  it("after the first byte a dropped connection ends the stream with exactly one error event", async () => {
    await sim("dropper", { dropAfterEvents: 2, tokens: 6 });
    await waitForWorkers(1);
    const res = await post(chat(true));
    expect(res.status).toBe(200);
    const events = await payloads(res);
    expect(events).toHaveLength(3);
    const errors = events.filter((e) => e.startsWith('{"error"'));
    expect(errors).toHaveLength(1);
    expect(JSON.parse(errors[0]!).error).toMatchObject({ code: "bad_upstream", type: "upstream_error" });
    expect(JSON.parse(errors[0]!).error.request_id).toBe(res.headers.get("x-request-id"));
    expect(events).not.toContain("[DONE]");
  });

  it("a stream that ends cleanly without [DONE] is reported, never a clean close", async () => {
    await sim("truncator", { truncateAfterEvents: 2, tokens: 6 });
    await waitForWorkers(1);
    const events = await payloads(await post(chat(true)));
    expect(events).toHaveLength(3);
    expect(JSON.parse(events[2]!).error.message).toMatch(/without \[DONE\]/);
  });
});

describe("client disconnect", () => {
  it("aborts the upstream request so the worker frees its slot", async () => {
    const w = await sim("long", { tokens: 1000, interTokenMs: 20 });
    await waitForWorkers(1);
    const ac = new AbortController();
    const res = await post(chat(true), { signal: ac.signal });
    const reader = res.body!.getReader();
    await reader.read(); // first event arrived: the stream is live
    expect(w.inFlight).toBe(1);
    const aborted = w.nextAbort();
    const t0 = performance.now();
    ac.abort();
    await aborted;
    expect(performance.now() - t0).toBeLessThan(1000);
    await waitFor(() => w.inFlight === 0, { what: "slot freed" });
  });
});
