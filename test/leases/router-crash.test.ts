// Chaos: kill -9 the router that granted a lease, in the middle of the
// holder's stream. The lease lives in Redis, not in that router: it stays
// valid until its expiry, another router serves the holder (with the token)
// and keeps everyone else off the worker meanwhile; at expiry the worker frees
// by itself, the expiry is audited once, and the old token is fenced off.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, listLeaseEvents } from "@switchyard/db";
import { RedisRegistryStore } from "@switchyard/state";
import { SimWorker } from "#testkit/sim-worker";
import { createTestDb, createTestRedis, REDIS_URL, sleep, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";

const MODEL = "m-crash";
const LEASE_S = 3;

let db: TestDb;
let redis: TestRedis;
let a: RouterProc;
let b: RouterProc;
let w1: SimWorker;
let w2: SimWorker;
let holderKey: string;
let rivalKey: string;

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  const registry = new RedisRegistryStore(redis.redis, redis.prefix);
  w1 = await new SimWorker({ id: "kc-1", models: [MODEL], registry, heartbeatMs: 500 }).start();
  w2 = await new SimWorker({ id: "kc-2", models: [MODEL], registry, heartbeatMs: 500 }).start();
  for (const [name, set] of [
    ["holder", (k: string) => (holderKey = k)],
    ["rival", (k: string) => (rivalKey = k)],
  ] as const) {
    const t = await createTenant(db.db, name);
    if (!t.ok) throw new Error("tenant");
    set((await createKey(db.db, t.tenant.id)).key);
  }
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    SWITCHYARD_REGISTRY__POLL_MS: "100",
    SWITCHYARD_LEASES__POLL_MS: "100",
    SWITCHYARD_LEASES__QUEUE_WAIT_MS: "200",
  };
  [a, b] = await Promise.all([spawnRouter(env, "lease-router-a"), spawnRouter(env, "lease-router-b")]);
}, 180_000);

afterAll(async () => {
  await a?.kill9();
  await b?.stop();
  await w1?.stop();
  await w2?.stop();
  await db?.drop();
  await redis?.cleanup();
});

const req = (router: RouterProc, method: string, path: string, key: string, body?: unknown, headers: Record<string, string> = {}, signal?: AbortSignal) =>
  fetch(`${router.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    signal,
  });
const chatBody = (extra: Record<string, unknown> = {}) => ({ model: MODEL, messages: [{ role: "user", content: "hi" }], ...extra });

describe("kill -9 a router holding a lease", () => {
  it("the lease survives its router until expiry, another router serves the holder, then the worker frees", async () => {
    const g = await req(a, "POST", "/v1/leases", holderKey, { worker: "kc-1", duration_s: LEASE_S });
    expect(g.status).toBe(201);
    const lease = (await g.json()) as { id: string; fencing_token: number; expires_at: number };

    // The holder is mid-stream through router A when A dies.
    const stream = await req(a, "POST", "/v1/chat/completions", holderKey, chatBody({ stream: true, sim: { tokens: 100, interTokenMs: 50 } }), { "x-switchyard-lease": lease.id });
    expect(stream.status).toBe(200);
    const reader = stream.body!.getReader();
    await reader.read();
    await a.kill9();
    await expect(
      (async () => {
        for (;;) if ((await reader.read()).done) return "clean end";
      })(),
    ).rejects.toThrow();
    await waitFor(() => w1.inFlight === 0, { what: "the worker to see the dead router's stream go" });

    // Router B serves the holder on the leased worker, with the token; the rival is kept off it.
    expect((await (await req(b, "GET", `/v1/leases/${lease.id}`, holderKey)).json()) as object).toMatchObject({ status: "active" });
    for (let i = 0; i < 3; i++) {
      const r = await req(b, "POST", "/v1/chat/completions", holderKey, chatBody(), { "x-switchyard-lease": lease.id });
      expect(r.status).toBe(200);
      expect(r.headers.get("x-switchyard-backend")).toBe("worker:kc-1");
      await r.arrayBuffer();
    }
    expect(w1.lastRequestHeaders?.["x-switchyard-fencing-token"]).toBe(String(lease.fencing_token));
    const servedBefore = w1.served.get("/v1/chat/completions") ?? 0;
    for (let i = 0; i < 6; i++) {
      const r = await req(b, "POST", "/v1/chat/completions", rivalKey, chatBody());
      expect(r.headers.get("x-switchyard-backend")).toBe("worker:kc-2");
      await r.arrayBuffer();
    }
    expect(w1.served.get("/v1/chat/completions") ?? 0).toBe(servedBefore);
    const taken = await req(b, "POST", "/v1/leases", rivalKey, { worker: "kc-1", duration_s: 5 });
    expect(taken.status).toBe(409);
    await taken.arrayBuffer();

    // At expiry the worker frees by itself: a rival waiting on router B gets it, with a larger token.
    const waited = await req(b, "POST", "/v1/leases", rivalKey, { worker: "kc-1", duration_s: 5, wait_s: LEASE_S + 2 });
    expect(waited.status).toBe(201);
    const next = (await waited.json()) as { id: string; fencing_token: number; granted_at: number };
    expect(next.granted_at).toBeGreaterThanOrEqual(lease.expires_at);
    expect(next.granted_at - lease.expires_at).toBeLessThan(1.5);
    expect(next.fencing_token).toBeGreaterThan(lease.fencing_token);
    const old = await req(b, "POST", "/v1/chat/completions", holderKey, chatBody(), { "x-switchyard-lease": lease.id });
    expect(old.status).toBe(409);
    expect(((await old.json()) as { error: { code: string } }).error.code).toBe("lease_expired");
    const fresh = await req(b, "POST", "/v1/chat/completions", rivalKey, chatBody(), { "x-switchyard-lease": next.id });
    expect(fresh.status).toBe(200);
    await fresh.arrayBuffer();
    // Anything still carrying the dead lease's token (as router A would have sent) is refused now.
    const zombie = await fetch(`${w1.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-switchyard-fencing-token": String(lease.fencing_token) },
      body: JSON.stringify(chatBody()),
    });
    expect(zombie.status).toBe(409);

    // The audit: granted by A, expired seen once (by B), then the rival's grant.
    await sleep(200);
    const events = (await listLeaseEvents(db.db, { worker: "kc-1" })).map((e) => [e.leaseId, e.event, e.fencingToken]);
    expect(events).toHaveLength(3);
    expect(events[0]).toEqual([lease.id, "granted", lease.fencing_token]);
    // The expiry may be seen by B's refresh or by the rival's grant itself (same instant): either order.
    expect(events).toContainEqual([lease.id, "expired", lease.fencing_token]);
    expect(events).toContainEqual([next.id, "granted", next.fencing_token]);
    await req(b, "DELETE", `/v1/leases/${next.id}`, rivalKey).then((r) => r.arrayBuffer());
  }, 60_000);
});
