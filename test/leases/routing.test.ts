// Leases on the inference path, through a real router: the holder's requests
// run on the leased worker only and carry its fencing token; everyone else's
// skip it, wait (bounded) when every worker is leased, then fall through the
// chain to a paid backend or get a 503; clear errors for unknown, ended and
// someone else's leases; a worker that saw a newer token refuses the lease.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setPrice } from "@switchyard/db";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const QUEUE_WAIT_MS = 1_500;
const OR_MODEL = "openai/gpt-4o-mini";

let fx: RouterFixture;
let openrouter: FakeOpenRouter;
let rival: string;
const w: Record<string, SimWorker> = {};

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-lease" }).start();
  fx = await startTestRouter({
    "leases.minDurationS": 0.05,
    "leases.pollMs": 50,
    "leases.queueWaitMs": QUEUE_WAIT_MS,
    "leases.queueDepthPerWorker": 2,
    "providers.openrouter": { apiKey: "sk-or-lease", baseUrl: openrouter.url },
    "billing.refreshMs": 100,
    "routing.models": { "chat-p": { worker: "m-p", openrouter: OR_MODEL } },
  });
  await setPrice(fx.db.db, { backend: "openrouter", model: OR_MODEL, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n });
  const t = await createTenant(fx.db.db, "rival");
  if (!t.ok) throw new Error("tenant");
  rival = (await createKey(fx.db.db, t.tenant.id)).key;
  for (const [id, model] of [
    ["rt-1", "m-r"],
    ["rt-2", "m-r"],
    ["rt-q", "m-q"],
    ["rt-p", "m-p"],
    ["rt-s", "m-s"],
    ["rt-x", "m-x"],
  ] as const) {
    w[id] = await new SimWorker({ id, models: [model], registry: fx.registry, behavior: { tokens: 2 } }).start();
  }
  await waitFor(() => fx.router.deps.directory.all().length === Object.keys(w).length);
  await waitFor(() => fx.router.deps.guard.deps.prices.price("openrouter", OR_MODEL));
});

afterAll(async () => {
  for (const s of Object.values(w)) await s.stop();
  await fx?.close();
  await openrouter?.stop();
});

async function lease(worker: string, durationS: number, key = fx.key): Promise<{ id: string; fencing_token: number; expires_at: number }> {
  const res = await fetch(`${fx.router.url}/v1/leases`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ worker, duration_s: durationS }),
  });
  expect(res.status).toBe(201);
  return (await res.json()) as { id: string; fencing_token: number; expires_at: number };
}

const release = (id: string, key = fx.key) => fetch(`${fx.router.url}/v1/leases/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${key}` } }).then((r) => r.arrayBuffer());

async function chat(model: string, opts: { key?: string; lease?: string; stream?: boolean } = {}) {
  const t0 = performance.now();
  const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: {
      authorization: `Bearer ${opts.key ?? fx.key}`,
      "content-type": "application/json",
      ...(opts.lease ? { "x-switchyard-lease": opts.lease } : {}),
    },
    body: JSON.stringify({ model, stream: opts.stream ?? false, max_tokens: 20, messages: [{ role: "user", content: "hi" }] }),
  });
  const text = await res.text();
  return {
    status: res.status,
    backend: res.headers.get("x-switchyard-backend"),
    retryAfter: res.headers.get("retry-after"),
    ms: performance.now() - t0,
    error: res.status >= 400 ? (JSON.parse(text) as { error: { code: string; message: string; param: string | null } }).error : undefined,
  };
}

describe("leases on the request path", () => {
  it("the holder runs on its leased worker only, with its fencing token; everyone else skips it", async () => {
    const l = await lease("rt-1", 10);
    const holder = await Promise.all(Array.from({ length: 8 }, (_, i) => chat("m-r", { lease: l.id, stream: i % 2 === 0 })));
    expect(holder.map((r) => [r.status, r.backend])).toEqual(holder.map(() => [200, "worker:rt-1"]));
    expect(w["rt-1"]!.lastRequestHeaders?.["x-switchyard-fencing-token"]).toBe(String(l.fencing_token));
    expect(w["rt-1"]!.fenceLog.filter((f) => f.accepted)).toHaveLength(8);
    // The rival and the holder's own lease-less requests go elsewhere, without tokens.
    const others = await Promise.all(Array.from({ length: 12 }, (_, i) => chat("m-r", { key: i % 3 === 0 ? fx.key : rival, stream: i % 2 === 0 })));
    expect(others.map((r) => [r.status, r.backend])).toEqual(others.map(() => [200, "worker:rt-2"]));
    expect(w["rt-2"]!.lastRequestHeaders?.["x-switchyard-fencing-token"]).toBeUndefined();
    expect(w["rt-2"]!.fenceLog).toHaveLength(0);
    await release(l.id);
    // Released: both workers serve everyone again.
    await waitFor(async () => (await Promise.all(Array.from({ length: 10 }, () => chat("m-r", { key: rival })))).some((r) => r.backend === "worker:rt-1"));
  });

  it("every worker leased: others wait for the lease to end, then run on the freed worker", async () => {
    const l = await lease("rt-q", 0.6);
    const r = await chat("m-q", { key: rival });
    expect(r.status).toBe(200);
    expect(r.backend).toBe("worker:rt-q");
    expect(r.ms).toBeGreaterThan(400);
    expect(r.ms).toBeLessThan(QUEUE_WAIT_MS);
    // Released early: the waiter goes at once.
    const l2 = await lease("rt-q", 30);
    const pending = chat("m-q", { key: rival });
    await sleep(100);
    const t = performance.now();
    await release(l2.id);
    const r2 = await pending;
    expect(r2.status).toBe(200);
    expect(performance.now() - t).toBeLessThan(700);
    expect(l2.fencing_token).toBeGreaterThan(l.fencing_token);
  });

  it("the wait is bounded: after it (or with the per-worker queue full) requests fall through to paid backends, or get a 503", async () => {
    const l = await lease("rt-p", 30);
    const results = await Promise.all(Array.from({ length: 5 }, () => chat("chat-p", { key: rival })));
    expect(results.map((r) => r.status)).toEqual([200, 200, 200, 200, 200]);
    expect(results.every((r) => r.backend?.startsWith("openrouter"))).toBe(true);
    const slow = results.filter((r) => r.ms >= QUEUE_WAIT_MS - 50);
    const fast = results.filter((r) => r.ms < QUEUE_WAIT_MS / 2);
    // Two waited (the queue depth), three fell through at once.
    expect(slow).toHaveLength(2);
    expect(fast).toHaveLength(3);
    // Only the holder reaches the worker.
    expect(await chat("chat-p", { lease: l.id })).toMatchObject({ status: 200, backend: "worker:rt-p" });
    await release(l.id);

    const q = await lease("rt-s", 30);
    const none = await chat("m-s", { key: rival });
    expect(none.status).toBe(503);
    expect(none.error?.code).toBe("no_healthy_backend");
    expect(none.error?.message).toContain("leased");
    // When the lease ends (≈ 30 s), not the generic router.retryAfterS.
    expect(Number(none.retryAfter)).toBeGreaterThanOrEqual(20);
    expect(none.ms).toBeGreaterThanOrEqual(QUEUE_WAIT_MS - 50);
    expect(w["rt-s"]!.served.size).toBe(0);
    await release(q.id);
  });

  it("lease header errors: unknown or someone else's 404, ended 409, a model the worker lacks 400", async () => {
    const l = await lease("rt-x", 0.3);
    const theirs = await chat("m-x", { key: rival, lease: l.id });
    expect(theirs).toMatchObject({ status: 404, error: { code: "lease_not_found" } });
    expect((await chat("m-x", { lease: "lease_unknownunknownunknown00" })).error?.code).toBe("lease_not_found");
    expect((await chat("m-x", { lease: "garbage" })).error?.code).toBe("lease_not_found");
    const wrongModel = await chat("m-r", { lease: l.id });
    expect(wrongModel).toMatchObject({ status: 400, error: { code: "invalid_request", param: "model" } });
    await sleep(400);
    const expired = await chat("m-x", { lease: l.id });
    expect(expired).toMatchObject({ status: 409, error: { code: "lease_expired" } });
    expect(expired.error?.message).toContain("expired");
    const l2 = await lease("rt-x", 10);
    await release(l2.id);
    const released = await chat("m-x", { lease: l2.id });
    expect(released).toMatchObject({ status: 409, error: { code: "lease_expired" } });
    expect(released.error?.message).toContain("released");
    expect(w["rt-x"]!.fenceLog).toHaveLength(0);
  });

  it("a worker that saw a newer token refuses the lease's dispatches: 409 stale_fencing_token, nothing runs", async () => {
    const l = await lease("rt-x", 10);
    const sim = w["rt-x"]!;
    expect(await chat("m-x", { lease: l.id })).toMatchObject({ status: 200, backend: "worker:rt-x" });
    // As if a newer lease (granted after a Redis failover) had already dispatched here.
    sim.fencing.admit(String(l.fencing_token + 1000));
    const servedBefore = sim.served.get("/v1/chat/completions") ?? 0;
    for (const stream of [false, true]) {
      const r = await chat("m-x", { lease: l.id, stream });
      expect(r.status).toBe(409);
      expect(r.error?.code).toBe("stale_fencing_token");
      expect(r.error?.message).toContain(String(l.fencing_token));
    }
    expect(sim.served.get("/v1/chat/completions") ?? 0).toBe(servedBefore);
    expect(sim.fenceLog.filter((f) => !f.accepted).map((f) => f.token)).toEqual([l.fencing_token, l.fencing_token]);
    // Requests without a token are not fenced.
    await release(l.id);
    expect(await chat("m-x", { key: rival })).toMatchObject({ status: 200, backend: "worker:rt-x" });
  });
});
