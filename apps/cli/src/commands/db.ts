// `switchyard db url` and `switchyard psql`: finance and operators reach the
// database the ledger lives in — the configured one, or the embedded one
// `switchyard up` runs (random port, so nothing else would tell them).
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { runningEmbeddedUrl } from "@switchyard/db";
import type { Config } from "@switchyard/router";
import { configFrom } from "../context.ts";
import { UsageError } from "../usage.ts";

/** The file `up` writes the embedded database's URL to (mode 600). */
export function databaseUrlFile(config: Config): string {
  return path.resolve(config.home, "database-url");
}

/** The URL of the database this configuration uses; an embedded one only while it runs. */
function databaseUrl(config: Config): string {
  if (config.database.url) return config.database.url;
  const running = runningEmbeddedUrl(config.home);
  if (running) return running;
  const file = databaseUrlFile(config);
  const last = existsSync(file) ? ` (the last one was ${readFileSync(file, "utf8").trim()})` : "";
  throw new Error(`no database.url is configured and the embedded PostgreSQL under ${path.resolve(config.home, "pg")} is not running${last}: start 'switchyard up', or set DATABASE_URL`);
}

export async function dbCommand(rest: string[], flags: { config?: string }): Promise<number> {
  if (rest[0] !== "url" || rest.length > 1) throw new UsageError(`db: expected 'db url', got 'db ${rest.join(" ")}'`);
  process.stdout.write(databaseUrl(configFrom(flags)) + "\n");
  return 0;
}

/** Opens psql on the database (arguments after `psql` go to psql). */
export async function psqlCommand(rest: string[], flags: { config?: string }): Promise<number> {
  const url = databaseUrl(configFrom(flags));
  const child = spawn("psql", [url, ...rest], { stdio: "inherit" });
  return await new Promise<number>((resolve, reject) => {
    child.once("error", (err: NodeJS.ErrnoException) => {
      if (err.code === "ENOENT") reject(new Error("psql is not installed (Debian: apt-get install postgresql-client); 'switchyard db url' prints the URL for any other client"));
      else reject(err);
    });
    child.once("exit", (code, signal) => resolve(code ?? (signal ? 1 : 0)));
  });
}
