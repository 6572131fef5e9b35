// Test isolation: every test file gets its own Postgres database and Redis
// key prefix on the shared servers, and drops them afterwards.
import { randomBytes } from "node:crypto";
import postgres from "postgres";
import { Redis } from "ioredis";
import { connectDb, runMigrations, type DbHandle } from "@switchyard/db";

export const PG_ADMIN_URL = process.env.TEST_DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres";
export const REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";

export function uniqueName(kind: string): string {
  return `sy_${kind}_${Date.now().toString(36)}_${randomBytes(3).toString("hex")}`;
}

export interface TestDb extends DbHandle {
  name: string;
  drop(): Promise<void>;
}

export async function createTestDb(): Promise<TestDb> {
  const name = uniqueName("test");
  const admin = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${name}`);
  await admin.end();
  const url = new URL(PG_ADMIN_URL);
  url.pathname = `/${name}`;
  await runMigrations(url.toString());
  const handle = connectDb(url.toString(), { max: 5 });
  return {
    ...handle,
    name,
    drop: async () => {
      await handle.close();
      const a = postgres(PG_ADMIN_URL, { max: 1, onnotice: () => {} });
      await a.unsafe(`drop database if exists ${name} with (force)`);
      await a.end();
    },
  };
}

export interface TestRedis {
  redis: Redis;
  prefix: string;
  cleanup(): Promise<void>;
}

export async function createTestRedis(): Promise<TestRedis> {
  const redis = new Redis(REDIS_URL, { maxRetriesPerRequest: 2 });
  const prefix = `${uniqueName("r")}:`;
  return {
    redis,
    prefix,
    cleanup: async () => {
      let cursor = "0";
      do {
        const [next, keys] = await redis.scan(cursor, "MATCH", `${prefix}*`, "COUNT", 1000);
        cursor = next;
        if (keys.length) await redis.del(...keys);
      } while (cursor !== "0");
      redis.disconnect();
    },
  };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export async function waitFor<T>(fn: () => T | Promise<T>, opts: { timeoutMs?: number; intervalMs?: number; what?: string | (() => string) } = {}): Promise<NonNullable<T>> {
  const deadline = Date.now() + (opts.timeoutMs ?? 5000);
  for (;;) {
    const v = await fn();
    if (v) return v as NonNullable<T>;
    if (Date.now() > deadline) {
      const what = typeof opts.what === "function" ? opts.what() : (opts.what ?? "condition");
      throw new Error(`timed out waiting for ${what}`);
    }
    await sleep(opts.intervalMs ?? 20);
  }
}
