// Wires real parts into createApp and listens. Used by `switchyard router`,
// `switchyard up` and the integration tests.
import { readFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import type { ServerResponse } from "node:http";
import type { AddressInfo, LookupFunction } from "node:net";
import { createAdaptorServer, type ServerType } from "@hono/node-server";
import { randomBytes } from "node:crypto";
import { hostname } from "node:os";
import { connectDb, ensureLedgerPartitionsAhead, insertLedgerRows, insertLedgerTexts, migrationStatus, runMigrations, recordBudgetAlert, startEmbeddedPostgres, type DbHandle, type EmbeddedPg } from "@switchyard/db";
import {
  describeRedisTarget,
  openRedis,
  evictionPolicies,
  evicting,
  RedisTargetError,
  redisTargetEndpoints,
  type RedisLike,
  MemoryBudgetStore,
  MemoryLeaseStore,
  RedisLeaseStore,
  type LeaseStore,
  MemoryRegistryStore,
  MemoryRateLimitStore,
  RedisRateLimitStore,
  RedisBudgetStore,
  RedisIntentJournal,
  RedisRegistryStore,
  MemoryResponseStore,
  RedisResponseStore,
  type BudgetStore,
  type RegistryStore,
} from "@switchyard/state";
import { connectProviders } from "./backends/registry.ts";
import { PostgresBudgets } from "./billing/budgets.ts";
import { BudgetGuard } from "./billing/guard.ts";
import { checkBudgetDay, rebuildBudgetsAfterLoss } from "./billing/reconcile.ts";
import { BatchingLedgerWriter, type LedgerSink } from "./billing/ledger.ts";
import { RedisLedgerBuffer } from "./billing/ledger-stream.ts";
import { OrphanFinisher, type CrashCostLookup } from "./billing/orphans.ts";
import { PostgresPriceBook } from "./billing/prices.ts";
import { BackendChain, workerMayServe, type ProviderBackends } from "./routing/chain.ts";
import { createAdminApp, createApp } from "./app.ts";
import { PostgresKeyStore } from "./auth/key-store.ts";
import { KeyResolver } from "./auth/resolver.ts";
import { WorkerConnections } from "./backends/worker/client.ts";
import { workerOrPipeline } from "./pipelines/backend.ts";
import { redisTarget, type Config } from "./config.ts";
import type { AppDeps } from "./deps.ts";
import { createLogger, type Logger } from "./observability/log.ts";
import { RouterMetrics } from "./observability/metrics.ts";
import { RuntimeMetrics } from "./observability/runtime.ts";
import { sharedCheck } from "./routes/health/readyz.ts";
import { InviteKeeper } from "./routing/invite-keeper.ts";
import { WorkerDirectory } from "./routing/directory.ts";
import { WorkerUrlPolicy } from "./routing/worker-url.ts";
import { WorkerHealth } from "./routing/health.ts";
import { RouteScorer } from "./routing/scorer.ts";
import { AdmissionGate } from "./admission/gate.ts";
import { LeaseDirectory } from "./leases/directory.ts";
import { PostgresLeaseAudit } from "./leases/audit.ts";
import { LeaseService } from "./leases/service.ts";
import { redactedHost, startupSummary } from "./observability/summary.ts";
import { PostgresRateLimits } from "./ratelimit/limits.ts";
import { RateLimiter } from "./ratelimit/limiter.ts";
import { startTracing } from "./observability/tracing.ts";
import { ConfigError } from "./config.ts";
import { isFirstRouterProcess } from "./processes.ts";
import { onResponseClose } from "./response-close.ts";

/**
 * The router's Redis connection: commands of a request's turn are
 * auto-pipelined together; those that go one at a time whatever the load
 * are sent as they are, since auto-pipelining one builds an ioredis Pipeline
 * (~13 KB: a copy of every script's methods) to carry it alone. The ledger
 * gathers a turn's rows into one XADD (per request when requests end one by
 * one, issue 14); the registry and lease polls (4/s each) and the ledger
 * drain send one command after another (their Pipelines: 7.5 % of an idle
 * router's CPU in `perf`, 2.1 % after).
 */
export const ROUTER_REDIS = {
  autoPipelining: true,
  unpipelined: [...RedisLedgerBuffer.unpipelined, ...RedisRegistryStore.pollCommands, ...RedisLeaseStore.pollCommands],
};

export interface RouterHandle {
  url: string;
  adminUrl: string;
  deps: AppDeps;
  registry: RegistryStore;
  db: DbHandle;
  /** Requests being answered now on the public listener. */
  inFlight(): number;
  /**
   * Drains, then stops: /readyz answers 503 "draining" at once; the listener
   * keeps accepting for `graceMs` (or until nothing is in flight); requests in
   * flight get until `drainMs` after the call to finish, and those still
   * running then end with one error event; idle keep-alive connections are
   * closed; then the ledger buffer is flushed and everything shut.
   */
  close(opts?: CloseOptions): Promise<void>;
}

export interface CloseOptions {
  /** New connections accepted this long after close() began (default 0; `switchyard router` passes router.drainGraceMs). */
  graceMs?: number;
  /** In-flight requests' time to finish, from close() (default router.drainMs). */
  drainMs?: number;
}

export interface StartRouterOptions {
  /** Use this registry instead of building one from config (single-machine mode). */
  registry?: RegistryStore;
  /** Use this database instead of config.database.url / embedded. */
  db?: DbHandle;
  /** Use this budget store instead of building one from config (single-machine mode). */
  budgets?: BudgetStore;
  /** Use this lease store instead of building one from config (single-machine mode). */
  leases?: LeaseStore;
  log?: Logger;
  /** The database passed in is an embedded one (`switchyard up`): said so in the start-up summary. */
  embeddedDatabase?: boolean;
  /** false: no admin listener (a router process under `--processes`, whose primary serves the admin port). */
  adminListener?: boolean;
  /** With adminListener false: the admin URL to report (the primary's). */
  adminUrl?: string;
}

/**
 * A router never runs on a database its queries do not fit: one that is
 * behind migrations/ is refused with what to run (an embedded one, which
 * only this machine uses, is migrated instead).
 */
async function assertMigrated(db: DbHandle, embedded: boolean): Promise<void> {
  if (embedded) {
    await runMigrations(db.url);
    return;
  }
  const status = await migrationStatus(db.sql);
  if (status.pending.length > 0) {
    throw new ConfigError(
      `database ${redactedHost(db.url)} is not migrated: ${status.applied} of ${status.expected} migrations applied (pending: ${status.pending.join(", ")}); run 'switchyard migrate' with the same database.url first`,
    );
  }
}

function listen(fetch: (req: Request) => Response | Promise<Response>, host: string, port: number, opts: { keepAliveTimeoutMs: number; backlog: number }, tls?: { certFile: string; keyFile: string }) {
  return new Promise<{ server: ServerType; port: number }>((resolve, reject) => {
    const server = createAdaptorServer({
      fetch,
      hostname: host,
      ...(tls ? { createServer: createHttpsServer, serverOptions: { cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile) } } : {}),
    }) as HttpServer;
    // Set before the first connection: a socket's keep-alive timer is armed with the value it was accepted under.
    server.keepAliveTimeout = opts.keepAliveTimeoutMs;
    server.once("error", reject);
    server.listen({ port, host, backlog: opts.backlog }, () => resolve({ server, port: (server.address() as AddressInfo).port }));
  });
}

/**
 * The most connections the kernel keeps waiting to be accepted, whatever a
 * listener asks for (Linux's net.core.somaxconn); undefined where there is
 * no such file (not Linux).
 */
function kernelBacklogCap(file = "/proc/sys/net/core/somaxconn"): number | undefined {
  try {
    const n = Number(readFileSync(file, "utf8").trim());
    return Number.isInteger(n) && n > 0 ? n : undefined;
  } catch {
    return undefined;
  }
}

/** Whether `p` settled within `ms` (its timer cleared either way, so a drain leaves none behind). */
async function within(p: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((r) => (timer = setTimeout(() => r(false), Math.max(0, ms))));
  try {
    return await Promise.race([p.then(() => true as const), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

type HttpServer = ServerType & { keepAliveTimeout: number; closeIdleConnections?: () => void; closeAllConnections?: () => void };

/**
 * A listener that drains: it counts the requests being answered, and closing
 * it stops new connections while those requests finish — a keep-alive
 * connection is closed once idle, never under a request.
 */
class DrainingListener {
  private active = 0;
  private idleWaiters: Array<() => void> = [];
  private closing = false;
  private closed: Promise<void> | undefined;
  private sweep: NodeJS.Timeout | undefined;

  constructor(private readonly server: HttpServer) {
    server.on("request", (_req: unknown, res: ServerResponse) => {
      this.active++;
      onResponseClose(res, this.answered);
    });
  }

  /** One for every request: no closure of its own per request. */
  private readonly answered = (): void => {
    if (--this.active === 0) for (const w of this.idleWaiters.splice(0)) w();
    // The connection this answer leaves idle goes as soon as it is idle.
    if (this.closing) setImmediate(() => this.server.closeIdleConnections?.());
  };

  get inFlight(): number {
    return this.active;
  }

  /** Resolves when no request is in flight. */
  idle(): Promise<void> {
    return this.active === 0 ? Promise.resolve() : new Promise((r) => this.idleWaiters.push(r));
  }

  /** Stops accepting connections and closes idle ones (now and as more become idle); resolves when every connection has ended. */
  stopAccepting(): Promise<void> {
    if (this.closed) return this.closed;
    this.closing = true;
    this.closed = new Promise<void>((resolve) => this.server.close(() => resolve()));
    this.server.closeIdleConnections?.();
    // A connection can turn idle without an answer ending on it (a request's body never sent).
    this.sweep = setInterval(() => this.server.closeIdleConnections?.(), 250);
    this.sweep.unref();
    return this.closed;
  }

  /** Ends every connection left (after the drain). */
  async closeAll(): Promise<void> {
    const closed = this.stopAccepting();
    this.server.closeAllConnections?.();
    await closed;
    clearInterval(this.sweep);
  }
}

/**
 * Says at start when Redis may evict the router's keys (budget counters,
 * holds and heartbeats carry TTLs: a volatile-* policy drops them first). A
 * Redis that refuses INFO only loses the warning.
 */
async function warnIfEvicting(redis: RedisLike, log: Logger): Promise<void> {
  const bad = (await evictionPolicies(redis).catch(() => [])).filter(evicting);
  if (bad.length === 0) return;
  log.warn("Redis may evict keys under memory pressure (maxmemory-policy is not noeviction): budget counters, holds and heartbeats could vanish, and a day whose counters are gone reads as unspent; set maxmemory-policy noeviction", {
    nodes: bad.map((n) => `${n.node} ${n.policy} maxmemory=${n.maxmemory}`),
  });
}

/** The router's own listeners (as configured) and its Redis and Postgres: never a worker's address. */
async function addStateEndpoints(policy: WorkerUrlPolicy, config: Config, databaseUrl: string | undefined): Promise<void> {
  if (config.router.port !== 0) await policy.addOwnEndpoint("this router's listener", config.router.host, config.router.port);
  if (config.router.adminPort !== 0) await policy.addOwnEndpoint("this router's admin listener", config.router.adminHost, config.router.adminPort);
  // Every configured Redis node (the one URL, each cluster seed, each Sentinel).
  for (const n of redisTargetEndpoints(redisTarget(config) ?? {})) await policy.addOwnEndpoint("this router's Redis", n.host, n.port);
  for (const [what, url, port] of [["this router's Postgres", databaseUrl, 5432]] as const) {
    if (!url) continue;
    try {
      const u = new URL(url);
      if (u.hostname) await policy.addOwnEndpoint(what, u.hostname, Number(u.port || port));
      // postgres://…?host=/socket or host=a,b lists: the plain host:port is what a worker URL could name.
    } catch {
      // not a URL (a socket path): no worker URL can name it
    }
  }
}

export async function startRouter(config: Config, opts: StartRouterOptions = {}): Promise<RouterHandle> {
  const log = opts.log ?? createLogger(config.log.level, { service: "router" });
  let embedded: EmbeddedPg | undefined;
  let db = opts.db;
  if (!db) {
    let url = config.database.url;
    if (!url) {
      embedded = await startEmbeddedPostgres(config.home);
      url = embedded.url;
    }
    db = connectDb(url);
  }
  // spend_ledger partitions: this month and the next ones exist before a row needs them (db/partitions.ts).
  const dbForUpkeep = db;
  const ensurePartitions = async () => {
    try {
      const created = await ensureLedgerPartitionsAhead(dbForUpkeep.sql, { monthsAhead: config.router.ledgerMonthsAhead });
      if (created.length > 0) log.info("spend_ledger partitions created", { partitions: created });
    } catch (err) {
      // Rows still land (their month's partition is made on first write, or the default one takes them).
      log.warn("spend_ledger partition upkeep failed; retrying tomorrow", { error: (err as Error).message });
    }
  };
  // Redis, when configured, holds the registry, the budget counters and the
  // ledger buffer; without it everything lives in this process (one machine).
  // One node, a Cluster or a Sentinel primary: checked before anything is
  // served (seeds of one healthy cluster, a name the Sentinels know).
  // The database's checks and Redis's connection don't depend on each other:
  // they run at once, so start-up waits for the slower one, not for both.
  const target = redisTarget(config);
  const [dbChecked, redisOpened] = await Promise.allSettled([
    (async () => {
      await assertMigrated(db, !!embedded);
      await ensurePartitions();
    })(),
    target ? openRedis(target, ROUTER_REDIS) : Promise.resolve(undefined),
  ]);
  if (dbChecked.status === "rejected" || redisOpened.status === "rejected") {
    if (redisOpened.status === "fulfilled") redisOpened.value?.disconnect();
    if (!opts.db) await db.close();
    if (embedded) await embedded.stop();
    if (dbChecked.status === "rejected") throw dbChecked.reason;
    const err = (redisOpened as PromiseRejectedResult).reason as unknown;
    // A bad seed list or Sentinel name is a configuration error (exit 2), never a half-started router.
    throw err instanceof RedisTargetError ? new ConfigError(err.message) : err;
  }
  const redis: RedisLike | undefined = redisOpened.value;
  const partitionUpkeep = setInterval(() => void ensurePartitions(), 24 * 60 * 60 * 1000);
  partitionUpkeep.unref();
  // Invite mode: the invited workers' ACL users and invites, put back from Postgres when Redis loses them (set below).
  let inviteKeeper: InviteKeeper | undefined;
  if (redis) {
    // ioredis reconnects by itself and commands fail meanwhile (their callers
    // log); say once that Redis went away and once that it came back.
    let down = false;
    redis.on("error", (err: Error) => {
      if (down) return;
      down = true;
      log.warn("redis unreachable; reconnecting", { error: err.message });
    });
    redis.on("ready", () => {
      // A Redis that restarted lost its ACL users, however fast it came back.
      inviteKeeper?.kick();
      if (!down) return;
      down = false;
      log.info("redis reachable again");
    });
  }

  // With --processes N every process would say the same: the first says it.
  const firstProcess = isFirstRouterProcess();
  // One INFO per master, beside the rest of the start; waited for before the router listens.
  const evictionChecked = redis && firstProcess ? warnIfEvicting(redis, log) : undefined;
  const registry =
    opts.registry ??
    (redis ? new RedisRegistryStore(redis, config.redis.keyPrefix, { maxRecordBytes: config.registry.maxRecordBytes, sweepMs: config.registry.sweepMs }) : new MemoryRegistryStore(undefined, { maxRecordBytes: config.registry.maxRecordBytes }));
  const metrics = new RouterMetrics();
  // One process of a --processes N router is enough: every router does the same.
  if (redis && firstProcess && config.workers.secretKey !== undefined && config.workers.inviteSyncMs > 0) inviteKeeper = new InviteKeeper({ redis, db: db.db, prefix: config.redis.keyPrefix, log, metrics });
  // Event-loop delay, GC pauses and CPU per request on /metrics: the stalls behind a p99.
  const runtime = new RuntimeMetrics(metrics);
  const prices = new PostgresPriceBook(db.db, config.billing.refreshMs, log);
  // Routing: candidates ordered by what this router saw (latency, load, failures, cost); failing workers ejected.
  const health = new WorkerHealth(config.routing.health, { metrics, log });
  const scorer = new RouteScorer(config.routing.scorer, { prices, health, metrics });
  // Worker records are untrusted: URLs checked against SSRF (never this router's own
  // listeners, Redis or Postgres), models bounded by invites and never a paid backend's name.
  const workerUrls = new WorkerUrlPolicy({ allowedNetworks: config.workers.allowedNetworks });
  await addStateEndpoints(workerUrls, config, db.url);
  const directory = new WorkerDirectory(registry, config.registry.pollMs, log, scorer, {
    urls: workerUrls,
    requireInvites: config.workers.secretKey !== undefined,
    mayServe: (model) => workerMayServe(config.routing, model),
    metrics,
  });
  // Everything read from an upstream is bounded (transport.ts).
  const upstreamLimits = { maxBodyBytes: config.router.maxUpstreamBodyBytes, maxRawBodyBytes: config.router.maxUpstreamHiddenStatesBytes, maxEventBytes: config.router.maxUpstreamEventBytes };
  const connections = new WorkerConnections({
    connectTimeoutMs: config.deadlines.connectMs,
    maxConnections: config.router.maxConnectionsPerWorker,
    token: config.workers.token,
    secretKey: config.workers.secretKey,
    limits: upstreamLimits,
    // Worker host names connect only to the addresses the URL check approved (no DNS rebinding).
    lookup: workerUrls.pinnedLookup as LookupFunction,
    onHeld: (seconds) => metrics.upstreamHeld.observe({}, seconds),
  });
  // At zero before the first call: one unlabelled series.
  metrics.upstreamHeld.touch({});
  directory.onChange((workers) => connections.retain(new Set(workers.map((w) => new URL(w.url).origin))));
  const keyStore = new PostgresKeyStore(db.db);
  const dbHandle = db;
  const writeRows = (rows: Parameters<typeof insertLedgerRows>[1]) => insertLedgerRows(dbHandle.db, rows);
  const writeTexts = (texts: string[]) => insertLedgerTexts(dbHandle.db, texts);
  // With Redis: the durable ledger stream and the shared budget counters.
  // Without (one machine): an in-memory buffer and in-process counters.
  let ledgerStream: RedisLedgerBuffer | undefined;
  let intents: RedisIntentJournal | undefined;
  let ledger: LedgerSink;
  let budgetStore = opts.budgets;
  if (redis) {
    const consumer = `${hostname()}-${process.pid}-${randomBytes(3).toString("hex")}`;
    const stream = new RedisLedgerBuffer(redis, writeTexts, {
      prefix: config.redis.keyPrefix,
      consumer,
      batch: config.billing.ledgerBatch,
      flushMs: config.billing.ledgerFlushMs,
      claimIdleMs: config.billing.ledgerClaimIdleMs,
      log,
      metrics,
    });
    ledger = ledgerStream = stream;
    // Paid attempts' intents: a router that dies mid-request leaves them for another to finish.
    intents = new RedisIntentJournal(redis, {
      prefix: config.redis.keyPrefix,
      ledgerKey: stream.key,
      consumer,
      claimIdleMs: config.billing.ledgerClaimIdleMs,
      // A finish appends its rows itself (budget_intent_finish.lua): the buffer keeps them as its own.
      written: (entryId, rows, intentLost) => {
        stream.keep(entryId, rows);
        if (!intentLost) return;
        metrics.ledgerRows.inc({ outcome: "intent_lost" });
        log.warn("a paid attempt's intent was lost with Redis' data: its row was written by the router serving it", { entryId });
      },
    });
    budgetStore ??= new RedisBudgetStore(redis, config.redis.keyPrefix);
  } else {
    ledger = new BatchingLedgerWriter(writeRows, { log, maxBatch: config.billing.ledgerBatch });
    budgetStore ??= new MemoryBudgetStore();
  }
  const store = budgetStore;
  const guard = new BudgetGuard({
    store,
    budgets: new PostgresBudgets(db.db, config.billing.refreshMs),
    prices,
    ledger,
    alerts: (tenantId, day, threshold) => recordBudgetAlert(dbHandle.db, tenantId, day, threshold),
    billing: config.billing,
    log,
    metrics,
    ...(intents ? { intents } : {}),
    // A day the store holds no check of is rebuilt from the ledger before
    // anything is held on it: lost counters never read as an unspent day.
    // The ledger stream is drained after the day's snapshot (rows Redis lost
    // appended again), so the rebuild counts every row settled before it;
    // when it cannot be, the check fails and the day's paid backends are
    // skipped until it can.
    checkDay: (tenantId, day) => checkBudgetDay(dbHandle.db, store, tenantId, day, ledgerStream ? { drainLedger: () => ledgerStream.recover() } : {}),
  });
  // Redis back empty: every tenant's counters for today are gone, and a day
  // that reads as unspent would admit its whole budget again. Rebuilt from
  // the ledger at once (what `switchyard budgets reconcile` does), by every
  // router that sees it: the rebuild is a versioned set, so they agree.
  if (store instanceof RedisBudgetStore) {
    directory.onLoss(() => {
      void (async () => {
        // The ledger stream drained first (the rows Redis lost appended
        // again): the rebuild counts every row. Undrainable (Postgres away):
        // no rebuild now; each day is checked before its next hold instead.
        try {
          await ledgerStream?.recover();
        } catch (err) {
          log.warn("budgets not rebuilt after Redis lost its data: the ledger stream cannot be drained now; each day is rebuilt before its next hold", { error: (err as Error).message });
          return;
        }
        await rebuildBudgetsAfterLoss(dbHandle.db, store, { log, metrics });
      })();
    });
  }
  if (inviteKeeper) {
    const keeper = inviteKeeper;
    directory.onLoss(() => keeper.kick());
  }
  if (config.billing.holdTtlMs <= config.deadlines.totalMs) {
    log.warn("billing.holdTtlMs should be above deadlines.totalMs: a live request's hold (and intent) may expire before it ends", { holdTtlMs: config.billing.holdTtlMs, totalMs: config.deadlines.totalMs });
  }
  const providers: ProviderBackends = {};
  const costLookups: Partial<Record<string, CrashCostLookup>> = {};
  const closers: Array<() => Promise<void>> = [];
  for (const { key, connection } of connectProviders(config.providers, { connectTimeoutMs: config.deadlines.connectMs, limits: upstreamLimits })) {
    providers[key] = (model) => connection.backend(model);
    costLookups[key] = connection.costLookup;
    closers.push(() => connection.close());
  }
  const orphans = intents && new OrphanFinisher(intents, guard, costLookups, { scanMs: config.billing.orphanScanMs, concurrency: config.billing.orphanLookupConcurrency });
  // Leases: live ones in Redis (or this process), tokens and audit in Postgres.
  const leaseAudit = new PostgresLeaseAudit(db.db);
  // Redis lost its data: the live leases are put back from the audit before any lease script answers.
  const restoreLeases = {
    restoreFrom: () => leaseAudit.liveLeases(),
    onRestored: (restored: number, ended: number) => {
      metrics.leaseRestores.inc({ outcome: "restored" }, restored);
      metrics.leaseRestores.inc({ outcome: "ended" }, ended);
      log.info("lease store restored from the audit (Redis had lost its data, or never had the mark)", { restored, ended });
    },
  };
  const fenceIdleMs = config.leases.fenceIdleS * 1000;
  const leaseStore = opts.leases ?? (redis ? new RedisLeaseStore(redis, config.redis.keyPrefix, { ...restoreLeases, fenceIdleMs }) : new MemoryLeaseStore(undefined, { fenceIdleMs }));
  const leaseDirectory = new LeaseDirectory(leaseStore, config.leases.pollMs, log, (expired, seenAtMs) => leaseService.sawExpired(expired, seenAtMs));
  const chain = new BackendChain(config.routing, directory, workerOrPipeline(directory, connections, config.deadlines.totalMs), providers);
  // Leases ask the chain which worker name a model means (its aliases), as admission does.
  const leaseService: LeaseService = new LeaseService({ store: leaseStore, audit: leaseAudit, directory: leaseDirectory, workers: directory, workerName: (model) => chain.upstreamName(model, "worker"), config, log, metrics });
  // Draining (close()): /readyz says so at once; `shutdown` ends the requests still running once router.drainMs has passed.
  let draining = false;
  const shutdown = new AbortController();
  // Telemetry: the OpenTelemetry SDK is loaded only when telemetry.otlpEndpoint is set.
  const tracing = await startTracing(config.telemetry, log);
  // /readyz is public: one ping of each store at a time, its answer reused for half a second.
  const pings = sharedCheck(500, async () => {
    const [r, p] = await Promise.all([registry.ping(), keyStore.ping()]);
    return { redis: r, postgres: p };
  });
  const deps: AppDeps = {
    config,
    ...(tracing ? { tracing } : {}),
    keys: new KeyResolver(keyStore, config.router.keyCacheMs),
    directory,
    chain,
    guard,
    metrics,
    log,
    leases: leaseService,
    // Rate limits: rows in Postgres (`switchyard limits`), windows in Redis shared by every router (or this process).
    ...(config.rateLimits.enabled
      ? {
          rateLimiter: new RateLimiter({
            store: redis ? new RedisRateLimitStore(redis, config.redis.keyPrefix) : new MemoryRateLimitStore(),
            limits: new PostgresRateLimits(db.db, config.rateLimits.refreshMs),
            windowMs: config.rateLimits.windowMs,
            log,
          }),
        }
      : {}),
    // Stored /v1/responses answers: in Redis, any router continues them.
    responses: redis ? new RedisResponseStore(redis, config.redis.keyPrefix) : new MemoryResponseStore(),
    readiness: async () => ({ ...(await pings()), ...(draining ? { draining: true } : {}) }),
    shutdown: shutdown.signal,
  };
  const summary = startupSummary(config, {
    ...(target ? { redisUrl: target.url ?? describeRedisTarget(target) } : {}),
    registryShared: registry instanceof RedisRegistryStore,
    budgetsShared: budgetStore instanceof RedisBudgetStore,
    databaseUrl: db.url,
    embeddedDatabase: embedded !== undefined || opts.embeddedDatabase === true,
  });
  deps.summary = summary;
  // Between authentication and routing: bands, ceilings and fair queues per worker pool.
  deps.admission = new AdmissionGate({ config: config.admission, maxHoldMs: config.deadlines.totalMs, directory, chain: deps.chain, metrics, log });
  // Each loop's first load is its own round trip: waited for together.
  await Promise.all([prices.start(), ledgerStream?.start(), orphans?.start(), directory.start(), leaseDirectory.start()]);
  inviteKeeper?.start(config.workers.inviteSyncMs);
  await evictionChecked;
  const app = createApp(deps);
  const admin = createAdminApp(deps);
  const listenOpts = { keepAliveTimeoutMs: config.router.keepAliveTimeoutMs, backlog: config.router.listenBacklog };
  const main = await listen(app.fetch, config.router.host, config.router.port, listenOpts, config.router.tls);
  const adm = opts.adminListener === false ? undefined : await listen(admin.fetch, config.router.adminHost, config.router.adminPort, listenOpts);
  const publicListener = new DrainingListener(main.server as HttpServer);
  deps.inFlight = () => publicListener.inFlight;
  const adminListener = adm && new DrainingListener(adm.server as HttpServer);
  const scheme = config.router.tls ? "https" : "http";
  const url = `${scheme}://${config.router.host}:${main.port}`;
  const adminUrl = adm ? `http://${config.router.adminHost}:${adm.port}` : (opts.adminUrl ?? "");
  // Port 0 in config: the listeners' real ports are known only now.
  if (main.port !== config.router.port || (adm && adm.port !== config.router.adminPort)) {
    await workerUrls.addOwnEndpoint("this router's listener", config.router.host, main.port);
    if (adm) await workerUrls.addOwnEndpoint("this router's admin listener", config.router.adminHost, adm.port);
    await directory.refresh();
  }
  log.info("router listening", { url, admin: adminUrl, ...summary });
  const cap = kernelBacklogCap();
  if (firstProcess && cap !== undefined && cap < config.router.listenBacklog) {
    log.warn("the kernel caps the listen backlog below router.listenBacklog: a burst of new connections beyond it waits for SYN retransmits (raise net.core.somaxconn)", { somaxconn: cap, listenBacklog: config.router.listenBacklog });
  }
  let closing: Promise<void> | undefined;
  return {
    url,
    adminUrl,
    deps,
    registry,
    db,
    inFlight: () => publicListener.inFlight,
    close: (how: CloseOptions = {}) => (closing ??= (async () => {
      const t0 = Date.now();
      const drainMs = how.drainMs ?? config.router.drainMs;
      const graceMs = Math.min(how.graceMs ?? 0, drainMs);
      draining = true;
      log.info("router draining", { inFlight: publicListener.inFlight, graceMs, drainMs });
      // Grace: a load balancer still sending (it has not seen /readyz yet) is served; an idle router need not wait.
      await within(publicListener.idle(), graceMs);
      void adminListener?.stopAccepting();
      void publicListener.stopAccepting();
      const drained = await within(publicListener.idle(), drainMs - (Date.now() - t0));
      const cut = publicListener.inFlight;
      if (!drained) {
        // What is still running ends now: one SSE error event on streams (router_shutting_down), a 503 before the first byte.
        log.warn("router.drainMs passed: ending the requests still running", { inFlight: cut, drainMs });
        shutdown.abort();
        await within(publicListener.idle(), 2_000);
      }
      await Promise.all([publicListener.closeAll(), adminListener?.closeAll()]);
      clearInterval(partitionUpkeep);
      directory.stop();
      leaseDirectory.stop();
      await inviteKeeper?.close();
      await deps.keys.flush();
      prices.stop();
      await guard.drain();
      await orphans?.close();
      await leaseService.drain();
      await ledger.close();
      await connections.close();
      await Promise.all(closers.map((c) => c()));
      await tracing?.shutdown();
      if (redis) redis.disconnect();
      if (!opts.db) await db.close();
      if (embedded) await embedded.stop();
      runtime.stop();
      log.info("router stopped", { drainedMs: Date.now() - t0, endedByDrainMs: drained ? 0 : cut });
    })()),
  };
}
