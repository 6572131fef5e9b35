// Restart Redis mid-traffic: a private redis-server (never the shared one)
// holds the registry, the ledger buffer and the budget counters for a real
// router and two sim workers. It is killed, stays down a second, and comes
// back empty. Traffic must recover without restarting the router: workers
// heartbeat into the new server, the router's directory reads them again,
// and ledger rows drain into Postgres again. Meanwhile no request fails: the
// router sees the registry's epoch change, knows Redis lost its records (not
// that every worker left), and keeps routing to the workers it knew until
// they heartbeat again — with the agent's default beat of a second, an
// empty registry would otherwise answer model_not_found for up to a second.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Redis } from "ioredis";
import { createKey, createTenant } from "@switchyard/db";
import { RedisRegistryStore } from "@switchyard/state";
import { loadConfig, silentLogger, startRouter, type RouterHandle } from "@switchyard/router";
import { SimWorker } from "#testkit/sim-worker";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { createTestDb, sleep, waitFor, type TestDb } from "../helpers/env.ts";

const PREFIX = "chaos:";
let redis: PrivateRedis;
let db: TestDb;
let router: RouterHandle;
let key: string;
let workerRedis: Redis;
const workers: SimWorker[] = [];

beforeAll(async () => {
  redis = await startPrivateRedis();
  db = await createTestDb();
  const config = loadConfig({
    env: {},
    overrides: {
      "router.port": 0,
      "router.adminPort": 0,
      "redis.url": redis.url,
      "redis.keyPrefix": PREFIX,
      "registry.pollMs": 50,
      "deadlines.headersMs": 1_000,
      "deadlines.firstTokenMs": 1_000,
      "billing.ledgerFlushMs": 50,
    },
  });
  router = await startRouter(config, { db, log: silentLogger });
  const t = await createTenant(db.db, "chaos");
  if (!t.ok) throw new Error("tenant");
  key = (await createKey(db.db, t.tenant.id)).key;
  // Workers reach Redis through their own connection, as separate hosts would.
  workerRedis = new Redis(redis.url, { maxRetriesPerRequest: 1 });
  workerRedis.on("error", () => {});
  const registry = new RedisRegistryStore(workerRedis, PREFIX);
  for (const id of ["r1", "r2"]) workers.push(await new SimWorker({ id, models: ["m"], registry, heartbeatMs: 1_000, ttlMs: 3_000, behavior: { tokens: 3, interTokenMs: 5 } }).start());
  await waitFor(() => router.deps.directory.candidates("m").length === 2, { what: "workers visible" });
}, 60_000);

afterAll(async () => {
  await Promise.all(workers.map((w) => w.stop({ deregister: false })));
  workerRedis?.disconnect();
  await router?.close();
  await db?.drop();
  await redis?.stop();
});

interface Shot {
  at: number;
  ok: boolean;
  requestId?: string;
  /** A failure's status and error code (or the exception). */
  why?: string;
}

async function shoot(): Promise<Shot> {
  const at = performance.now();
  try {
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", stream: true, messages: [{ role: "user", content: "hi" }] }),
      signal: AbortSignal.timeout(5_000),
    });
    const text = await res.text();
    const ok = res.status === 200 && text.includes("[DONE]") && !text.includes('"error"');
    return { at, ok, requestId: res.headers.get("x-request-id") ?? undefined, ...(ok ? {} : { why: `${res.status} ${/"code":"([^"]+)"/.exec(text)?.[1] ?? ""}` }) };
  } catch (err) {
    return { at, ok: false, why: (err as Error).message };
  }
}

describe("Redis restarted mid-traffic", () => {
  it("traffic recovers once Redis is back, without a router restart; ledger rows drain again", async () => {
    const shots: Shot[] = [];
    let running = true;
    // Open loop, ~20 requests/s for the whole run.
    const traffic = (async () => {
      const inflight: Promise<void>[] = [];
      while (running) {
        inflight.push(shoot().then((s) => void shots.push(s)));
        await sleep(50);
      }
      await Promise.all(inflight);
    })();
    await sleep(1_000);
    const before = shots.filter((s) => s.ok).length;
    expect(before).toBeGreaterThan(5);

    const downAt = performance.now();
    await redis.stop();
    await sleep(1_000);
    redis = await startPrivateRedis([], { port: redis.port });
    const upAt = performance.now();

    // Recovered: 20 requests in a row succeed, all started after Redis returned.
    const recoveredAt = await waitFor(
      () => {
        const after = shots.filter((s) => s.at > upAt).sort((a, b) => a.at - b.at);
        const tail = after.slice(-20);
        return tail.length === 20 && tail.every((s) => s.ok) ? tail[0]!.at : undefined;
      },
      { timeoutMs: 20_000, intervalMs: 50, what: () => `recovery (${shots.filter((s) => s.at > upAt && !s.ok).length} failures since Redis returned)` },
    );
    running = false;
    await traffic;
    const during = shots.filter((s) => s.at >= downAt && s.at < upAt);
    const failedAfter = shots.filter((s) => s.at >= upAt && !s.ok);
    console.log(
      `redis restart: down ${Math.round(upAt - downAt)} ms; during the outage ${during.filter((s) => s.ok).length}/${during.length} ok; ` +
        `after it ${failedAfter.length} failed (${[...new Set(failedAfter.map((s) => s.why))].join(", ")}) before 20 in a row succeeded, ${Math.round(recoveredAt - upAt)} ms after Redis returned`,
    );
    expect(recoveredAt - upAt).toBeLessThan(10_000);
    expect(failedAfter.map((s) => s.why)).toEqual([]);
    expect(router.deps.metrics.registryLosses.get()).toBe(1);
    // The workers are back in the new server's registry.
    expect((await new RedisRegistryStore(workerRedis, PREFIX).list()).map((w) => w.id).sort()).toEqual(["r1", "r2"]);

    // The ledger drain found its consumer group gone and made it again: rows of requests after the restart reach Postgres.
    const lastIds = shots.filter((s) => s.ok && s.at > recoveredAt && s.requestId).map((s) => s.requestId!);
    expect(lastIds.length).toBeGreaterThan(0);
    await waitFor(
      async () => {
        const rows = await db.sql`select count(*)::int as n from spend_ledger where request_id = any(${lastIds})`;
        return rows[0]!.n === lastIds.length;
      },
      { timeoutMs: 10_000, what: "ledger rows after the restart in Postgres" },
    );
  }, 60_000);
});
