// What SIGTERM does to one router, step by step (issue 12 item 3): /readyz
// answers 503 "draining" at once; new connections are still served during
// router.drainGraceMs and refused after it; an idle keep-alive connection is
// closed then, not left until exit; streams still running when router.drainMs
// has passed end with exactly one SSE error event (router_shutting_down),
// never a clean close; their ledger rows land; the process exits 0.
import http from "node:http";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestDb, createTestRedis, REDIS_URL, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { startSimProcess, type SimProcess } from "../helpers/sim-process.ts";
import { sigterm, sleep } from "./harness.ts";

const PAID_MODEL = "openai/gpt-4o-mini";
const GRACE_MS = 1_500;
const DRAIN_MS = 4_000;

let db: TestDb;
let redis: TestRedis;
let fake: FakeOpenRouter;
let fast: SimProcess;
let slow: SimProcess;
let router: RouterProc;
let key: string;
let tenantId: number;

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-drain" }).start();
  const t = await createTenant(db.db, "draining");
  if (!t.ok) throw new Error("tenant");
  tenantId = t.tenant.id;
  key = (await createKey(db.db, tenantId)).key;
  await setBudget(db.db, { tenantId, dailyLimitCents: 1_000_000n });
  await setPrice(db.db, { backend: "openrouter", model: PAID_MODEL, inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 2_000_000n });
  [fast, slow] = await Promise.all([
    startSimProcess({ id: "sim-fast", redisUrl: REDIS_URL, prefix: redis.prefix, models: ["fast"], tokens: 5, interTokenMs: 10 }),
    startSimProcess({ id: "sim-slow", redisUrl: REDIS_URL, prefix: redis.prefix, models: ["slow"], tokens: 200, interTokenMs: 100 }),
  ]);
  router = await spawnRouter({
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    OPENROUTER_API_KEY: "sk-or-drain",
    SWITCHYARD_PROVIDERS__OPENROUTER__BASE_URL: fake.url,
    SWITCHYARD_REGISTRY__POLL_MS: "100",
    SWITCHYARD_ROUTER__DRAIN_GRACE_MS: String(GRACE_MS),
    SWITCHYARD_ROUTER__DRAIN_MS: String(DRAIN_MS),
  });
  await waitFor(async () => (await fetch(`${router.url}/readyz`)).status === 200, { timeoutMs: 20_000, what: "router ready" });
}, 120_000);

afterAll(async () => {
  await router?.kill9();
  await fast?.kill();
  await slow?.kill();
  await fake?.stop();
  await db?.drop();
  await redis?.cleanup();
});

interface Answer {
  status: number;
  body: string;
  requestId: string | undefined;
}

/** One request on a connection of its own (agent: false), read whole. */
function request(method: string, path: string, body?: unknown, agent: http.Agent | false = false): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = http.request(`${router.url}${path}`, {
      method,
      agent,
      headers: { authorization: `Bearer ${key}`, ...(body ? { "content-type": "application/json" } : {}) },
    });
    req.on("response", (res) => {
      let text = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (text += d));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body: text, requestId: res.headers["x-request-id"] as string | undefined }));
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end(body ? JSON.stringify(body) : undefined);
  });
}

/** A stream opened and read until its first event; `rest` resolves with everything it sent. */
async function openStream(model: string): Promise<{ requestId: string; rest: Promise<string> }> {
  const res = await fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, max_tokens: 200, messages: [{ role: "user", content: "a long answer" }] }),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let text = "";
  while (!text.includes("data: ")) text += dec.decode((await reader.read()).value, { stream: true });
  const rest = (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return text;
      text += dec.decode(value, { stream: true });
    }
  })();
  return { requestId: res.headers.get("x-request-id")!, rest };
}

const events = (sse: string) => sse.split("\n\n").filter((b) => b.startsWith("data: ")).map((b) => b.slice(6));

describe("SIGTERM on a router", () => {
  it("drains: readyz 503 at once, new connections served in the grace and refused after, running streams cut after drainMs with one error event, exit 0", async () => {
    fake.enqueue({ kind: "slow", interTokenMs: 100, completionTokens: 200 });
    const free = await openStream("slow");
    const paid = await openStream(PAID_MODEL);
    // An idle keep-alive connection: served once, then left open by its client.
    const keepAlive = new http.Agent({ keepAlive: true, maxSockets: 1 });
    expect((await request("GET", "/healthz", undefined, keepAlive)).status).toBe(200);
    const idleSocket = Object.values(keepAlive.freeSockets).flat()[0]!;
    expect(idleSocket).toBeDefined();
    let idleClosedAt: number | undefined;
    idleSocket.once("close", () => (idleClosedAt = Date.now()));

    const t0 = Date.now();
    const exited = sigterm(router.proc.child, DRAIN_MS + 20_000);
    // /readyz turns at once.
    const ready = await waitFor(
      async () => {
        const r = await request("GET", "/readyz");
        return r.status === 503 ? r : undefined;
      },
      { timeoutMs: 1_000, intervalMs: 10, what: "readyz 503" },
    );
    expect(Date.now() - t0).toBeLessThan(1_000);
    expect(JSON.parse(ready.body)).toMatchObject({ status: "draining", draining: true });

    // Inside the grace period a new connection is still served, in full.
    const late = await request("POST", "/v1/chat/completions", { model: "fast", stream: true, messages: [{ role: "user", content: "hi" }] });
    expect(Date.now() - t0).toBeLessThan(GRACE_MS);
    expect(late.status).toBe(200);
    expect(events(late.body).at(-1)).toBe("[DONE]");
    expect(late.body).not.toContain('"error"');

    // After it: refused — and the idle keep-alive connection is gone, long before the process is.
    await sleep(Math.max(0, t0 + GRACE_MS + 500 - Date.now()));
    await expect(request("GET", "/healthz")).rejects.toMatchObject({ code: "ECONNREFUSED" });
    expect(idleClosedAt, "idle keep-alive connection closed after the grace").toBeDefined();
    expect(idleClosedAt! - t0).toBeLessThan(GRACE_MS + 500);
    keepAlive.destroy();

    // drainMs passed: each running stream ends with exactly one error event, no [DONE].
    for (const s of [free, paid]) {
      const all = events(await s.rest);
      const errors = all.filter((e) => e.startsWith('{"error"'));
      expect(errors).toHaveLength(1);
      expect(all.at(-1)).toBe(errors[0]);
      expect(all).not.toContain("[DONE]");
      expect(JSON.parse(errors[0]!).error).toMatchObject({ code: "router_shutting_down", type: "service_unavailable", request_id: s.requestId });
      expect(all.length).toBeGreaterThan(5); // it had streamed tokens before
    }
    const exit = await exited;
    expect(exit.code).toBe(0);
    expect(exit.ms).toBeGreaterThanOrEqual(DRAIN_MS - 100);
    expect(exit.ms).toBeLessThan(DRAIN_MS + 10_000);

    // Their rows landed (flushed before exit): the cut ones as timeouts, the late one ok.
    const rows = await db.sql<{ request_id: string; status: string; backend: string }[]>`select request_id, status::text, backend from spend_ledger where tenant_id = ${tenantId}`;
    const byId = new Map(rows.map((r) => [r.request_id, r]));
    expect(rows).toHaveLength(3);
    expect(byId.get(free.requestId)?.status).toBe("timeout");
    expect(byId.get(paid.requestId)).toMatchObject({ status: "timeout", backend: "openrouter" });
    expect(byId.get(late.requestId!)?.status).toBe("ok");
  }, 60_000);
});
