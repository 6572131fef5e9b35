// Switchyard on Redis with Sentinel: a primary, one replica and three
// Sentinels (redis-sentinel, started here on spare ports). Two router
// processes and three sim workers reach Redis only through the Sentinels.
// The primary is killed under paid and worker traffic: the Sentinels promote
// the replica and routers and workers follow it without a restart (workers'
// heartbeats land on the new primary, routers route to them again; no
// worker request fails, though the promotion can outlast the records' TTL:
// a router keeps the workers whose records expired while no primary
// answered, until they heartbeat again), and
// after `budgets reconcile` Redis equals the ledger. A Sentinel name nobody
// knows stops a router at start. Prints what it measured.
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, setBudget, setPrice } from "@switchyard/db";
import { budgetDay, connectRedis, inviteWorker, openRedis, RedisBudgetStore, RedisRegistryStore, revokeWorker, workerAclUser, type RedisLike } from "@switchyard/state";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "../fixtures/sim-worker.ts";
import { createTestDb, sleep, uniqueName, waitFor, type TestDb } from "../helpers/env.ts";
import { nodeCall, startSentinels, type TestSentinels } from "../helpers/redis-cluster.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";

const run = promisify(execFile);
const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const PAID = "openai/gpt-4o-mini";
const LOCAL = "m-sentinel";

let s: TestSentinels;
let db: TestDb;
let fake: FakeOpenRouter;
let workerRedis: RedisLike;
let routers: RouterProc[] = [];
const sims: SimWorker[] = [];
const prefix = `${uniqueName("sn")}:`;
let env: Record<string, string>;
let tenant: { id: number; key: string };

async function sy(args: string[], extra: Record<string, string> = {}) {
  try {
    const r = await run(process.execPath, [bin, ...args], { env: { ...process.env, ...env, SWITCHYARD_LOG__LEVEL: "warn", ...extra }, timeout: 60_000 });
    return { code: 0, out: r.stdout + r.stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return { code: e.code ?? 1, out: (e.stdout ?? "") + (e.stderr ?? "") };
  }
}

async function chat(router: RouterProc, model: string, i: number) {
  const t0 = Date.now();
  try {
    const res = await fetch(`${router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${tenant.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model, max_tokens: 20, messages: [{ role: "user", content: `hello ${i}` }] }),
    });
    const body = await res.text();
    return { ok: res.status === 200, status: res.status, model, t0, t1: Date.now(), body };
  } catch (err) {
    return { ok: false, status: 0, model, t0, t1: Date.now(), body: String(err) };
  }
}

beforeAll(async () => {
  s = await startSentinels();
  db = await createTestDb();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-sn" }).start();
  fake.defaultScenario = { kind: "ok", costUsd: "0.0001", completionTokens: 5, interTokenMs: 1 };
  const t = await createTenant(db.db, "sentinel-tenant");
  if (!t.ok) throw new Error("tenant");
  tenant = { id: t.tenant.id, key: (await createKey(db.db, t.tenant.id)).key };
  await setBudget(db.db, { tenantId: tenant.id, dailyLimitCents: 100n });
  await setPrice(db.db, { backend: "openrouter", model: PAID, inputMicroPerMtok: 0n, outputMicroPerMtok: 200_000_000n });
  // The workers' Redis is the Sentinels' primary, found through them (as `switchyard worker` with redis.sentinels does).
  workerRedis = connectRedis({ sentinels: s.sentinels, name: s.name }, { readyCheck: false });
  workerRedis.on("error", () => {});
  const registry = new RedisRegistryStore(workerRedis, prefix);
  for (let i = 0; i < 3; i++) sims.push(await new SimWorker({ id: `snw-${i}`, models: [LOCAL], registry, heartbeatMs: 300, ttlMs: 3_000, behavior: { tokens: 3 } }).start());
  env = {
    DATABASE_URL: db.url,
    REDIS_URL: "",
    SWITCHYARD_REDIS__SENTINELS: JSON.stringify(s.sentinels),
    SWITCHYARD_REDIS__NAME: s.name,
    SWITCHYARD_REDIS__KEY_PREFIX: prefix,
    OPENROUTER_API_KEY: "sk-or-sn",
    SWITCHYARD_PROVIDERS__OPENROUTER__BASE_URL: fake.url,
    SWITCHYARD_REGISTRY__POLL_MS: "100",
    SWITCHYARD_BILLING__LEDGER_FLUSH_MS: "50",
  };
  routers = await Promise.all([0, 1].map((i) => spawnRouter(env, `sentinel-router-${i}`)));
}, 180_000);

afterAll(async () => {
  await Promise.all(routers.map((r) => r.stop()));
  for (const w of sims) await w.stop();
  workerRedis?.disconnect();
  await fake?.stop();
  await db?.drop();
  await s?.stop();
}, 120_000);

describe("Redis Sentinel", () => {
  it("a Sentinel name nobody knows is refused at start: by openRedis and by `switchyard router` (exit 2)", async () => {
    await expect(openRedis({ sentinels: s.sentinels, name: "no-such-primary" })).rejects.toThrow(/redis\.name 'no-such-primary': no Sentinel knows a primary by that name/);
    const r = await sy(["router"], { SWITCHYARD_REDIS__NAME: "no-such-primary", SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0" });
    expect(r.code).toBe(2);
    expect(r.out).toContain("no Sentinel knows a primary by that name");
    expect(r.out).not.toContain("router listening");
  }, 90_000);

  it("an invited worker's ACL user is set on the primary and on its replica (which a failover promotes)", async () => {
    const admin = await openRedis({ sentinels: s.sentinels, name: s.name });
    try {
      await inviteWorker(admin, { prefix, workerId: "sn-invited", secretKey: "k".repeat(32), models: [LOCAL] });
      for (const port of [s.primaryPort, s.replicaPort]) {
        const users = (await nodeCall(port, "ACL", "LIST")) as string[];
        expect(users.some((u) => u.startsWith(`user ${workerAclUser("sn-invited")} on`)), `ACL on :${port}`).toBe(true);
      }
      expect(await revokeWorker(admin, "sn-invited", { prefix })).toBe(true);
      for (const port of [s.primaryPort, s.replicaPort]) expect(((await nodeCall(port, "ACL", "LIST")) as string[]).some((u) => u.includes("sn-invited"))).toBe(false);
    } finally {
      admin.disconnect();
    }
  });

  it("the primary is killed under load: the replica is promoted, routers and workers follow it without a restart, Redis = ledger after reconcile", async () => {
    const pids = routers.map((r) => r.proc.child.pid);
    await waitFor(async () => (await chat(routers[0]!, LOCAL, -1)).ok, { timeoutMs: 10_000, what: "workers routable" });
    let stop = false;
    let i = 0;
    const results: Array<Awaited<ReturnType<typeof chat>>> = [];
    const loops = Array.from({ length: 8 }, async (_, c) => {
      while (!stop) {
        const r = await chat(routers[c % 2]!, c % 2 === 0 ? PAID : LOCAL, i++);
        results.push(r);
        if (!r.ok) await sleep(25);
      }
    });
    await sleep(1_500);
    const before = results.filter((r) => r.ok).length;
    expect(before).toBeGreaterThan(10);
    const killedAt = Date.now();
    await s.kill(s.primaryPort);
    await waitFor(async () => (await s.currentPrimary()) === s.replicaPort, { timeoutMs: 30_000, intervalMs: 100, what: "the Sentinels promote the replica" });
    const promotedAt = Date.now();
    // Recovered: both kinds of request served again through both routers, started after the promotion.
    await waitFor(
      // (paid requests go through router 0, worker requests through router 1)
      () => [PAID, LOCAL].every((m) => results.some((r) => r.ok && r.model === m && r.t0 >= promotedAt)),
      { timeoutMs: 30_000, what: () => `requests served after the promotion; last: ${results.at(-1)?.status} ${results.at(-1)?.body.slice(0, 200)}` },
    );
    // Worker requests need no Redis on their path (routers route from their registry snapshot); paid ones do.
    const firstOk = Math.min(...results.filter((r) => r.ok && r.model === PAID && r.t0 >= killedAt).map((r) => r.t1));
    await sleep(1_000);
    stop = true;
    await Promise.all(loops);
    const after = results.filter((r) => r.t0 >= killedAt);
    const tail = results.slice(-16);
    expect(tail.every((r) => r.ok)).toBe(true);
    expect(after.filter((r) => !r.ok && r.model === LOCAL).map((r) => `${r.status} ${r.body.slice(0, 160)}`)).toEqual([]);
    expect(routers.map((r) => r.proc.child.pid)).toEqual(pids);
    expect(routers.every((r) => r.proc.child.exitCode === null)).toBe(true);

    // The workers' heartbeats are on the new primary (fresh records, read there directly).
    const onNew = connectRedis(`redis://127.0.0.1:${s.replicaPort}`);
    try {
      const listing = await new RedisRegistryStore(onNew, prefix).listing();
      expect(listing.workers.map((w) => w.id).sort()).toEqual(sims.map((w) => w.id).sort());
      for (const w of listing.workers) expect(w.updatedAt).toBeGreaterThan(promotedAt);
      expect(String(await onNew.call("ROLE"))).toMatch(/^master/);

      // Money: every paid request served has its row; reconcile makes Redis equal the ledger.
      const paidServed = results.filter((r) => r.ok && r.model === PAID).length;
      await waitFor(async () => Number((await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${tenant.id} and backend = 'openrouter'`)[0]!.n) >= paidServed, {
        timeoutMs: 30_000,
        what: "every paid request's ledger row",
      });
      const rec = await sy(["budgets", "reconcile", "sentinel-tenant"]);
      expect(rec.code, rec.out).toBe(0);
      const [row] = await db.sql`select coalesce(sum(cost_micro), 0)::text as micro, count(*)::int as n from spend_ledger where tenant_id = ${tenant.id}`;
      const snap = await new RedisBudgetStore(onNew, prefix).snapshot(tenant.id, budgetDay(Date.now(), "UTC"));
      expect(snap.spentMicro).toBe(BigInt(row!.micro as string));
      expect(snap.heldMicro).toBe(0n);
      console.log(
        [
          `sentinel failover: primary :${s.primaryPort} killed, replica :${s.replicaPort} promoted by the Sentinels after ${((promotedAt - killedAt) / 1000).toFixed(2)} s`,
          `  requests: ${before} served before the kill; until paid requests recovered ${((firstOk - killedAt) / 1000).toFixed(2)} s after it: ${after.filter((r) => r.ok && r.t0 < firstOk && r.model === LOCAL).length} worker requests served, ${after.filter((r) => !r.ok && r.model === PAID).length} paid and ${after.filter((r) => !r.ok && r.model === LOCAL).length} worker requests failed; ${results.filter((r) => r.ok).length} served in all (paid ${paidServed})`,
          `  after reconcile: Redis spent ${snap.spentMicro} = ledger ${row!.micro} micro-cents (${row!.n} rows)`,
        ].join("\n"),
      );
    } finally {
      onNew.disconnect();
    }
  }, 240_000);
});
