// Issue 14: a registry poll must not grow with the rest of the keyspace.
// Routers used to find worker keys by SCAN on every poll, and a SCAN walks
// every key Redis holds (stored responses, rate-limit windows, budgets): with
// 200k other keys one poll took 200 round trips and 259 ms. Now workers sit
// in two sets beside their keys (registry/redis.ts), and a poll is two Lua
// calls (the sets' ids with the registry's epoch, then the records) whatever
// else Redis holds. Each test runs its own redis-server
// so INFO commandstats counts only its own commands.
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { invitedIndexKey, inviteKey, inviteWorker, joinRedisUrl, RedisRegistryStore, revokeWorker, workerIndexKey, workerKey } from "@switchyard/state";
import { record } from "../contract/registry.contract.ts";
import { sleep, waitFor } from "../helpers/env.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";

const PREFIX = "sy:";
const OTHER_KEYS = 50_000;

let server: PrivateRedis;
let admin: Redis;
const conns: Redis[] = [];
/** A connection to the test's server, closed after the file. */
const connect = (url = server.url) => {
  const c = new Redis(url, { enableReadyCheck: false });
  conns.push(c);
  return c;
};

/** Calls per command since the server started (INFO commandstats). */
async function calls(): Promise<Record<string, number>> {
  const out: Record<string, number> = {};
  for (const m of (await admin.info("commandstats")).matchAll(/cmdstat_([\w|]+):calls=(\d+)/g)) out[m[1]!] = Number(m[2]);
  return out;
}

const ids = async (store: RedisRegistryStore) => (await store.listing()).workers.map((w) => w.id).sort();

/** Once no SCAN has run for a while: a sweep started beside a listing has ended (the counts, as they are then). */
async function sweepsEnded(): Promise<Record<string, number>> {
  let last = -1;
  return waitFor(
    async () => {
      const now = await calls();
      const ended = now.scan === last;
      last = now.scan ?? 0;
      return ended ? now : undefined;
    },
    { intervalMs: 150, what: "sweeps to end" },
  );
}

beforeAll(async () => {
  server = await startPrivateRedis();
  admin = new Redis(server.url);
  // What a fabric keeps besides its workers: stored responses, windows, budgets.
  await admin.eval(`for i = 1, ${OTHER_KEYS} do redis.call('SET', 'sy:resp:' .. i, 'x') end return 1`, 0);
});

afterAll(async () => {
  for (const c of conns) c.disconnect();
  admin?.disconnect();
  await server?.stop();
});

describe("the registry's listing", () => {
  it("costs the same two commands per poll however many other keys Redis holds, after one sweep", async () => {
    const worker = new RedisRegistryStore(connect(), PREFIX);
    for (const id of ["w-a", "w-b", "w-c"]) expect(await worker.publish(record(id), 60_000)).toEqual({ ok: true });
    const router = new RedisRegistryStore(connect(), PREFIX);
    const before = await calls();
    expect(await ids(router)).toEqual(["w-a", "w-b", "w-c"]);
    // The first listing starts one sweep of the keyspace beside it (workers of an older version write no index entry).
    const swept = await sweepsEnded();
    expect((swept.scan ?? 0) - (before.scan ?? 0)).toBeGreaterThanOrEqual(OTHER_KEYS / 1000);
    for (let i = 0; i < 20; i++) expect(await ids(router)).toEqual(["w-a", "w-b", "w-c"]);
    const after = await calls();
    const delta = (cmd: string) => (after[cmd] ?? 0) - (swept[cmd] ?? 0);
    expect(delta("scan")).toBe(0);
    // Two scripts a poll; the SUNION inside the first counts in commandstats too.
    expect(delta("evalsha")).toBe(40);
    expect(delta("sunion")).toBe(20);
  });

  it("drops an id from the index once its heartbeat expired, in the read that finds it gone", async () => {
    const store = new RedisRegistryStore(connect(), PREFIX);
    await store.publish(record("w-short"), 300);
    expect(await admin.sismember(workerIndexKey(PREFIX), "w-short")).toBe(1);
    expect(await ids(store)).toContain("w-short");
    await sleep(400);
    expect(await ids(store)).not.toContain("w-short");
    expect(await admin.sismember(workerIndexKey(PREFIX), "w-short")).toBe(0);
    // Publishing again puts it back at once.
    await store.publish(record("w-short"), 60_000);
    expect(await ids(store)).toContain("w-short");
    await store.remove("w-short");
    expect(await admin.sismember(workerIndexKey(PREFIX), "w-short")).toBe(0);
    expect(await ids(store)).not.toContain("w-short");
  });

  it("prunes by the id's bytes under a prefix that is not ASCII", async () => {
    const prefix = "réseau-ß:";
    const store = new RedisRegistryStore(connect(), prefix);
    await store.publish(record("w-u"), 300);
    expect(await ids(store)).toEqual(["w-u"]);
    await sleep(400);
    expect(await ids(store)).toEqual([]);
    expect(await admin.smembers(workerIndexKey(prefix))).toEqual([]);
  });

  it("finds a worker that wrote only its key (an older version) at the next sweep", async () => {
    const router = new RedisRegistryStore(connect(), PREFIX, { sweepMs: 500 });
    await ids(router);
    await sweepsEnded();
    await admin.set(workerKey(PREFIX, "w-old"), JSON.stringify(record("w-old")), "PX", 60_000);
    expect(await ids(router)).not.toContain("w-old");
    await sleep(600);
    // The sweep now due runs beside the next listing: its finds show from the one after.
    await waitFor(async () => (await ids(router)).includes("w-old"), { what: "w-old found by the sweep" });
    expect(await admin.sismember(workerIndexKey(PREFIX), "w-old")).toBe(1);
    // sweepMs 0: only the first listing sweeps.
    const once = new RedisRegistryStore(connect(), PREFIX, { sweepMs: 0 });
    await ids(once);
    await sweepsEnded();
    await admin.set(workerKey(PREFIX, "w-old2"), JSON.stringify(record("w-old2")), "PX", 60_000);
    await sleep(50);
    expect(await ids(once)).not.toContain("w-old2");
  });

  it("waits for the first sweep when the sets are empty (a fabric of an older version)", async () => {
    const prefix = "old:";
    await admin.set(workerKey(prefix, "w-1"), JSON.stringify(record("w-1")), "PX", 60_000);
    const router = new RedisRegistryStore(connect(), prefix);
    expect(await ids(router)).toEqual(["w-1"]);
  });

  it("lists an invited worker through the invited set; its ACL user can write neither set", async () => {
    const router = new RedisRegistryStore(connect(), PREFIX, { sweepMs: 0 });
    await ids(router);
    await sweepsEnded(); // swept before the invite: only the invited set can show it
    const invite = await inviteWorker(admin, { prefix: PREFIX, workerId: "w-inv", secretKey: "k".repeat(32), models: ["m1"] });
    const conn = connect(joinRedisUrl(server.url, invite));
    const own = new RedisRegistryStore(conn, PREFIX);
    expect(await own.publish(record("w-inv"), 60_000)).toEqual({ ok: true });
    expect(await ids(router)).toContain("w-inv");
    expect(await admin.sismember(workerIndexKey(PREFIX), "w-inv")).toBe(0);
    // A shared set another worker's listing depends on is not its to change.
    await expect(conn.sadd(workerIndexKey(PREFIX), "ghost")).rejects.toThrow(/NOPERM/);
    await expect(conn.srem(invitedIndexKey(PREFIX), "w-a")).rejects.toThrow(/NOPERM/);
    // Its own key only: another's is refused, as before.
    expect(await own.publish(record("w-a"), 60_000)).toEqual({ ok: false, reason: "owned_by_other" });
    await revokeWorker(admin, "w-inv", { prefix: PREFIX });
    expect(await admin.sismember(invitedIndexKey(PREFIX), "w-inv")).toBe(0);
    // An invite deleted by hand: its id leaves the invited set once its heartbeat is gone too, not before.
    await inviteWorker(admin, { prefix: PREFIX, workerId: "w-inv2", secretKey: "k".repeat(32), models: ["m1"] });
    await admin.set(workerKey(PREFIX, "w-inv2"), JSON.stringify(record("w-inv2")), "PX", 300);
    await admin.del(inviteKey(PREFIX, "w-inv2"));
    expect(await ids(router)).toContain("w-inv2");
    expect(await admin.sismember(invitedIndexKey(PREFIX), "w-inv2")).toBe(1);
    await sleep(400);
    expect(await ids(router)).not.toContain("w-inv2");
    expect(await admin.sismember(invitedIndexKey(PREFIX), "w-inv2")).toBe(0);
  });
});
