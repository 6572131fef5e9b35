// Bad input, auth and tenant isolation against a real router: every error
// leaves in the one OpenAI shape with the right status, and the router
// survives all of it.
import { createKey, createTenant, listKeys, revokeKey } from "@switchyard/db";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { sleep, waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let worker: SimWorker;

beforeAll(async () => {
  fx = await startTestRouter({ "router.bodyLimitBytes": 64 * 1024 });
  worker = await new SimWorker({ id: "w", models: ["m"], registry: fx.registry }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1);
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
});

// eslint-disable-next-line @typescript-eslint/no-explicit-any
async function call(path: string, init: { body?: string; headers?: Record<string, string>; key?: string | null; method?: string } = {}): Promise<{ status: number; body: any; headers: Headers }> {
  const headers: Record<string, string> = { "content-type": "application/json", ...init.headers };
  const key = init.key === undefined ? fx.key : init.key;
  if (key !== null) headers.authorization = `Bearer ${key}`;
  const res = await fetch(`${fx.router.url}${path}`, { method: init.method ?? "POST", headers, body: init.body });
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // keep text
  }
  return { status: res.status, body, headers: res.headers };
}

const chatBody = (over: Record<string, unknown> = {}) => JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }], ...over });

function expectErrorShape(body: { error: Record<string, unknown> }, code: string) {
  expect(Object.keys(body.error).sort()).toEqual(["code", "message", "param", "request_id", "type"]);
  expect(body.error.code).toBe(code);
  expect(typeof body.error.message).toBe("string");
}

describe("bad input", () => {
  it("invalid JSON → 400 invalid_json", async () => {
    const r = await call("/v1/chat/completions", { body: "{not json" });
    expect(r.status).toBe(400);
    expectErrorShape(r.body, "invalid_json");
  });

  it("schema violation → 400 naming the field", async () => {
    const r = await call("/v1/chat/completions", { body: chatBody({ temperature: 7 }) });
    expect(r.status).toBe(400);
    expectErrorShape(r.body, "invalid_request");
    expect(r.body.error.param).toBe("temperature");
    const r2 = await call("/v1/chat/completions", { body: JSON.stringify({ model: "m", messages: [{ role: "robot", content: "x" }] }) });
    expect(r2.body.error.param).toBe("messages[0].role");
    const r3 = await call("/v1/embeddings", { body: JSON.stringify({ model: "m" }) });
    expect(r3.status).toBe(400);
    expect(r3.body.error.param).toBe("input");
  });

  it("unknown model → 404 model_not_found", async () => {
    const r = await call("/v1/chat/completions", { body: chatBody({ model: "gpt-9" }) });
    expect(r.status).toBe(404);
    expectErrorShape(r.body, "model_not_found");
    expect(r.body.error.param).toBe("model");
  });

  it("body over the limit → 413, by header and by streamed length", async () => {
    const big = chatBody({ messages: [{ role: "user", content: "x".repeat(70 * 1024) }] });
    const r = await call("/v1/chat/completions", { body: big });
    expect(r.status).toBe(413);
    expectErrorShape(r.body, "payload_too_large");
    // Chunked upload without Content-Length is cut off too.
    const chunks = [big.slice(0, 40_000), big.slice(40_000)];
    const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: new ReadableStream({
        start(c) {
          for (const ch of chunks) c.enqueue(new TextEncoder().encode(ch));
          c.close();
        },
      }),
      duplex: "half", // Node's fetch needs it for a streamed body
    });
    expect(res.status).toBe(413);
  });

  it("wrong content type → 415", async () => {
    const r = await call("/v1/chat/completions", { body: chatBody(), headers: { "content-type": "text/plain" } });
    expect(r.status).toBe(415);
    expectErrorShape(r.body, "unsupported_media_type");
  });

  it("unknown route → 404 in the same shape", async () => {
    const r = await call("/v1/nope", { method: "GET" });
    expect(r.status).toBe(404);
    expectErrorShape(r.body, "not_found");
  });

  it("no ready worker → 503 with Retry-After", async () => {
    const warming = await new SimWorker({ id: "warming", models: ["cold"], registry: fx.registry, state: "warming" }).start();
    const draining = await new SimWorker({ id: "draining", models: ["cold"], registry: fx.registry, state: "draining" }).start();
    try {
      await waitFor(() => fx.router.deps.directory.all().length === 3);
      const r = await call("/v1/chat/completions", { body: chatBody({ model: "cold" }) });
      expect(r.status).toBe(503);
      expectErrorShape(r.body, "no_healthy_backend");
      expect(r.headers.get("retry-after")).toBe("1");
      expect(warming.served.size + draining.served.size).toBe(0);
    } finally {
      await warming.stop();
      await draining.stop();
    }
  });

  it("survives garbage: odd bodies never crash the router", async () => {
    const bodies = ["", "null", "[]", "1", '"s"', '{"model":null}', '{"model":"m","messages":"x"}', "\u0000\u0001", "{".repeat(10000)];
    for (const body of bodies) {
      const r = await call("/v1/chat/completions", { body });
      expect([400]).toContain(r.status);
    }
    expect((await call("/healthz", { method: "GET" })).status).toBe(200);
  });
});

describe("auth", () => {
  it("missing key → 401 missing_api_key", async () => {
    const r = await call("/v1/chat/completions", { body: chatBody(), key: null });
    expect(r.status).toBe(401);
    expectErrorShape(r.body, "missing_api_key");
  });

  it("wrong key → 401 invalid_api_key (also for malformed headers)", async () => {
    const r = await call("/v1/chat/completions", { body: chatBody(), key: fx.key.slice(0, -2) + "zz" });
    expect(r.status).toBe(401);
    expectErrorShape(r.body, "invalid_api_key");
    const r2 = await call("/v1/models", { method: "GET", key: null, headers: { authorization: "Basic abc" } });
    expect(r2.status).toBe(401);
  });

  it("revoked key → 401 revoked_api_key within the cache window", async () => {
    const { key, row } = await createKey(fx.db.db, fx.tenantId, "to-revoke");
    expect((await call("/v1/models", { method: "GET", key })).status).toBe(200);
    expect(await revokeKey(fx.db.db, row.prefix)).toBe("revoked");
    await sleep(250); // router.keyCacheMs is 200 in tests
    const r = await call("/v1/models", { method: "GET", key });
    expect(r.status).toBe(401);
    expectErrorShape(r.body, "revoked_api_key");
  });

  it("records last use of a key", async () => {
    const { key, row } = await createKey(fx.db.db, fx.tenantId, "touched");
    expect((await call("/v1/models", { method: "GET", key })).status).toBe(200);
    const used = await waitFor(async () => (await listKeys(fx.db.db, fx.tenantId)).find((k) => k.prefix === row.prefix)?.lastUsedAt, {
      timeoutMs: 3000,
      what: "last_used_at",
    });
    expect(used.getTime()).toBeGreaterThan(Date.now() - 10_000);
  });
});

describe("tenant isolation", () => {
  it("a tenant sees only its own keys, and revoking one tenant's key leaves the other's working", async () => {
    const other = await createTenant(fx.db.db, "globex");
    if (!other.ok) throw new Error("tenant");
    const theirs = await createKey(fx.db.db, other.tenant.id);
    const mine = await listKeys(fx.db.db, fx.tenantId);
    expect(mine.map((k) => k.prefix)).not.toContain(theirs.row.prefix);
    expect((await listKeys(fx.db.db, other.tenant.id)).map((k) => k.prefix)).toEqual([theirs.row.prefix]);
    // A key resolves to its own tenant only.
    const owner = await fx.router.deps.keys.resolve(theirs.key);
    expect(owner).toMatchObject({ tenantName: "globex", tenantId: other.tenant.id });
    expect((await call("/v1/models", { method: "GET", key: theirs.key })).status).toBe(200);
  });

  it("stores only the key's hash, never the key", async () => {
    const { key } = await createKey(fx.db.db, fx.tenantId);
    const rows = await fx.db.sql`select * from api_keys`;
    for (const r of rows) for (const v of Object.values(r)) expect(String(v)).not.toContain(key.slice(12));
  });
});

describe("health and metrics", () => {
  it("/readyz checks Redis and Postgres; /metrics is on the admin port", async () => {
    const ready = await call("/readyz", { method: "GET" });
    expect(ready.status).toBe(200);
    expect(ready.body).toMatchObject({ redis: true, postgres: true });
    const metrics = await (await fetch(`${fx.router.adminUrl}/metrics`)).text();
    expect(metrics).toMatch(/switchyard_requests_total\{route="\/v1\/chat\/completions",status="400"\} \d+/);
    expect(metrics).toMatch(/switchyard_errors_total\{code="invalid_json"\} \d+/);
    expect(metrics).toMatch(/switchyard_workers\{state="ready"\} 1/);
    // The stalls behind a p99 (issue 14): event-loop delay, GC pauses, CPU per request.
    expect(metrics).toMatch(/switchyard_event_loop_delay_seconds_bucket\{le="0.01"\} \d+/);
    expect(metrics).toMatch(/switchyard_event_loop_delay_seconds_count [1-9]\d*/);
    expect(metrics).toMatch(/# TYPE switchyard_gc_pauses_total counter/);
    expect(metrics).toMatch(/process_cpu_seconds_total \d/);
    expect(metrics).toMatch(/switchyard_cpu_seconds_per_request \d/);
    expect((await call("/metrics", { method: "GET" })).status).toBe(404);
  });

  it("every worker call's wait before its headers were written is on /metrics, whole answers and streams", async () => {
    const count = async () => Number((await (await fetch(`${fx.router.adminUrl}/metrics`)).text()).match(/^switchyard_upstream_send_wait_seconds_count (\d+)$/m)?.[1]);
    const before = await count();
    for (const stream of [false, true, false]) {
      const res = await call("/v1/chat/completions", { body: chatBody({ stream }) });
      expect(res.status).toBe(200);
    }
    expect(await count()).toBe(before + 3);
  });
});
