// `switchyard router`: one stateless router replica, the production command.
// It runs only on shared state — Redis for the registry, budgets and ledger
// buffer, an external Postgres — because a replica that quietly fell back to
// in-process state would keep its own budget counters and see no workers.
// `--embedded` is the explicit exception, for experiments on one machine.
// SIGTERM drains (RouterHandle.close); a second signal stops at once.
import { availableParallelism } from "node:os";
import { ConfigError, createLogger, isRouterProcess, primaryAdminUrl, redisTarget, renderMetrics, serveToPrimary, startRouter, superviseRouters, type Config } from "@switchyard/router";
import { UsageError } from "../usage.ts";
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

/** --processes, else router.processes, else one per core. */
export function routerProcesses(flag: string | undefined, config: Config): number {
  if (flag !== undefined) {
    const n = Number(flag);
    if (!Number.isInteger(n) || n < 1 || n > 512) throw new UsageError(`router: --processes takes a whole number from 1 to 512, got '${flag}'`);
    return n;
  }
  return config.router.processes ?? availableParallelism();
}

/** One of --processes N (here or under `switchyard up`): the primary serves the admin port and says when to drain. */
export async function runRouterProcess(config: Config, opts: { embeddedDatabase?: boolean } = {}): Promise<number> {
  const adminUrl = primaryAdminUrl();
  const router = await startRouter(config, { adminListener: false, ...(adminUrl ? { adminUrl } : {}), ...(opts.embeddedDatabase ? { embeddedDatabase: true } : {}) });
  await serveToPrimary(router, () => renderMetrics(router.deps));
  await router.close({ graceMs: config.router.drainGraceMs });
  return 0;
}

export async function routerCommand(flags: { config?: string; embedded?: boolean; processes?: string }): Promise<number> {
  const config = configFrom(flags);
  const processes = routerProcesses(flags.processes, config);
  if (flags.embedded) {
    // In-process state cannot be shared between processes: one router.
    if (processes > 1 && flags.processes !== undefined) process.stderr.write("» --embedded: one router process (its state lives in that process)\n");
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
  if (isRouterProcess()) return runRouterProcess(config);
  if (processes > 1) {
    let force = () => {};
    const stop = untilSignal({
      onSecond: (s) => {
        process.stderr.write(`${s} again: stopping the router processes now, without waiting for the drain\n`);
        force();
      },
    });
    return superviseRouters(config, { processes, log: createLogger(config.log.level, { service: "router" }), untilStop: stop, onForce: (kill) => (force = kill) });
  }
  const router = await startRouter(config);
  await untilSignal();
  // Drain (docs/DEPLOY.md): /readyz 503 now, new connections for router.drainGraceMs, in-flight
  // streams up to router.drainMs, the ledger buffer flushed; then exit 0.
  await router.close({ graceMs: config.router.drainGraceMs });
  return 0;
}
