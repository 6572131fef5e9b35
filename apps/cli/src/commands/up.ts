// `switchyard up`: the whole fabric on one machine — embedded PostgreSQL, the
// in-process registry, a router on 127.0.0.1:8080 and a local worker serving
// SmolLM2 (chat) and MiniLM (embeddings) from the Candle engine. First start creates tenant `local` and an API key, saved under the
// data directory so later starts reuse it.
//
// `--processes N` (or router.processes; default 1): N router processes
// under the supervisor of `switchyard router --processes` (processes.ts),
// sharing the listener. In-process stores cannot be shared between
// processes, so they run on Redis — the configured one, else a private
// redis-server (private-redis.ts) — and the embedded PostgreSQL. The default
// stays one process: it needs nothing but Node on a fresh clone, and on one
// machine the local worker, not the router, is what a request waits for.
import { randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { chmod, mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import { createKey, createTenant, findTenant, hashKey, lookupKeyByHash, type Db } from "@switchyard/db";
import { balancedRanges, ggufLayout, resolveModel, startAgent, type AgentHandle, type AgentOptions } from "@switchyard/agent";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { createLogger, isRouterProcess, redisTarget, startRouter, superviseRouters, type Config } from "@switchyard/router";
import { connectRedis, describeRedisTarget, MemoryRegistryStore, RedisRegistryStore, type RedisTarget, type RegistryStore } from "@switchyard/state";
import { configFrom, openDb } from "../context.ts";
import { findOnPath, noRedisServer, startPrivateRedis, type PrivateRedis } from "../private-redis.ts";
import { untilSignal } from "../signals.ts";
import { UsageError } from "../usage.ts";
import { databaseUrlFile } from "./db.ts";
import { runRouterProcess } from "./router.ts";

/** Set by `up` in the router processes it forks: their database is its embedded one. */
const EMBEDDED_DB_ENV = "SWITCHYARD_UP_EMBEDDED_DATABASE";

/** --processes, else router.processes, else 1 (see the top of this file). */
export function upProcesses(flag: string | undefined, config: Pick<Config, "router">): number {
  if (flag !== undefined) {
    const n = Number(flag);
    if (!/^\d{1,3}$/.test(flag) || n < 1 || n > 512) throw new UsageError(`up: --processes takes a whole number from 1 to 512, got '${flag}'`);
    return n;
  }
  return config.router.processes ?? 1;
}

async function ensureLocalKey(db: Db, home: string): Promise<{ key: string; created: boolean }> {
  const keyFile = path.join(home, "api-key");
  if (existsSync(keyFile)) {
    const key = (await readFile(keyFile, "utf8")).trim();
    const owner = await lookupKeyByHash(db, hashKey(key));
    if (owner && !owner.revoked) return { key, created: false };
  }
  let tenant = await findTenant(db, "local");
  if (!tenant) {
    const r = await createTenant(db, "local");
    if (!r.ok) throw new Error("could not create tenant 'local'");
    tenant = r.tenant;
  }
  const { key } = await createKey(db, tenant.id, "up");
  await writeFile(keyFile, key + "\n", { mode: 0o600 });
  return { key, created: true };
}

/** `--split N`: N shards of the model, 2 ≤ N ≤ its blocks. */
export function parseSplit(spec: string | undefined): number | undefined {
  if (spec === undefined) return undefined;
  const n = Number(spec);
  if (!/^\d{1,3}$/.test(spec) || n < 2) throw new UsageError(`up: --split must be a number of shards, 2 or more (got '${spec}')`);
  return n;
}

/**
 * The local shards of `--split N`: the chat model's blocks cut into N ranges
 * of about equal compute (the last one's share counts the output head:
 * balancedRanges), one worker each (the first also serves the other models, e.g.
 * embeddings); the router places them into a pipeline like any shards.
 */
async function startShards(n: number, models: string[], common: Omit<AgentOptions, "models" | "workerId" | "layers">, step: (msg: string) => void): Promise<AgentHandle[]> {
  const resolved = await Promise.all(models.map((m) => resolveModel(m)));
  const llm = resolved.find((m) => m.kind === ModelKind.LLAMA_GGUF);
  if (!llm) throw new UsageError("up: --split needs a llama (GGUF) model among --model");
  const layout = await ggufLayout(llm.path);
  const blocks = layout.blocks;
  if (n > blocks) throw new UsageError(`up: --split ${n}: ${llm.name} has only ${blocks} blocks`);
  const others = models.filter((_, i) => resolved[i] !== llm);
  const ranges = balancedRanges(layout, n);
  step(`splitting ${llm.name} (${blocks} blocks) into ${n} local shards: ${ranges.map((r) => `${r.start}-${r.end}`).join(", ")}`);
  return Promise.all(
    ranges.map((layers, i) => startAgent({ ...common, models: i === 0 ? [llm.name, ...others] : [llm.name], workerId: `local-shard-${i}`, layers })),
  );
}

export async function upCommand(flags: { config?: string; model?: string[]; device?: string; "no-worker"?: boolean; split?: string; processes?: string }): Promise<number> {
  const config = configFrom(flags);
  // A router process forked by the supervisor below re-runs this command line: it only serves.
  if (isRouterProcess()) return runRouterProcess(config, { embeddedDatabase: process.env[EMBEDDED_DB_ENV] === "1" });
  const split = parseSplit(flags.split);
  const processes = upProcesses(flags.processes, config);
  // Checked before anything starts: N processes share state through Redis.
  const configuredRedis = redisTarget(config);
  const redisServerBin = processes > 1 && !configuredRedis ? findOnPath("redis-server") : undefined;
  if (processes > 1 && !configuredRedis && !redisServerBin) throw noRedisServer(processes);
  // The router and the local worker share a secret made for this run.
  config.workers.token ??= randomBytes(24).toString("base64url");
  await mkdir(config.home, { recursive: true });
  step(`starting embedded PostgreSQL in ${path.resolve(config.home, "pg")}`);
  const db = await openDb(config, { migrate: true, quiet: true, createEmbedded: true });
  // Finance reaches the ledger with this URL (psql, switchyard psql); the port is random.
  const urlFile = databaseUrlFile(config);
  await writeFile(urlFile, db.url + "\n", { mode: 0o600 });
  await chmod(urlFile, 0o600);
  step(`database migrated: ${db.url}  (saved in ${urlFile}; 'switchyard psql' opens it)`);
  const { key, created } = await ensureLocalKey(db.db, config.home);
  if (processes > 1) return upProcessesRun(config, flags, { db, key, created, processes, split, ...(configuredRedis ? { configuredRedis } : { redisServerBin: redisServerBin! }) });
  const registry = new MemoryRegistryStore();
  const router = await startRouter(config, { registry, db, embeddedDatabase: !config.database.url });
  banner(router.url, router.adminUrl, key, created, config.home);
  const agents = await startWorkers(flags, config, registry, split, step, async (agents) => {
    await router.deps.directory.refresh();
    if (split) step(`pipeline: ${router.deps.directory.pipelines(agents[0]!.models[0]!.name).map((p) => p.stages.length + 1).join(", ") || "none"} shards`);
  });
  tryLine(router.url, key);
  const sig = await untilSignal();
  step(`${sig}: shutting down`);
  await Promise.all(agents.map((a) => a.stop()));
  await router.close();
  await db.close();
  await db.stopEmbedded();
  return 0;
}

const step = (msg: string) => process.stderr.write(`» ${msg}\n`);

function banner(url: string, adminUrl: string, key: string, created: boolean, home: string, extra: string[] = []): void {
  process.stderr.write(
    [
      "",
      `Switchyard router: ${url}  (metrics: ${adminUrl}/metrics)`,
      ...extra,
      `API key for tenant 'local'${created ? " (new)" : ""}: ${key}`,
      `  saved in ${path.resolve(home, "api-key")}`,
      "",
    ].join("\n"),
  );
}

function tryLine(url: string, key: string): void {
  process.stderr.write(
    [
      "",
      `Try: curl -s ${url}/v1/chat/completions -H "Authorization: Bearer ${key}" -H "Content-Type: application/json" \\`,
      `       -d '{"model":"smollm2-135m-instruct","messages":[{"role":"user","content":"Say hello"}]}'`,
      "",
    ].join("\n"),
  );
}

/** The local worker (or --split shards), heartbeating into `registry`; `seen` makes the router(s) see them ready. */
async function startWorkers(
  flags: { model?: string[]; device?: string; "no-worker"?: boolean },
  config: Config,
  registry: RegistryStore,
  split: number | undefined,
  log: (msg: string) => void,
  seen: (agents: AgentHandle[]) => Promise<void>,
): Promise<AgentHandle[]> {
  const agents: AgentHandle[] = [];
  if (flags["no-worker"]) {
    log("no local worker (--no-worker): /v1/models lists only remote workers");
    return agents;
  }
  log("starting the local worker (models are fetched and the engine is built on first run)");
  const models = flags.model?.length ? flags.model : ["smollm2-135m-instruct", "all-minilm-l6-v2"];
  const common = {
    registry,
    token: config.workers.token!,
    device: (flags.device ?? "auto") as "auto",
    log: (msg: string, fields?: Record<string, unknown>) => {
      if (msg === "engine" || msg === "heartbeat failed") return;
      log(`worker: ${msg}${fields ? " " + JSON.stringify(fields) : ""}`);
    },
  };
  if (split) agents.push(...(await startShards(split, models, common, log)));
  else agents.push(await startAgent({ ...common, models, workerId: "local" }));
  for (const agent of agents) {
    try {
      await agent.supervisor.whenReady();
    } catch (err) {
      await Promise.all(agents.map((a) => a.stop()));
      throw new UsageError(`up: ${(err as Error).message}`);
    }
    // Make the router see `ready` now rather than at its next poll.
    await agent.heartbeat();
  }
  await seen(agents);
  for (const agent of agents) log(`local worker ready on ${agent.supervisor.device}: ${agent.models.map((m) => m.name).join(", ")}${split ? ` (${agent.id})` : ""}`);
  return agents;
}

/**
 * `up --processes N`: the routers run as N processes on Redis (the
 * configured one, else a private redis-server) and the embedded
 * PostgreSQL; this process supervises them, runs the local worker and,
 * once they have drained, stops the worker, the redis-server and Postgres.
 */
async function upProcessesRun(
  config: Config,
  flags: { model?: string[]; device?: string; "no-worker"?: boolean },
  opts: { db: Awaited<ReturnType<typeof openDb>>; key: string; created: boolean; processes: number; split?: number; configuredRedis?: RedisTarget; redisServerBin?: string },
): Promise<number> {
  const { db, processes } = opts;
  let server: PrivateRedis | undefined;
  let target: RedisTarget;
  if (opts.configuredRedis) {
    target = opts.configuredRedis;
    step(`${processes} router processes share the configured Redis: ${describeRedisTarget(target)}`);
  } else {
    try {
      server = await startPrivateRedis(opts.redisServerBin!, config.home, step);
    } catch (err) {
      await db.close();
      await db.stopEmbedded();
      throw new UsageError(`up: ${(err as Error).message}`);
    }
    target = { url: server.url };
    step(`private redis-server for the ${processes} router processes: pid ${server.pid} on 127.0.0.1:${server.port}, append-only file in ${server.dir} (what a killed up left there is drained into Postgres)`);
    // The forked routers read their Redis from the environment, like `switchyard router`.
    process.env.REDIS_URL = server.url;
  }
  process.env.DATABASE_URL = db.url;
  process.env.SWITCHYARD_WORKER_TOKEN = config.workers.token!;
  if (!config.database.url) process.env[EMBEDDED_DB_ENV] = "1";
  const redis = connectRedis(target, { readyCheck: false });
  redis.on("error", () => {}); // surfaced through heartbeat failures
  const registry = new RedisRegistryStore(redis, config.redis.keyPrefix);
  const cleanup = async () => {
    redis.disconnect();
    await server?.stop();
    await db.close();
    await db.stopEmbedded();
  };

  let stopNow!: () => void;
  const stopped = new Promise<string>((r) => (stopNow = () => r("stop")));
  let force = () => {};
  const signal = untilSignal({
    onSecond: (s) => {
      process.stderr.write(`${s} again: stopping now, without waiting for the drain\n`);
      force();
      // Its own process group: a Ctrl-C never reached it.
      if (server) {
        try {
          process.kill(server.pid, "SIGKILL");
        } catch {
          // gone
        }
      }
    },
  });
  let onUp!: (info: { url: string; adminUrl: string; pids: number[] }) => void;
  const up = new Promise<{ url: string; adminUrl: string; pids: number[] }>((r) => (onUp = r));
  const supervised = superviseRouters(config, {
    processes,
    log: createLogger(config.log.level, { service: "router" }),
    untilStop: Promise.race([signal, stopped]),
    onForce: (kill) => (force = kill),
    onUp,
  });
  const first = await Promise.race([up, supervised]);
  if (typeof first === "number") {
    // They failed to start (the supervisor said why), or a signal came first.
    await cleanup();
    return first;
  }
  banner(first.url, first.adminUrl, opts.key, opts.created, config.home, [`  ${processes} router processes (pids ${first.pids.join(", ")}) share the port; a dead one is restarted`]);
  let agents: AgentHandle[] = [];
  try {
    agents = await startWorkers(flags, config, registry, opts.split, step, () => routersSee(first.adminUrl, flags["no-worker"] ? 0 : opts.split ?? 1));
  } catch (err) {
    stopNow();
    await supervised;
    await cleanup();
    throw err;
  }
  tryLine(first.url, opts.key);
  const sig = await Promise.race([signal, supervised.then(() => undefined)]);
  if (sig) step(`${sig}: shutting down (the router processes drain first)`);
  const code = await supervised;
  await Promise.all(agents.map((a) => a.stop()));
  await cleanup();
  return code;
}

/** Until every router process lists `n` workers (their registry poll), at most 10 s: the first request then finds the worker. */
async function routersSee(adminUrl: string, n: number): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    try {
      const r = (await (await fetch(`${adminUrl}/readyz`)).json()) as { processes?: Array<{ workers?: number }> };
      if (r.processes?.length && r.processes.every((p) => (p.workers ?? 0) >= n)) return;
    } catch {
      // the admin port answers once the processes have started
    }
    await new Promise((r) => setTimeout(r, 100));
  }
}
