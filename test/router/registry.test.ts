// The router's read side of the registry: new workers are seen within 1 s,
// expired heartbeats leave rotation, warming/draining get no new requests.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { sleep, waitFor } from "../helpers/env.ts";

let fx: RouterFixture;

beforeAll(async () => {
  // The production default poll interval: the 1 s promise must hold with it.
  fx = await startTestRouter({ "registry.pollMs": 250 });
});

afterAll(async () => {
  await fx?.close();
});

const chat = (model: string) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
  });

describe("registry read side", () => {
  it("routes to a new worker within 1 s of its first heartbeat", async () => {
    const w = await new SimWorker({ id: "fresh", models: ["new-model"], registry: fx.registry }).start();
    const t0 = performance.now();
    try {
      await waitFor(async () => (await chat("new-model")).status === 200, { timeoutMs: 2000, intervalMs: 25 });
      expect(performance.now() - t0).toBeLessThan(1000);
    } finally {
      await w.stop();
    }
  });

  it("stops routing to a worker whose heartbeat expired", async () => {
    const w = await new SimWorker({ id: "mortal", models: ["short-lived"], registry: fx.registry, ttlMs: 600, heartbeatMs: 200 }).start();
    await waitFor(async () => (await chat("short-lived")).status === 200);
    w.stopHeartbeats(); // process "hangs": no more beats, server still up
    const t0 = performance.now();
    await waitFor(async () => (await chat("short-lived")).status === 404, { timeoutMs: 3000, intervalMs: 25 });
    // TTL (600 ms) + one poll (250 ms) + slack
    expect(performance.now() - t0).toBeLessThan(1300);
    await w.stop();
  });

  it("workers in warming or draining get no new requests; a ready one does", async () => {
    const warming = await new SimWorker({ id: "w-warm", models: ["pool"], registry: fx.registry, state: "warming" }).start();
    const draining = await new SimWorker({ id: "w-drain", models: ["pool"], registry: fx.registry, state: "draining" }).start();
    const ready = await new SimWorker({ id: "w-ready", models: ["pool"], registry: fx.registry }).start();
    try {
      await waitFor(() => fx.router.deps.directory.all().filter((w) => w.models.includes("pool")).length === 3);
      for (let i = 0; i < 10; i++) expect((await chat("pool")).status).toBe(200);
      expect(ready.served.get("/v1/chat/completions")).toBe(10);
      expect(warming.served.size + draining.served.size).toBe(0);
      // Warming finishes: it joins the rotation at the next heartbeat.
      warming.state = "ready";
      await warming.heartbeat();
      await waitFor(async () => {
        await chat("pool");
        return (warming.served.get("/v1/chat/completions") ?? 0) > 0;
      }, { timeoutMs: 3000 });
    } finally {
      await Promise.all([warming.stop(), draining.stop(), ready.stop()]);
    }
  });

  it("spreads load: the least-loaded worker is preferred", async () => {
    const a = await new SimWorker({ id: "spread-a", models: ["spread"], registry: fx.registry, behavior: { ttftMs: 100 } }).start();
    const b = await new SimWorker({ id: "spread-b", models: ["spread"], registry: fx.registry, behavior: { ttftMs: 100 } }).start();
    try {
      await waitFor(() => fx.router.deps.directory.candidates("spread").length === 2);
      await Promise.all(Array.from({ length: 20 }, () => chat("spread")));
      const na = a.served.get("/v1/chat/completions") ?? 0;
      const nb = b.served.get("/v1/chat/completions") ?? 0;
      expect(na + nb).toBe(20);
      expect(Math.min(na, nb)).toBeGreaterThanOrEqual(4);
    } finally {
      await Promise.all([a.stop(), b.stop()]);
      await sleep(10);
    }
  });
});
