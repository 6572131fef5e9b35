// router.maxInFlight: a router process holding that many requests refuses
// the next inference request at once — 503 router_overloaded with
// Retry-After, before any work is spent on it — so a client or balancer
// retries elsewhere instead of queueing behind every stream it holds.
// Health probes are never refused, and once requests end it serves again.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const MAX = 3;
let fx: RouterFixture;
let worker: SimWorker;

beforeAll(async () => {
  fx = await startTestRouter({ "router.maxInFlight": MAX });
  // Streams of ~1.5 s: the ones holding the router stay open while the test asks.
  worker = await new SimWorker({ id: "ovl-w1", models: ["m"], registry: fx.registry, behavior: { tokens: 30, interTokenMs: 50 } }).start();
  await waitFor(() => fx.router.deps.directory.candidates("m").length === 1, { what: "the worker" });
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
});

const chat = (stream: boolean) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "m", stream, messages: [{ role: "user", content: "hi" }] }),
  });

describe("router.maxInFlight", () => {
  it("past the limit a request is refused at once with 503 router_overloaded and Retry-After; health is served; then it serves again", async () => {
    const held = await Promise.all(Array.from({ length: MAX }, () => chat(true)));
    for (const r of held) expect(r.status).toBe(200);
    expect(fx.router.inFlight()).toBe(MAX);

    const t0 = performance.now();
    const refused = await chat(false);
    const ms = performance.now() - t0;
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).toBe(String(fx.router.deps.config.router.retryAfterS));
    const body = (await refused.json()) as { error: { code: string; type: string; request_id?: string } };
    expect(body.error.code).toBe("router_overloaded");
    expect(body.error.type).toBe("service_unavailable");
    expect(body.error.request_id).toBe(refused.headers.get("x-request-id"));
    // Refused before it reached the worker (a request there would take ~1.5 s), and long before the held streams end.
    expect(worker.inFlight).toBe(MAX);
    expect(ms).toBeLessThan(500);
    expect(fx.router.deps.metrics.errors.get({ code: "router_overloaded" })).toBe(1);
    // A probe is no inference request: never refused.
    expect((await fetch(`${fx.router.url}/healthz`)).status).toBe(200);

    const texts = await Promise.all(held.map((r) => r.text()));
    for (const t of texts) expect(t).toContain("[DONE]");
    await waitFor(() => fx.router.inFlight() === 0, { what: "the held streams to end" });
    const again = await chat(false);
    expect(again.status).toBe(200);
    await again.json();
  }, 30_000);
});
