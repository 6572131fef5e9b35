// Starts a real router (real Redis registry, real Postgres) for a test file,
// with a tenant and key of its own.
import { createKey, createTenant } from "@switchyard/db";
import { RedisRegistryStore } from "@switchyard/state";
import { createLogger, loadConfig, startRouter, type RouterHandle, silentLogger } from "@switchyard/router";
import { createTestDb, createTestRedis, REDIS_URL, type TestDb, type TestRedis } from "./env.ts";

export interface RouterFixture {
  router: RouterHandle;
  db: TestDb;
  redis: TestRedis;
  registry: RedisRegistryStore;
  key: string;
  tenantId: number;
  close(): Promise<void>;
}

export async function startTestRouter(overrides: Record<string, unknown> = {}): Promise<RouterFixture> {
  const db = await createTestDb();
  const redis = await createTestRedis();
  const config = loadConfig({
    env: {},
    overrides: {
      "router.port": 0,
      "router.adminPort": 0,
      "redis.url": REDIS_URL,
      "redis.keyPrefix": redis.prefix,
      "registry.pollMs": 50,
      "router.keyCacheMs": 200,
      ...overrides,
    },
  });
  // A second router on the first one's registry: pass its redis.keyPrefix.
  const registry = new RedisRegistryStore(redis.redis, (overrides["redis.keyPrefix"] as string | undefined) ?? redis.prefix);
  // SY_TEST_LOG=debug|info|warn shows the router's log lines while debugging a test.
  const level = process.env.SY_TEST_LOG as "debug" | "info" | "warn" | undefined;
  const router = await startRouter(config, { registry, db, log: level ? createLogger(level, { service: "router" }) : silentLogger });
  const t = await createTenant(db.db, "acme");
  if (!t.ok) throw new Error("tenant");
  const { key } = await createKey(db.db, t.tenant.id);
  return {
    router,
    db,
    redis,
    registry,
    key,
    tenantId: t.tenant.id,
    close: async () => {
      await router.close();
      await db.drop();
      await redis.cleanup();
    },
  };
}
