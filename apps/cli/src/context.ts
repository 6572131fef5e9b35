// Config and database access shared by the commands.
import { connectDb, runMigrations, startEmbeddedPostgres, type DbHandle } from "@switchyard/db";
import { loadConfig, type Config } from "@switchyard/router";

export function configFrom(flags: { config?: string | undefined }): Config {
  return loadConfig({ file: flags.config, env: process.env });
}

/** Opens the configured database (starting the embedded one if needed). */
export async function openDb(config: Config, opts: { migrate?: boolean; quiet?: boolean } = {}): Promise<DbHandle & { stopEmbedded(): Promise<void> }> {
  let url = config.database.url;
  let stopEmbedded = async () => {};
  if (!url) {
    if (!opts.quiet) process.stderr.write(`using embedded PostgreSQL in ${config.home}/pg\n`);
    const pg = await startEmbeddedPostgres(config.home);
    url = pg.url;
    stopEmbedded = pg.stop;
  }
  if (opts.migrate) await runMigrations(url);
  const handle = connectDb(url, { max: 4 });
  return { ...handle, stopEmbedded };
}
