// The production topology the security tests attack: a router in invite mode
// (workers.secretKey) on a password-protected Redis of its own, workers
// invited with their own ACL users, a tenant with a key, a scratch database.
import { Redis } from "ioredis";
import { createKey, createTenant } from "@switchyard/db";
import { inviteWorker, RedisRegistryStore, type Invite } from "@switchyard/state";
import { createLogger, loadConfig, startRouter, type RouterHandle } from "@switchyard/router";
import { createTestDb, type TestDb } from "../helpers/env.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";

export const SECRET_KEY = "routers-secret-key-for-security-tests-0123";
export const PREFIX = "sy:";

export interface Fabric {
  redis: PrivateRedis;
  admin: Redis;
  db: TestDb;
  router: RouterHandle;
  apiKey: string;
  /** Every line the router logged, parsed. */
  logs: Array<{ level: string; msg: string; [k: string]: unknown }>;
  /** Invites `workerId` for `models`; its registry store connects as the worker's own ACL user. */
  invite(workerId: string, models: string[]): Promise<{ invite: Invite; store: RedisRegistryStore; conn: Redis }>;
  chat(model: string, headers?: Record<string, string>): Promise<Response>;
  close(): Promise<void>;
}

export async function startFabric(overrides: Record<string, unknown> = {}): Promise<Fabric> {
  const redis = await startPrivateRedis(["--requirepass", "admin-pass"]);
  const admin = new Redis(redis.url);
  const db = await createTestDb();
  const logs: Fabric["logs"] = [];
  const config = loadConfig({
    env: {},
    overrides: { "router.port": 0, "router.adminPort": 0, "redis.url": redis.url, "registry.pollMs": 50, "leases.pollMs": 50, "workers.secretKey": SECRET_KEY, ...overrides },
  });
  const router = await startRouter(config, { db, log: createLogger("warn", { service: "router" }, (l) => logs.push(JSON.parse(l) as Fabric["logs"][number])) });
  const t = await createTenant(db.db, "victim-tenant");
  if (!t.ok) throw new Error("tenant");
  const apiKey = (await createKey(db.db, t.tenant.id)).key;
  const conns: Redis[] = [];
  return {
    redis,
    admin,
    db,
    router,
    apiKey,
    logs,
    invite: async (workerId, models) => {
      const invite = await inviteWorker(admin, { prefix: PREFIX, workerId, secretKey: SECRET_KEY, models });
      const conn = new Redis({ port: redis.port, host: "127.0.0.1", username: invite.redisUser, password: invite.redisPassword, enableReadyCheck: false, maxRetriesPerRequest: 1 });
      conn.on("error", () => {});
      conns.push(conn);
      return { invite, store: new RedisRegistryStore(conn, PREFIX), conn };
    },
    chat: (model, headers = {}) =>
      fetch(`${router.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", ...headers },
        body: JSON.stringify({ model, messages: [{ role: "user", content: "a tenant's private prompt" }] }),
      }),
    close: async () => {
      await router.close();
      for (const c of conns) c.disconnect();
      admin.disconnect();
      await redis.stop();
      await db.drop();
    },
  };
}
