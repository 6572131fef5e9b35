// Bad Redis settings stop a router before it serves: a seed list mixing two
// clusters, a seed that is not a cluster node, a cluster with unserved slots,
// two Redis forms at once. And an invited worker's ACL user exists on every
// node of a cluster (ACLs are per node), so its heartbeats survive a failover;
// a node that lost it (a restart, a node added later) gets it back from the
// routers' InviteKeeper.
import { spawn } from "node:child_process";
import path from "node:path";
import { Cluster } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listWorkerInvites, recordWorkerInvite } from "@switchyard/db";
import { silentLogger } from "@switchyard/router";
import { connectRedis, inviteKey, inviteWorker, newWorkerPassword, openRedis, redisPasswordSha256, RedisRegistryStore, revokeWorker, workerAclUser } from "@switchyard/state";
import { RouterMetrics } from "../../apps/router/src/observability/metrics.ts";
import { InviteKeeper } from "../../apps/router/src/routing/invite-keeper.ts";
import { createTestDb, REDIS_URL, uniqueName, type TestDb } from "../helpers/env.ts";
import { nodeCall, startRedisCluster, type TestCluster } from "../helpers/redis-cluster.ts";

const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
let big: TestCluster;
let small: TestCluster;
let db: TestDb;

beforeAll(async () => {
  [big, small, db] = await Promise.all([startRedisCluster(), startRedisCluster({ masters: 1, replicasPerMaster: 0 }), createTestDb()]);
}, 120_000);

afterAll(async () => {
  await Promise.all([big?.stop(), small?.stop(), db?.drop()]);
});

/** The CLI with these arguments and this environment: its exit code and output (it must exit by itself). */
function cli(args: string[], env: Record<string, string> = {}): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [bin, ...args], { env: { ...process.env, REDIS_URL: "", ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    child.once("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

/** `switchyard router` with this environment. */
const router = (env: Record<string, string>) => cli(["router"], { SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0", DATABASE_URL: db.url, ...env });

const single = (() => {
  const u = new URL(REDIS_URL);
  return `${u.hostname}:${u.port || 6379}`;
})();

describe("Redis Cluster seeds are checked at start", () => {
  it("a seed list mixing two clusters is refused, naming both seeds", async () => {
    await expect(openRedis({ cluster: [big.seeds[0]!, small.seeds[0]!] })).rejects.toThrow(`redis.cluster seeds ${big.seeds[0]} and ${small.seeds[0]} belong to different clusters`);
  });

  it("a seed that is a single node (no cluster mode) is refused: use redis.url", async () => {
    await expect(openRedis({ cluster: [single] })).rejects.toThrow(/is not a cluster node \(cluster support disabled\): use redis\.url/);
  });

  it("a cluster with unserved slots is refused (never half the state)", async () => {
    await nodeCall(small.ports[0]!, "CLUSTER", "DELSLOTSRANGE", "0", "99");
    try {
      await expect(openRedis({ cluster: small.seeds })).rejects.toThrow(/cluster_state:fail .*refusing to start on half a cluster/);
    } finally {
      await nodeCall(small.ports[0]!, "CLUSTER", "ADDSLOTSRANGE", "0", "99");
      await small.waitOk();
    }
  });

  it("no reachable seed is refused with each seed's error", async () => {
    await expect(openRedis({ cluster: ["127.0.0.1:1"] })).rejects.toThrow(/redis\.cluster: no seed reachable \(127\.0\.0\.1:1: /);
  });

  it("one good seed of a healthy cluster is enough: the client learns every master", async () => {
    const r = await openRedis({ cluster: [big.seeds[3]!] });
    try {
      expect(r).toBeInstanceOf(Cluster);
      await r.set(`${uniqueName("s")}:{x}`, "1", "PX", 1000);
      expect((r as Cluster).nodes("master")).toHaveLength(3);
    } finally {
      r.disconnect();
    }
  });

  it("`switchyard router` with a mixed seed list exits 2 with the reason and never listens", async () => {
    const r = await router({ SWITCHYARD_REDIS__CLUSTER: JSON.stringify([big.seeds[0], small.seeds[0]]) });
    expect(r.code).toBe(2);
    expect(r.out).toContain("belong to different clusters");
    expect(r.out).not.toContain("router listening");
  }, 90_000);

  it("`switchyard router` with both redis.url and redis.cluster exits 2: exactly one", async () => {
    const r = await router({ REDIS_URL, SWITCHYARD_REDIS__CLUSTER: JSON.stringify(big.seeds) });
    expect(r.code).toBe(2);
    expect(r.out).toContain("set exactly one of url, cluster or sentinels (got url and cluster)");
  }, 90_000);

  it("`switchyard router` without any Redis names every form", async () => {
    const r = await router({});
    expect(r.code).toBe(2);
    expect(r.out).toContain("nor redis.cluster or redis.sentinels");
  }, 90_000);
});

describe("`switchyard worker` reads the routers' config", () => {
  it("without --redis and without a Redis in its config it names every way to give one", async () => {
    const r = await cli(["worker", "--token", "t0123456789"]);
    expect(r.code).toBe(2);
    expect(r.out).toContain("worker: --redis redis://… is required (or redis.url / redis.cluster / redis.sentinels in --config FILE, or REDIS_URL)");
  }, 90_000);

  it("--config FILE is read (strictly: a misspelt redis key stops it, naming the key it meant)", async () => {
    const { mkdtempSync, writeFileSync } = await import("node:fs");
    const { tmpdir } = await import("node:os");
    const file = path.join(mkdtempSync(path.join(tmpdir(), "sy-wcfg-")), "switchyard.yaml");
    writeFileSync(file, `redis:\n  clustr: ${JSON.stringify(big.seeds)}\n`);
    const r = await cli(["worker", "--config", file, "--token", "t0123456789"]);
    expect(r.code).toBe(2);
    expect(r.out).toMatch(/redis\.clustr: unknown key \(in .*switchyard\.yaml\); did you mean redis\.cluster\?/);
  }, 90_000);
});

describe("invited workers on a cluster", () => {
  it("the worker's ACL user is on every node, and its heartbeat goes through a Cluster client as that user", async () => {
    const admin = await openRedis({ cluster: big.seeds });
    const prefix = `${uniqueName("inv")}:`;
    const invite = await inviteWorker(admin, { prefix, workerId: "cw-1", secretKey: "k".repeat(32), models: ["m"] });
    try {
      for (const port of big.ports) expect((await nodeCall(port, "ACL", "LIST")) as string[]).toEqual(expect.arrayContaining([expect.stringContaining(`user ${workerAclUser("cw-1")} on`)]));
      const worker = connectRedis({ cluster: big.seeds, username: invite.redisUser, password: invite.redisPassword }, { readyCheck: false });
      worker.on("error", () => {});
      const store = new RedisRegistryStore(worker, prefix);
      const rec = { id: "cw-1", url: "http://10.0.0.9:9100", models: ["m"], state: "ready" as const, inFlight: 0, queueDepth: 0, capacity: 4, device: "cpu", layerRanges: [], prefixes: [], version: "t", startedAt: Date.now(), updatedAt: Date.now() };
      expect(await store.publish(rec, 5_000)).toEqual({ ok: true });
      // Another worker's key stays out of reach.
      expect(await store.publish({ ...rec, id: "cw-2" }, 5_000)).toEqual({ ok: false, reason: "owned_by_other" });
      worker.disconnect();
      const listing = await new RedisRegistryStore(admin, prefix).listing();
      expect(listing.workers.map((w) => w.id)).toEqual(["cw-1"]);
      expect(listing.invites.get("cw-1")?.models).toEqual(["m"]);
      expect(await revokeWorker(admin, "cw-1", { prefix })).toBe(true);
      for (const port of big.ports) expect(((await nodeCall(port, "ACL", "LIST")) as string[]).some((l) => l.includes(workerAclUser("cw-1")))).toBe(false);
    } finally {
      await admin.del(`${prefix}{registry}:worker:cw-1`);
      admin.disconnect();
    }
  });

  it("a node that lost a worker's ACL user (a restart, a node added later) gets it back from the routers, replicas included; a Redis-only invite is adopted", async () => {
    const admin = await openRedis({ cluster: big.seeds });
    const prefix = `${uniqueName("keep")}:`;
    const password = newWorkerPassword();
    await recordWorkerInvite(db.db, { keyPrefix: prefix, workerId: "cw-kept", models: ["m"], passwordSha256: redisPasswordSha256(password) });
    await inviteWorker(admin, { prefix, workerId: "cw-kept", secretKey: "k".repeat(32), models: ["m"], password });
    const old = await inviteWorker(admin, { prefix, workerId: "cw-old", secretKey: "k".repeat(32), models: ["m"] });
    const keeper = new InviteKeeper({ redis: admin, db: db.db, prefix, log: silentLogger, metrics: new RouterMetrics() });
    try {
      expect(await keeper.repair()).toMatchObject({ adopted: 1, usersRestored: 0 });
      expect((await listWorkerInvites(db.db, prefix)).find((r) => r.workerId === "cw-old")?.passwordSha256).toBe(redisPasswordSha256(old.redisPassword));
      // Two nodes forget both users (as a restart does); the invite key goes too.
      const [a, b] = [big.ports[0]!, big.ports[big.ports.length - 1]!];
      for (const port of [a, b]) for (const id of ["cw-kept", "cw-old"]) await nodeCall(port, "ACL", "DELUSER", workerAclUser(id));
      await admin.del(inviteKey(prefix, "cw-kept"));
      expect(await keeper.repair()).toMatchObject({ usersRestored: 4, invitesRestored: 1, usersRemoved: 0 });
      for (const port of big.ports) {
        const users = (await nodeCall(port, "ACL", "USERS")) as string[];
        expect(users).toEqual(expect.arrayContaining([workerAclUser("cw-kept"), workerAclUser("cw-old")]));
      }
      // The worker heartbeats through the Cluster as itself, with the password it always had.
      const worker = connectRedis({ cluster: big.seeds, username: workerAclUser("cw-kept"), password }, { readyCheck: false });
      worker.on("error", () => {});
      const rec = { id: "cw-kept", url: "http://10.0.0.9:9100", models: ["m"], state: "ready" as const, inFlight: 0, queueDepth: 0, capacity: 4, device: "cpu", layerRanges: [], prefixes: [], version: "t", startedAt: Date.now(), updatedAt: Date.now() };
      try {
        expect(await new RedisRegistryStore(worker, prefix).publish(rec, 5_000)).toEqual({ ok: true });
      } finally {
        worker.disconnect();
      }
      expect(await keeper.repair()).toMatchObject({ usersRestored: 0, invitesRestored: 0, adopted: 0 });
    } finally {
      for (const id of ["cw-kept", "cw-old"]) await revokeWorker(admin, id, { prefix });
      await admin.del(`${prefix}{registry}:worker:cw-kept`);
      admin.disconnect();
    }
  });
});
