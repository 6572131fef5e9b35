// A throwaway database (migrated) and Redis key prefix for one bench run, so
// runs never collide with each other or with the tests; dropped at the end.
import { Redis } from "ioredis";
import type { Proc } from "#testkit/procs";
import postgres from "postgres";
import { connectDb, createKey, createTenant, runMigrations, setRateLimit } from "@switchyard/db";
import { MAX_RATE_REQUESTS, MAX_RATE_TOKENS } from "@switchyard/state";

export const PG = process.env.BENCH_DATABASE_URL ?? process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";

export interface BenchScratch {
  /** Also the database name. */
  tag: string;
  /** Redis key prefix of this run. */
  prefix: string;
  dbUrl: string;
  /** One API key per tenant name, tenants created now. */
  tenantKeys(names: string[]): Promise<Record<string, string>>;
  /** The API key of one new tenant. */
  /** `rateLimits`: a tenant-wide limit at the stores' maxima, so every request is counted in Redis (taken and settled) and none refused. */
  tenantKey(name: string, opts?: { rateLimits?: boolean }): Promise<string>;
  /** Drops the database and deletes the run's Redis keys (when given a connection). */
  drop(redis?: Redis): Promise<void>;
}

export async function benchScratch(kind: string): Promise<BenchScratch> {
  const tag = `sy_bench_${kind}${Date.now().toString(36)}`;
  const admin = postgres(PG, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${tag}`);
  const dbUrl = Object.assign(new URL(PG), { pathname: `/${tag}` }).toString();
  const drop = async (redis?: Redis) => {
    await admin.unsafe(`drop database if exists ${tag} with (force)`).catch(() => {});
    await admin.end();
    if (redis) {
      const keys = await redis.keys(`${tag}:*`).catch(() => [] as string[]);
      if (keys.length) await redis.del(...keys).catch(() => {});
    }
  };
  try {
    await runMigrations(dbUrl);
  } catch (err) {
    await drop();
    throw err;
  }
  const tenantKeys = async (names: string[], opts: { rateLimits?: boolean } = {}) => {
    const db = connectDb(dbUrl, { max: 1 });
    try {
      const keys: Record<string, string> = {};
      for (const name of names) {
        const t = await createTenant(db.db, name);
        if (!t.ok) throw new Error(`tenant ${name}`);
        keys[name] = (await createKey(db.db, t.tenant.id)).key;
        if (opts.rateLimits) await setRateLimit(db.db, { tenantId: t.tenant.id, requestsPerMinute: MAX_RATE_REQUESTS, tokensPerMinute: MAX_RATE_TOKENS });
      }
      return keys;
    } finally {
      await db.close();
    }
  };
  return {
    tag,
    prefix: `${tag}:`,
    dbUrl,
    drop,
    tenantKeys,
    tenantKey: async (name, opts) => (await tenantKeys([name], opts))[name]!,
  };
}

/** A bench's end: its processes stopped, then its database dropped and its Redis keys deleted. */
export async function endBench(procs: Proc[], scratch: BenchScratch): Promise<void> {
  await Promise.all(procs.map((p) => p.stop()));
  const r = new Redis(process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379");
  await scratch.drop(r);
  r.disconnect();
}
