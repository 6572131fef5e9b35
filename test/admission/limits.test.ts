// Admission's limits and edges through a real router: a full queue answers
// 503 with Retry-After, a wait past the band's TTL 504 with Retry-After, a
// client that goes away leaves the queue at once; metrics on /metrics; and
// paid backends are not worker capacity (not gated when they come first, the
// pool place given back when a request falls through to them).
import { beforeAll, describe, expect, it } from "vitest";
import { setPrice } from "@switchyard/db";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import type { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { call, harnessHooks, MODEL, startHarness, waiting, type Harness } from "./harness.ts";

let h: Harness;
let openrouter: FakeOpenRouter;
const PAID = "vendor/adm-paid";

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-adm" }).start();
  h = await startHarness(["live", "bulk", "payfirst"], {
    "admission.tenants": { live: { defaultBand: "interactive" }, bulk: { defaultBand: "batch", maxBand: "batch" } },
    "admission.bands.interactive.ttlMs": 400,
    "admission.bands.interactive.retryAfterS": 3,
    "admission.bands.batch.maxQueue": 2,
    "admission.bands.batch.retryAfterS": 7,
    "providers.openrouter": { apiKey: "sk-or-adm", baseUrl: openrouter.url },
    // The pool's model is also on OpenRouter: workers first by default, paid first for one tenant.
    "routing.models": { [MODEL]: { worker: MODEL, openrouter: PAID } },
    "routing.tenantChains": { payfirst: ["openrouter", "local", "remote"] },
  });
  await setPrice(h.fx.db.db, { backend: "openrouter", model: PAID, inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 1_000_000n });
  await waitFor(() => h.fx.router.deps.guard.deps.prices.price("openrouter", PAID), { what: "price visible", timeoutMs: 10_000 });
});

const { calls, start, pool } = harnessHooks(() => h, async () => {
  await openrouter?.stop();
});

async function fullPool(slots: number): Promise<SimWorker> {
  const w = await pool(`full-${slots}-${calls.length}`, slots);
  for (let i = 0; i < slots; i++) start("live", { hold: true });
  await waitFor(() => w.inFlight === slots, { what: "pool full" });
  return w;
}

describe("bounded queues", () => {
  it("a full band queue answers 503 queue_full with the band's Retry-After, at once", async () => {
    const w = await pool("qfull", 2);
    // Batch: 1 of 2 slots (0.5 < 0.7), then 2 of 2; then 2 may wait.
    for (let i = 0; i < 4; i++) start("bulk", { hold: true });
    await waitFor(() => w.inFlight === 2 && waiting(h, "batch") === 2, { what: "2 running, 2 waiting" });
    const before = h.fx.router.deps.metrics.admissionRejections.get({ band: "batch", reason: "queue_full" });
    const t0 = performance.now();
    const r = await call(h, "bulk").done;
    expect(performance.now() - t0).toBeLessThan(500);
    expect(r.status).toBe(503);
    expect(r.headers.get("retry-after")).toBe("7");
    expect(JSON.parse(r.body).error).toMatchObject({ code: "queue_full", type: "service_unavailable" });
    expect(h.fx.router.deps.metrics.admissionRejections.get({ band: "batch", reason: "queue_full" })).toBe(before + 1);
    // Other bands have their own queues.
    expect(waiting(h, "batch")).toBe(2);
    start("acme", { hold: true });
    await waitFor(() => waiting(h, "standard") === 1, { what: "standard still queues" });
  });

  it("a request that waited past its band's TTL gets 504 queue_timeout with Retry-After", async () => {
    await fullPool(2);
    const t0 = performance.now();
    const r = await call(h, "live").done;
    const ms = performance.now() - t0;
    expect(r.status).toBe(504);
    expect(r.headers.get("retry-after")).toBe("3");
    expect(JSON.parse(r.body).error).toMatchObject({ code: "queue_timeout", type: "timeout_error" });
    expect(ms).toBeGreaterThanOrEqual(390);
    expect(ms).toBeLessThan(2_000);
    expect(waiting(h, "interactive")).toBe(0);
    expect(h.fx.router.deps.metrics.admissionRejections.get({ band: "interactive", reason: "timeout" })).toBeGreaterThanOrEqual(1);
  });

  it("a client that goes away leaves the queue at once and never reaches a worker", async () => {
    const w = await fullPool(2);
    const servedBefore = w.served.get("/v1/chat/completions") ?? 0;
    const queued = start("acme");
    const behind = start("acme");
    await waitFor(() => waiting(h, "standard") === 2, { what: "two queued" });
    const t0 = performance.now();
    queued.abort();
    await waitFor(() => waiting(h, "standard") === 1, { intervalMs: 2, what: "cancelled one gone" });
    expect(performance.now() - t0).toBeLessThan(100);
    expect(h.fx.router.deps.metrics.admissionRejections.get({ band: "standard", reason: "cancelled" })).toBeGreaterThanOrEqual(1);
    // A slot frees: the one behind runs, the cancelled one is not sent anywhere.
    calls[0]!.abort();
    expect((await behind.done).status).toBe(200);
    await sleep(100);
    expect((w.served.get("/v1/chat/completions") ?? 0) - servedBefore).toBe(1);
  });
});

describe("what is not worker capacity", () => {
  it("a pool with no worker accepting work is not gated: the chain answers at once", async () => {
    const w = await pool("draining", 1);
    w.state = "draining";
    await w.heartbeat();
    await waitFor(() => h.fx.router.deps.directory.all().every((r) => r.state === "draining"), { what: "draining visible" });
    openrouter.enqueue({ kind: "ok" });
    const r = await call(h, "acme").done;
    expect(r.status).toBe(200);
    expect(r.headers.get("x-switchyard-backend")).toBe(`openrouter:${PAID}`);
    expect(waiting(h, "standard")).toBe(0);
  });

  it("a tenant whose chain puts the paid step first is not held in the workers' queue", async () => {
    await fullPool(2);
    openrouter.enqueue({ kind: "ok" });
    const t0 = performance.now();
    const r = await call(h, "payfirst").done;
    expect(r.status).toBe(200);
    expect(r.headers.get("x-switchyard-backend")).toBe(`openrouter:${PAID}`);
    expect(performance.now() - t0).toBeLessThan(1_000);
  });

  it("a request that falls through from a worker to a paid backend gives its pool place back at that attempt", async () => {
    const w = await pool("failing", 2);
    w.behavior.failStatus = 503;
    openrouter.enqueue({ kind: "slow", interTokenMs: 100, completionTokens: 20 });
    const admitted = h.fx.router.deps.metrics.admissionAdmitted.get({ band: "standard", queued: "false" });
    const res = await fetch(`${h.fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${h.keys.acme}`, "content-type": "application/json" },
      body: JSON.stringify({ model: MODEL, stream: true, messages: [{ role: "user", content: "hi" }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-backend")).toBe(`openrouter:${PAID}`);
    // It was admitted onto the pool (the worker was tried first)…
    expect(h.fx.router.deps.metrics.admissionAdmitted.get({ band: "standard", queued: "false" })).toBe(admitted + 1);
    expect(w.served.get("/v1/chat/completions")).toBe(1);
    // …and mid-stream on OpenRouter (2 s of tokens) the pool no longer counts it.
    expect(h.gate.inspect(MODEL)!.outstanding).toBe(0);
    expect(await res.text()).toContain("[DONE]");
  });
});

describe("metrics", () => {
  it("queue depth per band, wait time, rejections and pool saturation are on /metrics", async () => {
    await fullPool(2);
    start("bulk");
    await waitFor(() => waiting(h, "batch") === 1, { what: "batch waiting" });
    const text = await (await fetch(`${h.fx.router.adminUrl}/metrics`)).text();
    expect(text).toContain(`switchyard_admission_queue_depth{band="batch",pool="${MODEL}"} 1`);
    expect(text).toContain(`switchyard_admission_queue_depth{band="interactive",pool="${MODEL}"} 0`);
    expect(text).toContain(`switchyard_pool_saturation{pool="${MODEL}"} 1`);
    expect(text).toMatch(/switchyard_admission_wait_seconds_bucket\{band="interactive",le="0.001"\} \d+/);
    expect(text).toMatch(/switchyard_admission_wait_seconds_count\{band="standard"\} \d+/);
    expect(text).toMatch(/switchyard_admission_rejections_total\{band="batch",reason="queue_full"\} 1/);
    expect(text).toMatch(/switchyard_admission_admitted_total\{band="interactive",queued="false"\} \d+/);
    expect(text).toContain("# TYPE switchyard_admission_wait_seconds histogram");
  });
});
