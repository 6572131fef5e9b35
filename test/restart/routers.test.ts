// Rolling restart of routers under live streams (issue 12 item 3): two router
// processes, 200 streams kept open through them (a sim worker and the fake
// OpenRouter streaming slowly, a quarter of them paid), each router in turn
// SIGTERMed, waited for (exit 0) and started again while clients keep opening
// streams against whichever router /readyz calls ready. Every stream must
// complete — full text, [DONE], no error event — and every request's ledger
// row must land exactly once.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestDb, createTestRedis, REDIS_URL, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter } from "../helpers/router-proc.ts";
import { startSimProcess, type SimProcess } from "../helpers/sim-process.ts";
import { pool, readStream, sigterm, sleep, type PooledRouter, type StreamResult } from "./harness.ts";

const PAID_MODEL = "openai/gpt-4o-mini";
const TOKENS = 30;
const INTER_TOKEN_MS = 100; // ~3 s a stream
const STREAMS = 200;
const GRACE_MS = 1_500;
const DRAIN_MS = 30_000;
const fullText = Array.from({ length: TOKENS }, (_, i) => `tok${i} `).join("");

let db: TestDb;
let redis: TestRedis;
let fake: FakeOpenRouter;
let sim: SimProcess;
let key: string;
let tenantId: number;
let env: Record<string, string>;
const routers: PooledRouter[] = [];

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-restart" }).start();
  fake.defaultScenario = { kind: "slow", interTokenMs: INTER_TOKEN_MS, completionTokens: TOKENS };
  const t = await createTenant(db.db, "rolling");
  if (!t.ok) throw new Error("tenant");
  tenantId = t.tenant.id;
  key = (await createKey(db.db, tenantId)).key;
  await setBudget(db.db, { tenantId, dailyLimitCents: 10_000_000n });
  await setPrice(db.db, { backend: "openrouter", model: PAID_MODEL, inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 2_000_000n });
  sim = await startSimProcess({ id: "sim-restart", redisUrl: REDIS_URL, prefix: redis.prefix, models: ["sim"], tokens: TOKENS, interTokenMs: INTER_TOKEN_MS });
  env = {
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    OPENROUTER_API_KEY: "sk-or-restart",
    SWITCHYARD_PROVIDERS__OPENROUTER__BASE_URL: fake.url,
    SWITCHYARD_REGISTRY__POLL_MS: "100",
    SWITCHYARD_ROUTER__DRAIN_GRACE_MS: String(GRACE_MS),
    SWITCHYARD_ROUTER__DRAIN_MS: String(DRAIN_MS),
  };
  const [a, b] = await Promise.all([spawnRouter(env, "router-a"), spawnRouter(env, "router-b")]);
  routers.push(pool("a", a!), pool("b", b!));
  await waitFor(() => routers.every((r) => r.ready), { timeoutMs: 30_000, what: "both routers ready" });
}, 180_000);

afterAll(async () => {
  for (const r of routers) {
    clearInterval(r.poller);
    await r.router.kill9();
  }
  await sim?.kill();
  await fake?.stop();
  await db?.drop();
  await redis?.cleanup();
});

describe("rolling restart of routers", () => {
  it("200 live streams, each router restarted in turn: every stream completes, every ledger row lands once", async () => {
    const results: Array<StreamResult & { paid: boolean; router: string }> = [];
    let stopping = false;
    let opened = 0;
    let rr = 0;
    const pick = (): PooledRouter | undefined => {
      const ready = routers.filter((r) => r.ready);
      return ready.length === 0 ? undefined : ready[rr++ % ready.length];
    };
    const client = async (i: number) => {
      while (!stopping) {
        const target = pick();
        if (!target) {
          await sleep(20);
          continue;
        }
        const paid = (opened++ + i) % 4 === 0;
        target.live++;
        try {
          const res = await fetch(`${target.router.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
            body: JSON.stringify({ model: paid ? PAID_MODEL : "sim", stream: true, max_tokens: 64, messages: [{ role: "user", content: `stream ${i}` }] }),
          });
          results.push({ ...(await readStream(res)), paid, router: target.name });
        } catch (err) {
          results.push({ status: 0, requestId: null, text: "", errors: [], done: false, failure: `fetch: ${(err as Error).message} ${String((err as { cause?: unknown }).cause ?? "")}`, paid, router: target.name });
        } finally {
          target.live--;
        }
      }
    };
    const clients = Array.from({ length: STREAMS }, (_, i) => client(i));
    const liveNow = () => routers.reduce((n, r) => n + r.live, 0);
    await waitFor(() => liveNow() >= STREAMS, { timeoutMs: 20_000, what: `${STREAMS} live streams` });
    const drains: Array<{ router: string; liveAtSigterm: number; code: number | null; ms: number }> = [];
    for (const slot of [0, 1]) {
      // Let the streams spread over both routers (and be mid-way) before the signal.
      await sleep(2_000);
      const old = routers[slot]!;
      const liveAtSigterm = old.live;
      const exit = await sigterm(old.router.proc.child, DRAIN_MS + 20_000);
      clearInterval(old.poller);
      drains.push({ router: old.name, liveAtSigterm, code: exit.code, ms: exit.ms });
      expect(exit.code, `${old.name} exit`).toBe(0);
      const fresh = pool(`${old.name}'`, await spawnRouter(env, `router-${old.name}2`));
      routers[slot] = fresh;
      await waitFor(() => fresh.ready, { timeoutMs: 30_000, what: `${fresh.name} ready` });
      await waitFor(() => fresh.live >= 20, { timeoutMs: 20_000, what: `streams on ${fresh.name}` });
    }
    await sleep(1_000);
    stopping = true;
    await Promise.all(clients);
    // The last two routers stop the same way; their buffers are flushed on the way out.
    for (const r of routers) {
      clearInterval(r.poller);
      const exit = await sigterm(r.router.proc.child, DRAIN_MS + 20_000);
      expect(exit.code, `${r.name} exit`).toBe(0);
    }
    console.log(`rolling restart: ${results.length} streams (${results.filter((r) => r.paid).length} paid); drains: ${drains.map((d) => `${d.router} ${d.liveAtSigterm} live → exit ${d.code} after ${d.ms} ms`).join(", ")}`);

    // Each router really had streams in flight when it was stopped.
    for (const d of drains) expect(d.liveAtSigterm, `${d.router} live streams at SIGTERM`).toBeGreaterThanOrEqual(50);
    const bad = results.filter((r) => r.failure || r.errors.length > 0 || !r.done || r.text !== fullText);
    expect(bad.slice(0, 5), `${bad.length} of ${results.length} streams failed`).toEqual([]);
    expect(results.length).toBeGreaterThan(STREAMS * 3);

    // Every request's row, once, and nothing else.
    const ids = results.map((r) => r.requestId!);
    expect(new Set(ids).size).toBe(ids.length);
    const rows = await db.sql<{ request_id: string; n: number; backend: string; status: string }[]>`
      select request_id, count(*)::int as n, min(backend) as backend, min(status::text) as status from spend_ledger where tenant_id = ${tenantId} group by request_id`;
    expect(rows.filter((r) => r.n !== 1)).toEqual([]);
    expect(new Set(rows.map((r) => r.request_id))).toEqual(new Set(ids));
    expect(rows.filter((r) => r.status !== "ok")).toEqual([]);
    const paidIds = new Set(results.filter((r) => r.paid).map((r) => r.requestId));
    expect(rows.filter((r) => r.backend === "openrouter").length).toBe(paidIds.size);
    // Nothing left behind in the Redis ledger buffer.
    expect(await redis.redis.xlen(`${redis.prefix}{ledger}:stream`)).toBe(0);
  }, 180_000);
});
