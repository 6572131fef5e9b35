// The routers' InviteKeeper puts invited workers' ACL users back on every
// data node, replicas included (ACLs are per node). It runs every
// workers.inviteSyncMs; it used to open, authenticate and close a new
// connection to each replica on every pass. Here: a primary and two replicas
// of its own (test-owned redis-server instances on spare ports), counted by
// each replica's `total_connections_received` and CLIENT LIST.
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { recordWorkerInvite } from "@switchyard/db";
import { silentLogger } from "@switchyard/router";
import { inviteWorker, newWorkerPassword, redisPasswordSha256, workerAclUser } from "@switchyard/state";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { RouterMetrics } from "../../apps/router/src/observability/metrics.ts";
import { InviteKeeper } from "../../apps/router/src/routing/invite-keeper.ts";
import { createTestDb, uniqueName, waitFor, type TestDb } from "../helpers/env.ts";

let primary: PrivateRedis;
const replicas: PrivateRedis[] = [];
let admin: Redis;
let db: TestDb;
const observers = new Map<number, Redis>();
const PREFIX = `${uniqueName("inv")}:`;
const USER = workerAclUser("rep-w1");

const replicaArgs = () => ["--replicaof", "127.0.0.1", String(primary.port)];

/** One connection per replica port that stays open, so reading the counters adds no connection of its own. */
async function observer(port: number): Promise<Redis> {
  observers.get(port)?.disconnect();
  const r = new Redis({ host: "127.0.0.1", port, maxRetriesPerRequest: 1, retryStrategy: () => null });
  r.on("error", () => {});
  await r.ping();
  observers.set(port, r);
  return r;
}

async function connectionsReceived(port: number): Promise<number> {
  const info = String(await observers.get(port)!.info("stats"));
  return Number(/^total_connections_received:(\d+)/m.exec(info)![1]);
}

/** Clients of the replica other than the observer and its link to the primary (flag M). */
async function otherClients(port: number): Promise<number> {
  const o = observers.get(port)!;
  const me = String(await o.client("ID"));
  const lines = String(await o.client("LIST")).split("\n").filter((l) => l.trim());
  return lines.filter((l) => !l.startsWith(`id=${me} `) && !/ flags=[A-Za-z]*M/.test(l)).length;
}

/** The replicas the primary's ROLE lists now. */
async function listedReplicas(): Promise<number[]> {
  const role = (await admin.call("ROLE")) as [string, unknown, Array<[string, string, string]>];
  return role[2].map(([, port]) => Number(port)).sort();
}

beforeAll(async () => {
  primary = await startPrivateRedis();
  for (let i = 0; i < 2; i++) replicas.push(await startPrivateRedis(replicaArgs()));
  admin = new Redis(primary.url);
  admin.on("error", () => {});
  await waitFor(async () => (await listedReplicas()).length === 2, { timeoutMs: 15_000, what: "both replicas attached" });
  db = await createTestDb();
  const password = newWorkerPassword();
  await recordWorkerInvite(db.db, { keyPrefix: PREFIX, workerId: "rep-w1", models: ["m"], passwordSha256: redisPasswordSha256(password) });
  await inviteWorker(admin, { prefix: PREFIX, workerId: "rep-w1", secretKey: "k".repeat(32), models: ["m"], password });
  for (const r of replicas) await observer(r.port);
}, 60_000);

afterAll(async () => {
  for (const o of observers.values()) o.disconnect();
  admin?.disconnect();
  for (const r of replicas) await r.stop().catch(() => {});
  await primary?.stop();
  await db?.drop();
});

describe("InviteKeeper and the replicas", () => {
  it("keeps one connection per replica across passes, connects again to a replica that restarted (and puts its ACL users back), closes those of replicas gone and all of them at close", async () => {
    const keeper = new InviteKeeper({ redis: admin, db: db.db, prefix: PREFIX, log: silentLogger, metrics: new RouterMetrics() });
    try {
      const before = await Promise.all(replicas.map((r) => connectionsReceived(r.port)));
      for (let pass = 0; pass < 6; pass++) expect(await keeper.repair()).toMatchObject({ usersRestored: 0, usersRemoved: 0 });
      const after = await Promise.all(replicas.map((r) => connectionsReceived(r.port)));
      // One connection per replica for all six passes, still open.
      expect(after.map((n, i) => n - before[i]!)).toEqual([1, 1]);
      for (const r of replicas) expect(await otherClients(r.port)).toBe(1);

      // A replica restarts: its connection ends, its ACL users are gone.
      const [first, second] = replicas as [PrivateRedis, PrivateRedis];
      await first.stop();
      replicas[0] = await startPrivateRedis(replicaArgs(), { port: first.port });
      const o = await observer(first.port);
      await waitFor(async () => (await listedReplicas()).includes(first.port), { timeoutMs: 15_000, what: "the restarted replica attached again" });
      expect(((await o.call("ACL", "USERS")) as string[]).map(String)).not.toContain(USER);
      const base = await connectionsReceived(first.port);
      expect(await keeper.repair()).toMatchObject({ usersRestored: 1, workers: ["rep-w1"] });
      expect(((await o.call("ACL", "USERS")) as string[]).map(String)).toContain(USER);
      for (let pass = 0; pass < 3; pass++) expect(await keeper.repair()).toMatchObject({ usersRestored: 0 });
      expect((await connectionsReceived(first.port)) - base).toBe(1);
      expect(await otherClients(first.port)).toBe(1);

      // A replica leaves (made a primary of its own): the keeper lets its connection go.
      await observers.get(second.port)!.call("REPLICAOF", "NO", "ONE");
      await waitFor(async () => !(await listedReplicas()).includes(second.port), { timeoutMs: 15_000, what: "the primary to drop the replica" });
      await keeper.repair();
      await waitFor(async () => (await otherClients(second.port)) === 0, { what: "the keeper's connection to the departed replica closed" });
      expect(await otherClients(first.port)).toBe(1);
    } finally {
      await keeper.close();
    }
    // Shutdown closes what was left.
    await waitFor(async () => (await otherClients(replicas[0]!.port)) === 0, { what: "the keeper's connections closed at close()" });
  }, 60_000);
});
