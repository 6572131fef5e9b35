// `switchyard router`: one stateless router replica, the production command.
// It runs only on shared state — Redis for the registry, budgets and ledger
// buffer, an external Postgres — because a replica that quietly fell back to
// in-process state would keep its own budget counters and see no workers.
// `--embedded` is the explicit exception, for experiments on one machine.
// SIGTERM drains (RouterHandle.close); a second signal stops at once.
import { ConfigError, redisTarget, startRouter, type Config } from "@switchyard/router";
import { configFrom, openDb } from "../context.ts";
import { untilSignal } from "../signals.ts";

/** What a production router lacks, as lines naming the key and how to set it. */
export function missingProductionState(config: Config): string[] {
  const missing: string[] = [];
  if (!redisTarget(config)) {
    missing.push("redis.url is not set, nor redis.cluster or redis.sentinels + redis.name (config file, REDIS_URL, SWITCHYARD_REDIS__CLUSTER='[\"host:port\",…]')");
  }
  if (!config.database.url) missing.push("database.url is not set (config file, SWITCHYARD_DATABASE__URL or DATABASE_URL)");
  return missing;
}

export async function routerCommand(flags: { config?: string; embedded?: boolean }): Promise<number> {
  const config = configFrom(flags);
  if (flags.embedded) {
    // Local experiments: embedded Postgres (migrated) and, without redis.url, in-process state.
    process.stderr.write("» --embedded: state in this process (and an embedded PostgreSQL) unless redis.url / database.url are set\n");
    const db = config.database.url ? undefined : await openDb(config, { migrate: true, quiet: true, createEmbedded: true });
    const router = await startRouter(config, db ? { db, embeddedDatabase: true } : {});
    await untilSignal();
    await router.close({ graceMs: config.router.drainGraceMs });
    await db?.close();
    await db?.stopEmbedded();
    return 0;
  }
  const missing = missingProductionState(config);
  if (missing.length > 0) {
    throw new ConfigError(
      `switchyard router needs shared state:\n${missing.map((m) => `  ${m}`).join("\n")}\n` +
        "For one machine with embedded state run 'switchyard up' (or 'switchyard router --embedded' to experiment).",
    );
  }
  const router = await startRouter(config);
  await untilSignal();
  // Drain (docs/DEPLOY.md): /readyz 503 now, new connections for router.drainGraceMs, in-flight
  // streams up to router.drainMs, the ledger buffer flushed; then exit 0.
  await router.close({ graceMs: config.router.drainGraceMs });
  return 0;
}
