// Rate limits across replicas: three router processes share one Redis and
// one Postgres; a tenant limited to 100 requests per minute sends 1000 at
// once through all three. Exactly 100 are admitted in the window, every
// answer carries OpenAI's x-ratelimit-* headers, every refusal is a 429 with
// Retry-After in the one error shape.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setRateLimit } from "@switchyard/db";
import { startSimProcess, type SimProcess } from "../helpers/sim-process.ts";
import { createTestDb, createTestRedis, REDIS_URL, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";

const MODEL = "m-limited";
let db: TestDb;
let redis: TestRedis;
let sim: SimProcess;
let routers: RouterProc[] = [];
let key: string;

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  // Its own process: the burst's 1000 client sockets in this one must not starve the worker the routers call.
  sim = await startSimProcess({ id: "rl-w", redisUrl: REDIS_URL, prefix: redis.prefix, models: [MODEL], tokens: 2, heartbeatMs: 500, ttlMs: 30_000 });
  const t = await createTenant(db.db, "bursty");
  if (!t.ok) throw new Error("tenant");
  key = (await createKey(db.db, t.tenant.id)).key;
  await setRateLimit(db.db, { tenantId: t.tenant.id, requestsPerMinute: 100 });
  const env = { DATABASE_URL: db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix, SWITCHYARD_REGISTRY__POLL_MS: "100" };
  routers = await Promise.all([0, 1, 2].map((i) => spawnRouter(env, `rl-router-${i}`)));
  // Every router sees the worker before the burst (a 503 would not say anything about limits).
  for (const r of routers) {
    await waitFor(
      async () => (await (await fetch(`${r.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json() as { data: unknown[] }).data.length > 0,
      { timeoutMs: 30_000, what: "worker visible" },
    );
  }
}, 180_000);

afterAll(async () => {
  await Promise.all(routers.map((r) => r.stop()));
  await sim?.kill();
  await db?.drop();
  await redis?.cleanup();
});

describe("three routers, one rate limit", () => {
  it("1000 requests in a burst against 100 per minute: exactly 100 admitted, 900 refused with Retry-After", async () => {
    const t0 = Date.now();
    const results = await Promise.all(
      Array.from({ length: 1000 }, async (_, i) => {
        const res = await fetch(`${routers[i % 3]!.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
          body: JSON.stringify({ model: MODEL, stream: i % 2 === 0, messages: [{ role: "user", content: `burst ${i}` }] }),
        });
        const body = await res.text();
        return { status: res.status, h: res.headers, body };
      }),
    );
    const elapsed = Date.now() - t0;
    expect(elapsed).toBeLessThan(60_000); // the whole burst fell in one window
    const admitted = results.filter((r) => r.status === 200);
    const refused = results.filter((r) => r.status === 429);
    const byStatus: Record<number, number> = {};
    for (const r of results) byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
    expect(byStatus, JSON.stringify(results.filter((r) => r.status !== 200 && r.status !== 429).map((r) => r.body).slice(0, 3))).toEqual({ 200: 100, 429: 900 });
    expect(admitted.length).toBe(100);
    expect(refused.length).toBe(900);
    for (const r of results) {
      expect(r.h.get("x-ratelimit-limit-requests")).toBe("100");
      expect(r.h.get("x-ratelimit-reset-requests")).toMatch(/^(\d+ms|[\d.]+s|\d+m\d+s)$/);
    }
    // Each admitted request took its own place in the window: remaining 99 down to 0, once each.
    const remaining = admitted.map((r) => Number(r.h.get("x-ratelimit-remaining-requests"))).sort((a, b) => a - b);
    expect(remaining).toEqual(Array.from({ length: 100 }, (_, i) => i));
    for (const r of refused) {
      expect(r.h.get("x-ratelimit-remaining-requests")).toBe("0");
      const retry = Number(r.h.get("retry-after"));
      expect(retry).toBeGreaterThanOrEqual(1);
      expect(retry).toBeLessThanOrEqual(60);
      const err = JSON.parse(r.body) as { error: { code: string; type: string; message: string; param: unknown; request_id: string } };
      expect(err.error).toMatchObject({ code: "rate_limit_exceeded", type: "rate_limit_error", param: null });
      expect(err.error.request_id).toMatch(/^req_/);
    }
    // Every router took part in both outcomes' bookkeeping: the counters are shared, not per process.
    const perRouter = [0, 1, 2].map((k) => results.filter((r, i) => i % 3 === k && r.status === 200).length);
    expect(perRouter.reduce((a, b) => a + b, 0)).toBe(100);
  }, 120_000);
});
