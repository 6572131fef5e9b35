// Config and database access shared by the commands.
import { connectDb, runMigrations, startEmbeddedPostgres, type DbHandle } from "@switchyard/db";
import { existsSync } from "node:fs";
import path from "node:path";
import { ConfigError, loadConfig, type Config } from "@switchyard/router";

export function configFrom(flags: { config?: string | undefined }): Config {
  return loadConfig({ file: flags.config, env: process.env });
}

/**
 * Opens the configured database. Without database.url: the embedded one
 * `switchyard up` made under <home>/pg — only `up` (and `router --embedded`)
 * may create it, so an admin command or a migration job missing its
 * DATABASE_URL stops instead of quietly working on a fresh local database.
 */
export async function openDb(config: Config, opts: { migrate?: boolean; quiet?: boolean; createEmbedded?: boolean } = {}): Promise<DbHandle & { stopEmbedded(): Promise<void> }> {
  let url = config.database.url;
  let stopEmbedded = async () => {};
  if (!url) {
    const dir = path.resolve(config.home, "pg");
    if (!opts.createEmbedded && !existsSync(path.join(dir, "PG_VERSION"))) {
      throw new ConfigError(`database.url is not set (DATABASE_URL) and there is no embedded database under ${dir}: set DATABASE_URL to your PostgreSQL, or run 'switchyard up' first for the one-machine mode`);
    }
    if (!opts.createEmbedded) process.stderr.write(`» no database.url: using the embedded PostgreSQL of 'switchyard up' in ${dir}\n`);
    else if (!opts.quiet) process.stderr.write(`using embedded PostgreSQL in ${dir}\n`);
    const pg = await startEmbeddedPostgres(config.home);
    url = pg.url;
    stopEmbedded = pg.stop;
  }
  if (opts.migrate) await runMigrations(url);
  const handle = connectDb(url, { max: 4 });
  return { ...handle, stopEmbedded };
}
