// What this router process is really using — registry, budget store, ledger
// path, database, chain, providers — said once at start (one log line) and
// on /readyz, so an operator sees at a glance a router that is not wired the
// way they meant. Never a secret: URLs lose their credentials.
import type { Config } from "../config.ts";

export interface StartupSummary {
  /** "redis" (shared by every router) or "in-process" (this process only). */
  registry: "redis" | "in-process";
  budgets: "redis" | "in-process";
  /** How ledger rows reach Postgres. */
  ledger: "redis-stream" | "in-process-batch";
  /** Where the Redis role lives (host:port, no credentials); absent in-process. */
  redis?: string;
  database: { kind: "external" | "embedded"; host: string; name: string };
  chain: readonly string[];
  providers: string[];
}

/** host:port of a URL, without user or password. */
export function redactedHost(url: string): string {
  try {
    const u = new URL(url);
    return u.port ? `${u.hostname}:${u.port}` : u.hostname;
  } catch {
    return "(unparseable url)";
  }
}

export function startupSummary(
  config: Config,
  parts: { redisUrl?: string; registryShared: boolean; budgetsShared: boolean; databaseUrl: string; embeddedDatabase: boolean },
): StartupSummary {
  let name = "";
  try {
    name = decodeURIComponent(new URL(parts.databaseUrl).pathname.replace(/^\//, "")) || "postgres";
  } catch {
    name = "(unparseable url)";
  }
  return {
    registry: parts.registryShared ? "redis" : "in-process",
    budgets: parts.budgetsShared ? "redis" : "in-process",
    ledger: parts.redisUrl ? "redis-stream" : "in-process-batch",
    // A URL (one node), or "cluster h:p,…" / "sentinel name@h:p,…" (no secrets in those).
    ...(parts.redisUrl ? { redis: parts.redisUrl.includes("://") ? redactedHost(parts.redisUrl) : parts.redisUrl } : {}),
    database: { kind: parts.embeddedDatabase ? "embedded" : "external", host: redactedHost(parts.databaseUrl), name },
    chain: config.routing.chain,
    providers: Object.entries(config.providers)
      .filter(([, v]) => v !== undefined)
      .map(([k]) => k),
  };
}

/**
 * The summary as the public /readyz shows it: the kinds of state, never the
 * addresses of the Redis and Postgres behind the router (those go to the log
 * and the admin port only).
 */
export function publicSummary(s: StartupSummary): Omit<StartupSummary, "redis" | "database"> & { database: { kind: StartupSummary["database"]["kind"] } } {
  const { redis: _redis, database, ...rest } = s;
  return { ...rest, database: { kind: database.kind } };
}
