// Chaos against workers, CI-sized: a worker frozen (SIGSTOP) or killed
// (kill -9) mid-stream, each a sim worker in a process of its own registered
// in the router's real Redis registry; with resume opted in, the client's
// stream completes on another worker (and how often that works is counted);
// a client that disconnects frees the worker's slot within 100 ms.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startSimProcess, type SimProcess } from "../helpers/sim-process.ts";
import { REDIS_URL, waitFor } from "../helpers/env.ts";

const IDLE_MS = 500;
const TOKENS = 40;
let fx: RouterFixture;
/** The healthy worker everything should move to; degraded, so a fresh victim is always tried first. */
let steady: SimWorker;

beforeAll(async () => {
  fx = await startTestRouter({
    "deadlines.idleMs": IDLE_MS,
    "deadlines.headersMs": 1_000,
    "deadlines.firstTokenMs": 1_000,
    "routing.scorer.epsilon": 0,
  });
  steady = await new SimWorker({ id: "steady", models: ["sim"], registry: fx.registry, state: "degraded", behavior: { tokens: TOKENS, interTokenMs: 2 } }).start();
  await waitFor(() => fx.router.deps.directory.candidates("sim").some((w) => w.id === "steady"), { what: "steady worker visible" });
});

afterAll(async () => {
  await steady?.stop();
  await fx?.close();
});

const fullText = Array.from({ length: TOKENS }, (_, i) => `tok${i} `).join("");

function post(body: Record<string, unknown>, headers: Record<string, string> = {}, signal?: AbortSignal) {
  return fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: "sim", messages: [{ role: "user", content: "count" }], ...body }),
    signal,
  });
}

/** Reads SSE payloads from a live response: `until(n)` waits for n events, `rest()` reads to the end. */
function sseReader(res: Response) {
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let buf = "";
  const events: string[] = [];
  const pull = async (): Promise<boolean> => {
    const { done, value } = await reader.read();
    if (done) return false;
    buf += dec.decode(value, { stream: true });
    let i: number;
    while ((i = buf.indexOf("\n\n")) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      if (block.startsWith("data: ")) events.push(block.slice(6));
    }
    return true;
  };
  return {
    events,
    until: async (n: number) => {
      while (events.length < n) if (!(await pull())) break;
    },
    rest: async () => {
      while (await pull());
      return events;
    },
  };
}

const text = (events: string[]) =>
  events
    .filter((e) => e.startsWith("{") && !e.startsWith('{"error"'))
    .map((e) => {
      const c = (JSON.parse(e) as { choices: Array<{ delta?: { content?: string } }> }).choices[0];
      return c?.delta?.content ?? "";
    })
    .join("");

async function victim(id: string): Promise<SimProcess> {
  // Earlier victims' records expire first: the one under test is the only lost worker.
  await waitFor(() => fx.router.deps.directory.all().every((w) => w.id === "steady" || w.id === "held"), { timeoutMs: 5_000, what: "earlier victims gone" });
  const p = await startSimProcess({ id, redisUrl: REDIS_URL, prefix: fx.redis.prefix, tokens: TOKENS, interTokenMs: 25, heartbeatMs: 500, ttlMs: 2_000 });
  await waitFor(() => fx.router.deps.directory.candidates("sim")[0]?.id === id, { timeoutMs: 10_000, what: `${id} first in rotation` });
  return p;
}

async function nextGoesElsewhere(gone: string) {
  const attempts = fx.router.deps.metrics.upstreamAttempts;
  const failed = () => ["connect", "timeout", "protocol", "bad_status"].reduce((n, outcome) => n + attempts.get({ backend: "worker", outcome }), 0);
  const failedBefore = failed();
  const t0 = performance.now();
  const res = await post({ stream: true });
  const headersMs = performance.now() - t0;
  const events = await sseReader(res).rest();
  expect(res.headers.get("x-switchyard-backend")).toBe("worker:steady");
  expect(events.at(-1)).toBe("[DONE]");
  // Straight there: the lost worker (still in the registry until its
  // heartbeat expires) was ejected, so no attempt and no deadline was spent on it.
  expect(failed()).toBe(failedBefore);
  expect(headersMs).toBeLessThan(300);
  expect(fx.router.deps.directory.all().map((w) => w.id)).toContain(gone);
  expect(fx.router.deps.directory.candidates("sim").map((w) => w.id)).not.toContain(gone);
}

describe("a worker lost mid-stream", () => {
  it("SIGSTOP: one error event within the idle deadline, and the next request goes elsewhere", async () => {
    const p = await victim("frozen");
    try {
      const res = await post({ stream: true });
      expect(res.headers.get("x-switchyard-backend")).toBe("worker:frozen");
      const r = sseReader(res);
      await r.until(3);
      p.signal("SIGSTOP");
      const t0 = performance.now();
      const events = await r.rest();
      const ms = performance.now() - t0;
      const errors = events.filter((e) => e.startsWith('{"error"'));
      expect(errors).toHaveLength(1);
      expect(events.at(-1)).toBe(errors[0]);
      expect(events).not.toContain("[DONE]");
      expect(JSON.parse(errors[0]!).error).toMatchObject({ code: "upstream_timeout" });
      expect(ms).toBeLessThan(IDLE_MS + 300);
      await nextGoesElsewhere("frozen");
    } finally {
      await p.kill();
    }
  });

  it("kill -9: one error event at once, and the next request goes elsewhere", async () => {
    const p = await victim("killed");
    try {
      const res = await post({ stream: true });
      const r = sseReader(res);
      await r.until(3);
      const t0 = performance.now();
      await p.kill();
      const events = await r.rest();
      expect(performance.now() - t0).toBeLessThan(IDLE_MS);
      const errors = events.filter((e) => e.startsWith('{"error"'));
      expect(errors).toHaveLength(1);
      expect(events.at(-1)).toBe(errors[0]);
      expect(JSON.parse(errors[0]!).error).toMatchObject({ code: "bad_upstream" });
      await nextGoesElsewhere("killed");
    } finally {
      await p.kill();
    }
  });

  it("kill -9 with x-switchyard-resume: the client's stream completes, whole and unrepeated — and how often", async () => {
    const n = Number(process.env.CHAOS_RESUME_N ?? 4);
    let completed = 0;
    for (let i = 0; i < n; i++) {
      const p = await victim(`resume-victim-${i}`);
      try {
        const res = await post({ stream: true }, { "x-switchyard-resume": "true" });
        expect(res.headers.get("x-switchyard-backend")).toBe(`worker:resume-victim-${i}`);
        const r = sseReader(res);
        await r.until(2 + ((i * 7) % (TOKENS - 4)));
        await p.kill();
        const events = await r.rest();
        if (events.at(-1) === "[DONE]" && text(events) === fullText && !events.some((e) => e.startsWith('{"error"'))) completed++;
      } finally {
        await p.kill();
      }
    }
    console.log(`resume after kill -9 mid-stream: ${completed}/${n} streams completed`);
    expect(completed).toBe(n);
  });
});

describe("client disconnect", () => {
  it("frees the worker's slot within 100 ms", async () => {
    const w = await new SimWorker({ id: "held", models: ["held"], registry: fx.registry, behavior: { tokens: 1000, interTokenMs: 10 } }).start();
    try {
      await waitFor(() => fx.router.deps.directory.candidates("held").length === 1);
      const freed: number[] = [];
      for (let i = 0; i < 5; i++) {
        const ac = new AbortController();
        const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: "held", stream: true, messages: [{ role: "user", content: "hi" }] }),
          signal: ac.signal,
        });
        await sseReader(res).until(2);
        expect(w.inFlight).toBe(1);
        const aborted = w.aborted;
        const t0 = performance.now();
        ac.abort();
        await waitFor(() => w.inFlight === 0 && w.aborted === aborted + 1, { timeoutMs: 2_000, intervalMs: 1, what: "slot freed" });
        freed.push(performance.now() - t0);
      }
      console.log(`client disconnect → worker slot freed in ${freed.map((m) => m.toFixed(1)).join(", ")} ms`);
      expect(Math.max(...freed)).toBeLessThan(100);
    } finally {
      await w.stop();
    }
  });
});
