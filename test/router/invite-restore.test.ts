// Invites outlive Redis. Redis keeps no ACL user in its RDB or AOF files, so
// a restart — even one that keeps every key — drops the invited workers'
// users: their heartbeats fail (WRONGPASS), and within their TTL routers stop
// routing to them, until each is invited again with a new password. Now
// `workers invite` records the invite in Postgres (the password's SHA-256),
// and routers put the users back (InviteKeeper). Revoked workers stay
// revoked; invites made before Postgres kept them are adopted.
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, listWorkerInvites } from "@switchyard/db";
import { inviteKey, inviteWorker, redisPasswordSha256, RedisRegistryStore, workerAclUser, workerKey } from "@switchyard/state";
import { loadConfig, silentLogger, startRouter, type RouterHandle } from "@switchyard/router";
import { InviteKeeper } from "../../apps/router/src/routing/invite-keeper.ts";
import { RouterMetrics } from "../../apps/router/src/observability/metrics.ts";
import { SimWorker } from "#testkit/sim-worker";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { createTestDb, sleep, waitFor, type TestDb } from "../helpers/env.ts";

const SECRET_KEY = "routers-secret-key-for-invite-restore";
const PREFIX = "sy:";
const MODEL = "kept-model";
const root = path.resolve(import.meta.dirname, "../..");
// Every write on disk before it is acknowledged: the restart keeps all the keys, and loses only the ACL users.
const dir = mkdtempSync(path.join(tmpdir(), "sy-invite-restore-"));
const redisArgs = ["--requirepass", "admin-pass", "--appendonly", "yes", "--appendfsync", "always", "--dir", dir];

let redis: PrivateRedis;
let admin: Redis;
let db: TestDb;
let router: RouterHandle;
let apiKey: string;
const workers: SimWorker[] = [];
const conns: Redis[] = [];

beforeAll(async () => {
  redis = await startPrivateRedis(redisArgs);
  admin = new Redis(redis.url);
  admin.on("error", () => {});
  db = await createTestDb();
  // A long sync interval: what brings the users back below is the router seeing Redis return.
  const config = loadConfig({ env: {}, overrides: { "router.port": 0, "router.adminPort": 0, "redis.url": redis.url, "redis.keyPrefix": PREFIX, "registry.pollMs": 50, "workers.secretKey": SECRET_KEY, "workers.inviteSyncMs": 600_000 } });
  router = await startRouter(config, { db, log: silentLogger });
  const t = await createTenant(db.db, "invited-fleet");
  if (!t.ok) throw new Error("tenant");
  apiKey = (await createKey(db.db, t.tenant.id)).key;
}, 60_000);

afterAll(async () => {
  for (const w of workers) await w.stop().catch(() => {});
  for (const c of conns) c.disconnect();
  await router?.close();
  admin?.disconnect();
  await redis?.stop();
  await db?.drop();
  rmSync(dir, { recursive: true, force: true });
});

/** `switchyard workers ARGS…` as an admin runs it, against this Redis and Postgres. */
function cli(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const env = { ...process.env, REDIS_URL: redis.url, DATABASE_URL: db.url, SWITCHYARD_WORKER_SECRET_KEY: SECRET_KEY, SWITCHYARD_REDIS__KEY_PREFIX: PREFIX };
  const child = spawn(process.execPath, [path.join(root, "apps/cli/bin/switchyard.mjs"), "workers", ...args], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, out, err })));
}

/** Invites `id` with the CLI and starts it as its owner would: its own ACL user, the printed call secret. */
async function joinedWorker(id: string): Promise<{ worker: SimWorker; user: string; password: string }> {
  const r = await cli(["invite", id, "--model", MODEL, "--advertise", "http://127.0.0.1:9100"]);
  expect(r.code, r.err).toBe(0);
  const url = new URL(/--redis '([^']+)'/.exec(r.out)![1]!);
  const token = /--token '([^']+)'/.exec(r.out)![1]!;
  const user = decodeURIComponent(url.username);
  const password = decodeURIComponent(url.password);
  const conn = new Redis({ port: redis.port, host: "127.0.0.1", username: user, password, enableReadyCheck: false, maxRetriesPerRequest: 1 });
  conn.on("error", () => {});
  conns.push(conn);
  const worker = await new SimWorker({ id, models: [MODEL], registry: new RedisRegistryStore(conn, PREFIX), token, heartbeatMs: 200, ttlMs: 1_500 }).start();
  workers.push(worker);
  return { worker, user, password };
}

const chat = () =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }] }),
  });

const aclUsers = async () => ((await admin.call("ACL", "USERS")) as string[]).map(String);

describe("invited workers across a Redis restart", () => {
  it("the restart drops their ACL users; the router puts them back from Postgres, and the workers keep heartbeating and serving", async () => {
    const { user } = await joinedWorker("gpu-a");
    await joinedWorker("gpu-b");
    await waitFor(async () => (await chat()).status === 200, { what: "the invited workers to serve" });
    const rows = await listWorkerInvites(db.db, PREFIX);
    expect(rows.map((r) => r.workerId).sort()).toEqual(["gpu-a", "gpu-b"]);
    expect(rows.every((r) => /^[0-9a-f]{64}$/.test(r.passwordSha256) && r.revokedAt === null)).toBe(true);

    await redis.stop();
    redis = await startPrivateRedis(redisArgs, { port: redis.port });
    // The keys came back from the AOF, the ACL users did not: until the router puts them back.
    await waitFor(async () => (await admin.exists(inviteKey(PREFIX, "gpu-a"))) === 1, { what: "Redis back with its keys" });
    await waitFor(async () => (await aclUsers()).includes(user), { timeoutMs: 10_000, what: "the router to restore the workers' ACL users" });
    expect(await aclUsers()).toEqual(expect.arrayContaining(["sy-worker-gpu-a", "sy-worker-gpu-b"]));
    expect(router.deps.metrics.inviteRepairs.get({ repair: "user_restored" })).toBeGreaterThanOrEqual(2);

    // Both workers heartbeat again as themselves (their old passwords), and serve.
    const beat = async (id: string) => Number(await admin.pttl(workerKey(PREFIX, id)));
    await sleep(1_600); // longer than the records' TTL: a worker that could not beat would be gone
    expect(await beat("gpu-a")).toBeGreaterThan(0);
    expect(await beat("gpu-b")).toBeGreaterThan(0);
    // The scorer may favour one worker a while (it explores 5% of requests): ask until both have served, or 40 times.
    const bothServed = () => workers.every((w) => (w.served.get("/v1/chat/completions") ?? 0) > 0);
    for (let i = 0; i < 40 && (i < 6 || !bothServed()); i++) expect((await chat()).status).toBe(200);
    expect(bothServed()).toBe(true);
  }, 60_000);
});

describe("InviteKeeper", () => {
  const keeper = () => new InviteKeeper({ redis: admin, db: db.db, prefix: PREFIX, log: silentLogger, metrics: new RouterMetrics() });

  it("never brings back a revoked worker, and takes away what an old ACL file or a stale key put back", async () => {
    const r = await cli(["revoke", "gpu-b"]);
    expect(r.code, r.err).toBe(0);
    expect(await aclUsers()).not.toContain("sy-worker-gpu-b");
    expect((await listWorkerInvites(db.db, PREFIX)).find((x) => x.workerId === "gpu-b")?.revokedAt).toBeInstanceOf(Date);
    expect(await keeper().repair()).toMatchObject({ usersRestored: 0, invitesRestored: 0, usersRemoved: 0, invitesRemoved: 0 });
    expect(await aclUsers()).not.toContain("sy-worker-gpu-b");

    // The user and the invite come back by some other way (an ACL file from before the revoke, a restore of a snapshot).
    await admin.call("ACL", "SETUSER", workerAclUser("gpu-b"), "on", ">old-password", "~*", "+@all");
    await admin.set(inviteKey(PREFIX, "gpu-b"), JSON.stringify({ models: [MODEL], createdAt: Date.now() }));
    expect(await keeper().repair()).toMatchObject({ usersRestored: 0, usersRemoved: 1, invitesRemoved: 1 });
    expect(await aclUsers()).not.toContain("sy-worker-gpu-b");
    expect(await admin.exists(inviteKey(PREFIX, "gpu-b"))).toBe(0);

    // A mistyped id is refused before anything is written (no tombstone for it).
    const bad = await cli(["revoke", "gpu b"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/invalid worker id 'gpu b'/);
    expect((await listWorkerInvites(db.db, PREFIX)).map((x) => x.workerId).sort()).toEqual(["gpu-a", "gpu-b"]);

    // Invited again: live again, and restored like any other.
    expect((await cli(["invite", "gpu-b", "--model", MODEL])).code).toBe(0);
    expect((await listWorkerInvites(db.db, PREFIX)).find((x) => x.workerId === "gpu-b")?.revokedAt).toBeNull();
  }, 60_000);

  it("adopts an invite made before Postgres kept them, then restores it with the password its worker already has", async () => {
    const old = await inviteWorker(admin, { prefix: PREFIX, workerId: "old-box", secretKey: SECRET_KEY, models: [MODEL, "other-model"] });
    expect((await listWorkerInvites(db.db, PREFIX)).some((x) => x.workerId === "old-box")).toBe(false);
    expect(await keeper().repair()).toMatchObject({ adopted: 1, usersRestored: 0 });
    const row = (await listWorkerInvites(db.db, PREFIX)).find((x) => x.workerId === "old-box")!;
    expect(row.passwordSha256).toBe(redisPasswordSha256(old.redisPassword));
    expect(row.models).toEqual([MODEL, "other-model"]);

    // A Redis back empty: the user and the invite key both gone.
    await admin.call("ACL", "DELUSER", workerAclUser("old-box"));
    await admin.del(inviteKey(PREFIX, "old-box"));
    expect(await keeper().repair()).toMatchObject({ usersRestored: 1, invitesRestored: 1, adopted: 0, workers: ["old-box"] });
    expect(JSON.parse((await admin.get(inviteKey(PREFIX, "old-box")))!)).toMatchObject({ models: [MODEL, "other-model"] });
    const asWorker = new Redis({ port: redis.port, host: "127.0.0.1", username: old.redisUser, password: old.redisPassword, lazyConnect: true, enableReadyCheck: false, maxRetriesPerRequest: 0, retryStrategy: () => null });
    asWorker.on("error", () => {});
    try {
      await asWorker.connect();
      expect(await asWorker.set(workerKey(PREFIX, "old-box"), "{}", "PX", 1000)).toBe("OK");
      // Still only its own key.
      await expect(asWorker.set(workerKey(PREFIX, "gpu-a"), "{}", "PX", 1000)).rejects.toThrow(/NOPERM/);
    } finally {
      asWorker.disconnect();
    }
    // Nothing left to do.
    expect(await keeper().repair()).toMatchObject({ usersRestored: 0, invitesRestored: 0, usersRemoved: 0, invitesRemoved: 0, adopted: 0 });
  }, 60_000);
});
