// Joining safely, against a Redis that requires auth (a private instance):
// an invited worker registers and is called with its own secret; it cannot
// touch another worker's record; an uninvited worker cannot register; link-
// local advertised URLs are refused.
import { Redis } from "ioredis";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkAdvertiseUrl } from "@switchyard/agent";
import { inviteWorker, RedisRegistryStore, revokeWorker, workerCallSecret } from "@switchyard/state";
import { loadConfig, silentLogger, startRouter, type RouterHandle } from "@switchyard/router";
import { createKey, createTenant } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { createTestDb, sleep, waitFor, type TestDb } from "../helpers/env.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";

const SECRET_KEY = "routers-secret-key-for-tests-0123";
const PREFIX = "sy:";
let redis: PrivateRedis;
let admin: Redis;
let db: TestDb;
let router: RouterHandle;
let apiKey: string;

beforeAll(async () => {
  redis = await startPrivateRedis(["--requirepass", "admin-pass"]);
  admin = new Redis(redis.url);
  db = await createTestDb();
  const config = loadConfig({ env: {}, overrides: { "router.port": 0, "router.adminPort": 0, "redis.url": redis.url, "registry.pollMs": 50, "workers.secretKey": SECRET_KEY } });
  router = await startRouter(config, { db, log: silentLogger });
  const t = await createTenant(db.db, "joiner");
  if (!t.ok) throw new Error("tenant");
  apiKey = (await createKey(db.db, t.tenant.id)).key;
});

afterAll(async () => {
  await router?.close();
  admin?.disconnect();
  await redis?.stop();
  await db?.drop();
});

function workerRegistry(user?: string, password?: string) {
  const conn = new Redis({ port: redis.port, host: "127.0.0.1", username: user, password, enableReadyCheck: false, maxRetriesPerRequest: 1, lazyConnect: true });
  conn.on("error", () => {});
  return { conn, store: new RedisRegistryStore(conn, PREFIX) };
}

const chat = () =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model: "joined-model", messages: [{ role: "user", content: "hi" }] }),
  });

describe("joining safely", () => {
  it("an invited worker registers, and routers call it with its own derived secret", async () => {
    const invite = await inviteWorker(admin, { prefix: PREFIX, workerId: "gpu-box-1", secretKey: SECRET_KEY, models: ["joined-model"] });
    expect(invite.callSecret).toBe(workerCallSecret(SECRET_KEY, "gpu-box-1"));
    const { conn, store } = workerRegistry(invite.redisUser, invite.redisPassword);
    const w = await new SimWorker({ id: "gpu-box-1", models: ["joined-model"], registry: store, token: invite.callSecret }).start();
    try {
      await waitFor(async () => (await chat()).status === 200, { timeoutMs: 3000, what: "invited worker serving" });
      expect(w.lastRequestHeaders?.authorization).toBe(`Bearer ${invite.callSecret}`);
    } finally {
      await w.stop();
      conn.disconnect();
    }
  });

  it("a worker cannot overwrite or delete another worker's record", async () => {
    const a = await inviteWorker(admin, { prefix: PREFIX, workerId: "box-a", secretKey: SECRET_KEY, models: ["m"] });
    await inviteWorker(admin, { prefix: PREFIX, workerId: "box-b", secretKey: SECRET_KEY, models: ["m"] });
    const adminStore = new RedisRegistryStore(admin, PREFIX);
    const victim = new SimWorker({ id: "box-b", models: ["m"] });
    await victim.start();
    await adminStore.publish(victim.record(), 10_000);
    const { conn, store } = workerRegistry(a.redisUser, a.redisPassword);
    try {
      const forged = { ...victim.record(), url: "http://127.0.0.1:1/evil" };
      expect(await store.publish(forged, 10_000)).toEqual({ ok: false, reason: "owned_by_other" });
      await expect(store.remove("box-b")).rejects.toThrow(/NOPERM/);
      const still = (await adminStore.list()).find((r) => r.id === "box-b");
      expect(still?.url).toBe(victim.url);
      // Its own record is fine.
      expect(await store.publish({ ...victim.record(), id: "box-a" }, 1000)).toEqual({ ok: true });
    } finally {
      conn.disconnect();
      await victim.stop();
      await adminStore.remove("box-b");
    }
  });

  it("an uninvited worker cannot register (no credentials, wrong password, revoked user)", async () => {
    const none = workerRegistry();
    await expect(none.store.publish({ ...new SimWorker({ id: "intruder", models: ["joined-model"] }).record(), url: "http://127.0.0.1:9" }, 10_000)).rejects.toThrow(/NOAUTH|Authentication required/);
    none.conn.disconnect();
    const invite = await inviteWorker(admin, { prefix: PREFIX, workerId: "intruder", secretKey: SECRET_KEY, models: ["m"] });
    const wrong = workerRegistry(invite.redisUser, "not-the-password");
    await expect(wrong.store.publish({ ...new SimWorker({ id: "intruder", models: ["m"] }).record(), url: "http://127.0.0.1:9" }, 10_000)).rejects.toThrow(/WRONGPASS|invalid/i);
    wrong.conn.disconnect();
    expect(await revokeWorker(admin, "intruder")).toBe(true);
    const revoked = workerRegistry(invite.redisUser, invite.redisPassword);
    await expect(revoked.store.publish({ ...new SimWorker({ id: "intruder", models: ["m"] }).record(), url: "http://127.0.0.1:9" }, 10_000)).rejects.toThrow(/WRONGPASS|invalid/i);
    revoked.conn.disconnect();
    await sleep(100);
    expect((await new RedisRegistryStore(admin, PREFIX).list()).find((r) => r.id === "intruder")).toBeUndefined();
  });

  it("a worker presenting the wrong secret is refused by the worker API (and the router fails over)", async () => {
    // A worker configured with the shared token, not its derived secret, refuses the router.
    const invite = await inviteWorker(admin, { prefix: PREFIX, workerId: "misconfigured", secretKey: SECRET_KEY, models: ["lonely-model"] });
    const { conn, store } = workerRegistry(invite.redisUser, invite.redisPassword);
    const w = await new SimWorker({ id: "misconfigured", models: ["lonely-model"], registry: store, token: "some-other-secret" }).start();
    try {
      await waitFor(() => router.deps.directory.all().some((r) => r.id === "misconfigured"));
      const res = await fetch(`${router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
        body: JSON.stringify({ model: "lonely-model", messages: [{ role: "user", content: "hi" }] }),
      });
      expect(res.status).toBe(502);
    } finally {
      await w.stop();
      conn.disconnect();
    }
  });

  it("refuses link-local and metadata advertised URLs", () => {
    for (const bad of ["http://169.254.169.254/", "http://metadata.google.internal/", "http://[fe80::1]:9100", "http://[::ffff:169.254.169.254]/", "ftp://host/", "http://user:pw@host/"]) {
      expect(checkAdvertiseUrl(bad).ok, bad).toBe(false);
    }
    for (const good of ["http://10.0.0.5:9100", "https://gpu1.example.com", "http://127.0.0.1:9100"]) expect(checkAdvertiseUrl(good).ok, good).toBe(true);
  });
});
