// Wires real parts into createApp and listens. Used by `switchyard router`,
// `switchyard up` and the integration tests.
import { readFileSync } from "node:fs";
import { createServer as createHttpsServer } from "node:https";
import type { AddressInfo } from "node:net";
import { serve, type ServerType } from "@hono/node-server";
import { connectDb, insertLedgerRows, startEmbeddedPostgres, type DbHandle, type EmbeddedPg } from "@switchyard/db";
import { BatchingLedgerWriter } from "./billing/ledger.ts";
import { connectRedis, MemoryRegistryStore, RedisRegistryStore, type RegistryStore } from "@switchyard/state";
import type { Redis } from "ioredis";
import { createAdminApp, createApp } from "./app.ts";
import { PostgresKeyStore } from "./auth/key-store.ts";
import { KeyResolver } from "./auth/resolver.ts";
import { WorkerBackend, WorkerConnections } from "./backends/worker/client.ts";
import type { Config } from "./config.ts";
import type { AppDeps } from "./deps.ts";
import { createLogger, type Logger } from "./observability/log.ts";
import { RouterMetrics } from "./observability/metrics.ts";
import { WorkerDirectory } from "./routing/directory.ts";

export interface RouterHandle {
  url: string;
  adminUrl: string;
  deps: AppDeps;
  registry: RegistryStore;
  db: DbHandle;
  close(): Promise<void>;
}

export interface StartRouterOptions {
  /** Use this registry instead of building one from config (single-machine mode). */
  registry?: RegistryStore;
  /** Use this database instead of config.database.url / embedded. */
  db?: DbHandle;
  log?: Logger;
}

function listen(fetch: (req: Request) => Response | Promise<Response>, host: string, port: number, tls?: { certFile: string; keyFile: string }) {
  return new Promise<{ server: ServerType; port: number }>((resolve, reject) => {
    const server = serve(
      {
        fetch,
        hostname: host,
        port,
        ...(tls
          ? { createServer: createHttpsServer, serverOptions: { cert: readFileSync(tls.certFile), key: readFileSync(tls.keyFile) } }
          : {}),
      },
      (info: AddressInfo) => resolve({ server, port: info.port }),
    );
    server.once("error", reject);
  });
}

function closeServer(server: ServerType): Promise<void> {
  return new Promise((resolve) => {
    const s = server as ServerType & { closeAllConnections?: () => void };
    server.close(() => resolve());
    s.closeAllConnections?.();
  });
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
  let redis: Redis | undefined;
  let registry = opts.registry;
  if (!registry) {
    if (config.redis.url) {
      redis = connectRedis(config.redis.url);
      registry = new RedisRegistryStore(redis, config.redis.keyPrefix);
    } else {
      registry = new MemoryRegistryStore();
    }
  }
  const metrics = new RouterMetrics();
  const directory = new WorkerDirectory(registry, config.registry.pollMs, log);
  const connections = new WorkerConnections({ connectTimeoutMs: config.deadlines.connectMs, maxConnections: config.router.maxConnectionsPerWorker, token: config.workers.token, secretKey: config.workers.secretKey });
  directory.onChange((workers) => connections.retain(new Set(workers.map((w) => new URL(w.url).origin))));
  const keyStore = new PostgresKeyStore(db.db);
  const dbHandle = db;
  const ledger = new BatchingLedgerWriter((rows) => insertLedgerRows(dbHandle.db, rows), { log });
  const deps: AppDeps = {
    config,
    keys: new KeyResolver(keyStore, config.router.keyCacheMs),
    directory,
    workerBackend: (w) => new WorkerBackend(w, connections),
    metrics,
    log,
    ledger,
    readiness: async () => {
      const [r, p] = await Promise.all([registry.ping(), keyStore.ping()]);
      return { redis: r, postgres: p };
    },
  };
  await directory.start();
  const app = createApp(deps);
  const admin = createAdminApp(deps);
  const main = await listen(app.fetch, config.router.host, config.router.port, config.router.tls);
  const adm = await listen(admin.fetch, config.router.adminHost, config.router.adminPort);
  const scheme = config.router.tls ? "https" : "http";
  const url = `${scheme}://${config.router.host}:${main.port}`;
  const adminUrl = `http://${config.router.adminHost}:${adm.port}`;
  log.info("router listening", { url, admin: adminUrl, registry: config.redis.url ? "redis" : "in-process", database: opts.db ? "shared" : embedded ? "embedded" : "external" });
  return {
    url,
    adminUrl,
    deps,
    registry,
    db,
    close: async () => {
      directory.stop();
      await Promise.all([closeServer(main.server), closeServer(adm.server)]);
      await deps.keys.flush();
      await ledger.close();
      await connections.close();
      if (redis) redis.disconnect();
      if (!opts.db) await db.close();
      if (embedded) await embedded.stop();
    },
  };
}
