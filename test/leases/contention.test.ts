// Chaos: 10,000 contended lease acquisitions across 3 router processes (one
// Redis, one Postgres) on a few sim workers, with short leases that are
// released, extended or left to expire, holder requests sent through any
// router, and "zombie" dispatches straight to the workers carrying tokens of
// leases that already ended. Verified from the lease_events audit: grants of
// one worker never overlap in time and their tokens strictly increase; every
// grant ends exactly once; and no worker ever accepted a token older than one
// it had already accepted (every replayed stale token is refused).
// SY_LEASE_ATTEMPTS sets the number of acquisitions (default 10,000).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, listLeaseEvents, type LeaseEvent } from "@switchyard/db";
import { RedisRegistryStore } from "@switchyard/state";
import { SimWorker } from "#testkit/sim-worker";
import { createTestDb, createTestRedis, REDIS_URL, sleep, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";

const ATTEMPTS = Number(process.env.SY_LEASE_ATTEMPTS ?? 10_000);
const CLIENTS = 48;
const WORKERS = 4;
const TENANTS = 6;
const MODEL = "m-contended";

let db: TestDb;
let redis: TestRedis;
let routers: RouterProc[] = [];
const sims: SimWorker[] = [];
const keys: string[] = [];

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  const registry = new RedisRegistryStore(redis.redis, redis.prefix);
  for (let i = 0; i < WORKERS; i++) sims.push(await new SimWorker({ id: `cw-${i}`, models: [MODEL], registry, heartbeatMs: 500, behavior: { tokens: 2 } }).start());
  for (let i = 0; i < TENANTS; i++) {
    const t = await createTenant(db.db, `contender-${i}`);
    if (!t.ok) throw new Error("tenant");
    keys.push((await createKey(db.db, t.tenant.id)).key);
  }
  const env = {
    DATABASE_URL: db.url,
    REDIS_URL,
    SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix,
    SWITCHYARD_REGISTRY__POLL_MS: "100",
    SWITCHYARD_LEASES__POLL_MS: "50",
    SWITCHYARD_LEASES__MIN_DURATION_S: "0.01",
    SWITCHYARD_ROUTER__KEY_CACHE_MS: "60000",
  };
  routers = await Promise.all([0, 1, 2].map((i) => spawnRouter(env, `lease-router-${i}`)));
}, 180_000);

afterAll(async () => {
  await Promise.all(routers.map((r) => r.stop()));
  for (const s of sims) await s.stop();
  await db?.drop();
  await redis?.cleanup();
});

interface Granted {
  id: string;
  worker: string;
  token: number;
  tenant: number;
}

const pick = <T>(xs: readonly T[]): T => xs[Math.floor(Math.random() * xs.length)]!;

async function call(router: RouterProc, method: string, path: string, key: string, body?: unknown, headers: Record<string, string> = {}) {
  const res = await fetch(`${router.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}), ...headers },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

/** A dispatch straight to the worker with this token, as a paused router or client would send it late. */
async function zombie(worker: SimWorker, token: number): Promise<number> {
  const res = await fetch(`${worker.url}/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json", "x-switchyard-fencing-token": String(token) },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "late" }] }),
  });
  await res.arrayBuffer();
  return res.status;
}

function quantile(sorted: number[], q: number): number {
  return sorted.length ? sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]! : NaN;
}

describe("contended leases across three routers", () => {
  it(`${ATTEMPTS} acquisitions: zero double grants, tokens strictly increase per worker, zero stale-token dispatches accepted`, async () => {
    const stats = { granted: 0, conflict: 0, other: new Map<number, number>(), released: 0, extended: 0, leftToExpire: 0, holderOk: 0, holderEnded: 0, holderFenced: 0, zombies: 0, zombiesRefused: 0 };
    const grants: Granted[] = [];
    const latencies: number[] = [];
    let next = 0;
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CLIENTS }, async () => {
        while (next < ATTEMPTS) {
          next++;
          const tenant = Math.floor(Math.random() * TENANTS);
          const key = keys[tenant]!;
          const target = Math.random() < 0.5 ? { model: MODEL } : { worker: pick(sims).id };
          // Most leases are short and contended; some holders use their worker for a while.
          const user = Math.random() < 0.15;
          const a0 = performance.now();
          const r = await call(pick(routers), "POST", "/v1/leases", key, { ...target, duration_s: user ? 0.4 : 0.03 + Math.random() * 0.07 });
          latencies.push(performance.now() - a0);
          if (r.status === 409) {
            stats.conflict++;
            continue;
          }
          if (r.status !== 201) {
            stats.other.set(r.status, (stats.other.get(r.status) ?? 0) + 1);
            continue;
          }
          stats.granted++;
          const g: Granted = { id: String(r.body.id), worker: String(r.body.worker), token: Number(r.body.fencing_token), tenant };
          grants.push(g);
          const roll = Math.random();
          if (user) {
            // A holder that uses its worker: extend, then run through any router (not necessarily the granting one).
            const e = await call(pick(routers), "POST", `/v1/leases/${g.id}/extend`, key, { duration_s: 0.3 });
            if (e.status === 200) stats.extended++;
            const inf = await call(pick(routers), "POST", "/v1/chat/completions", key, { model: MODEL, messages: [{ role: "user", content: "hi" }] }, { "x-switchyard-lease": g.id });
            const code = (inf.body.error as { code?: string } | undefined)?.code;
            if (inf.status === 200) stats.holderOk++;
            else if (code === "lease_expired") stats.holderEnded++; // it ran out before the request
            else if (code === "stale_fencing_token") stats.holderFenced++; // it ran out in flight and a newer lease already ran there
            else stats.other.set(1000 + inf.status, (stats.other.get(1000 + inf.status) ?? 0) + 1);
          }
          if (user || roll < 0.6) {
            const d = await call(pick(routers), "DELETE", `/v1/leases/${g.id}`, key);
            expect(d.status).toBe(200);
            stats.released++;
          } else stats.leftToExpire++;
          if (Math.random() < 0.2) {
            // After its lease ended (or while it still runs), the old token shows up at the worker.
            stats.zombies++;
            if ((await zombie(sims.find((s) => s.id === g.worker)!, g.token)) === 409) stats.zombiesRefused++;
          }
        }
      }),
    );
    const wallS = (performance.now() - t0) / 1000;
    latencies.sort((a, b) => a - b);

    // Every lease has ended by now; give the routers' refreshes a moment to audit the last expiries.
    await sleep(300);
    const events = await waitFor(
      async () => {
        const rows = await listLeaseEvents(db.db);
        const ended = new Set(rows.filter((e) => e.event === "released" || e.event === "expired").map((e) => e.leaseId));
        return ended.size >= grants.length ? rows : undefined;
      },
      { timeoutMs: 10_000, what: "every lease's end in the audit" },
    );

    // 1. The audit holds exactly the grants the clients got.
    const granted = events.filter((e) => e.event === "granted");
    expect(granted).toHaveLength(grants.length);
    expect(new Set(granted.map((e) => e.leaseId))).toEqual(new Set(grants.map((g) => g.id)));
    // 2. Every grant ends exactly once.
    const ends = new Map<string, LeaseEvent[]>();
    for (const e of events) if (e.event === "released" || e.event === "expired") ends.set(e.leaseId, [...(ends.get(e.leaseId) ?? []), e]);
    expect([...ends.values()].filter((xs) => xs.length !== 1)).toEqual([]);
    expect(ends.size).toBe(grants.length);
    // 3. Per worker: grants never overlap in time, tokens strictly increase.
    const lastExpiry = new Map<string, number>();
    for (const e of events) lastExpiry.set(e.leaseId, Math.max(lastExpiry.get(e.leaseId) ?? 0, e.expiresAt.getTime()));
    let overlaps = 0;
    let tokenInversions = 0;
    for (const s of sims) {
      const mine = granted.filter((e) => e.worker === s.id).sort((a, b) => a.at.getTime() - b.at.getTime() || a.fencingToken - b.fencingToken);
      for (let i = 1; i < mine.length; i++) {
        const prev = mine[i - 1]!;
        const cur = mine[i]!;
        const end = ends.get(prev.leaseId)![0]!;
        const prevEnd = end.event === "released" ? Math.min(end.at.getTime(), lastExpiry.get(prev.leaseId)!) : lastExpiry.get(prev.leaseId)!;
        if (cur.at.getTime() < prevEnd) overlaps++;
        if (cur.fencingToken <= prev.fencingToken) tokenInversions++;
      }
    }
    expect(overlaps).toBe(0);
    expect(tokenInversions).toBe(0);
    // 4. No worker accepted a token older than one it had accepted before.
    let staleAccepted = 0;
    for (const s of sims) {
      let highest = 0;
      for (const f of s.fenceLog) {
        if (f.accepted && f.token < highest) staleAccepted++;
        if (f.accepted) highest = Math.max(highest, f.token);
      }
    }
    expect(staleAccepted).toBe(0);
    // 5. Replayed now, every token older than a worker's newest used one is refused.
    let replayed = 0;
    for (const s of sims) {
      const old = grants.filter((g) => g.worker === s.id && g.token < s.fencing.highest);
      for (const g of old.slice(-50)) {
        replayed++;
        expect(await zombie(s, g.token)).toBe(409);
      }
    }
    // Contention was real and the fabric kept granting.
    expect(stats.granted + stats.conflict).toBe(ATTEMPTS);
    expect(stats.other.size).toBe(0);
    expect(stats.conflict).toBeGreaterThan(ATTEMPTS / 10);
    // A floor, not a rate: how many of the 10,000 win depends on how long holders keep them on a loaded box (488 seen on CI).
    expect(stats.granted).toBeGreaterThan(ATTEMPTS / 40);
    expect(stats.holderOk).toBeGreaterThan(0);
    expect(replayed).toBeGreaterThan(0);

    const line = [
      `leases: ${ATTEMPTS} acquisitions in ${wallS.toFixed(1)} s (${Math.round(ATTEMPTS / wallS)}/s) over 3 routers, ${WORKERS} workers, ${CLIENTS} clients`,
      `granted ${stats.granted}, 409 ${stats.conflict}; acquire latency p50 ${quantile(latencies, 0.5).toFixed(1)} ms, p99 ${quantile(latencies, 0.99).toFixed(1)} ms`,
      `released ${stats.released}, extended ${stats.extended}, left to expire ${stats.leftToExpire}; holder requests ok ${stats.holderOk}, lease ended first ${stats.holderEnded}, fenced ${stats.holderFenced}`,
      `zombie dispatches ${stats.zombies} (refused ${stats.zombiesRefused}), stale replays refused ${replayed}/${replayed}; overlaps 0, token inversions 0, stale accepted 0`,
    ];
    console.log(line.join("\n"));
  }, 600_000);
});
