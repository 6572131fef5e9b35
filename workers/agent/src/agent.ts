// The worker agent: fetch models, find or build the engine, supervise it,
// serve the router over HTTP and heartbeat into the registry. SIGTERM (or
// stop()) drains: state `draining`, in-flight work finishes within a grace
// period, the record is removed, the process exits cleanly.
import { createHash, randomBytes } from "node:crypto";
import { createReadStream } from "node:fs";
import type { Server as HttpServer } from "node:http";
import type { AddressInfo } from "node:net";
import os from "node:os";
import { createAdaptorServer } from "@hono/node-server";
import { MAX_ADVERTISED_PREFIXES, type RegistryStore, type WorkerRecord, type WorkerState } from "@switchyard/state";
import { ensureEngine, type EngineFlavor } from "./engine/binary.ts";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { EngineSupervisor, isShard } from "./engine/supervisor.ts";
import { checkAdvertiseUrl } from "./advertise.ts";
import { checkFits, defaultMemoryBudget, planModel } from "./engine/plan.ts";
import { resolveModel, type ResolvedModel } from "./models/fetch.ts";
import { createWorkerApp } from "./server/app.ts";
import { FencingGuard } from "./server/fencing.ts";
import { LazyShardLink, type ShardPeer } from "./shard/link.ts";
import { ShardPaths } from "./shard/paths.ts";
import { PipelineHead } from "./shard/pipeline.ts";
import { attachShardServer } from "./shard/server.ts";
import type { WorkerContext } from "./server/context.ts";
import { parseWorkerConfig, type WorkerConfigInput } from "./config.ts";

/**
 * A worker's options: its configuration (plain data, validated and defaulted
 * once by parseWorkerConfig — see config.ts for every field) and the
 * dependencies it runs with.
 */
export type AgentOptions = WorkerConfigInput & {
  registry: RegistryStore;
  log?: (msg: string, fields?: Record<string, unknown>) => void;
};

export interface AgentHandle {
  id: string;
  url: string;
  supervisor: EngineSupervisor;
  models: ResolvedModel[];
  ctx: WorkerContext;
  record(): Promise<WorkerRecord>;
  /** Publish a heartbeat now (e.g. right after becoming ready). */
  heartbeat(): Promise<void>;
  /** What this worker sent down a split model's pipeline so far (zeros on a whole worker). */
  shardWire(): ShardWire;
  /** Graceful: drain, deregister, stop the engine. */
  stop(): Promise<void>;
}

export interface ShardWire {
  /** STEP frames sent to the next shard (headers included), and the raw activation rows they carry. */
  stepFrameBytes: number;
  rowBytes: number;
  /** Every frame byte on the static (--next) connection to the next shard, each way (OPEN, STEP, CLOSE out; OK and SAMPLES back); routed paths are not counted here. */
  linkSent: number;
  linkReceived: number;
}

function defaultLog(msg: string, fields?: Record<string, unknown>) {
  process.stderr.write(JSON.stringify({ ts: new Date().toISOString(), service: "worker", msg, ...fields }) + "\n");
}

/** Idle keep-alive of the worker's listener: above the routers' own 30 s, so they close first. */
export const WORKER_KEEP_ALIVE_MS = 65_000;
/** The worker listener's accept queue (capped by net.core.somaxconn), as the router's. */
export const WORKER_LISTEN_BACKLOG = 4096;

export async function startAgent({ registry, log: logTo, ...options }: AgentOptions): Promise<AgentHandle> {
  const t0 = Date.now();
  const log = logTo ?? defaultLog;
  // Parsed once: from here on only `opts`, validated and with its defaults.
  const opts = parseWorkerConfig(options);
  const id = opts.workerId ?? `${os.hostname().replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 40)}-${randomBytes(3).toString("hex")}`;
  if (opts.advertise) {
    const check = checkAdvertiseUrl(opts.advertise);
    if (!check.ok) throw new Error(`refusing --advertise ${opts.advertise}: ${check.reason}`);
  }
  const models: ResolvedModel[] = [];
  for (const spec of opts.models) models.push(await resolveModel(spec, { cacheDir: opts.cacheDir }));
  const device = opts.device;
  const cpuBinary = await ensureEngine("cpu", device === "cpu" ? opts.engineBinary : undefined);
  let gpuBinary: string | undefined;
  if (device === "cuda" || device === "metal") {
    try {
      gpuBinary = await ensureEngine(device as EngineFlavor, opts.engineBinary);
    } catch (err) {
      log("GPU engine unavailable, using CPU", { error: (err as Error).message });
    }
  }
  const maxBatch = opts.maxBatch;
  // Refuse what cannot fit before the engine tries (and the OOM killer ends it).
  const llamaModels = models.filter((m) => m.kind === ModelKind.LLAMA_GGUF);
  // A shard plans only its blocks (and the ends it holds), not the whole model.
  const plans = await Promise.all(llamaModels.map(async (m) => ({ name: m.name, plan: await planModel(cpuBinary, m.path, opts.layers) })));
  checkFits(plans, { maxBatch, maxSeqLen: opts.maxSeqLen, budget: opts.memoryBudget ?? defaultMemoryBudget() });
  const supervisor = new EngineSupervisor({
    cpuBinary,
    gpuBinary,
    device,
    models,
    maxBatch,
    maxSeqLen: opts.maxSeqLen,
    stallMs: opts.engineStallMs,
    ...(opts.layers ? { layers: opts.layers } : {}),
    ...(opts.threads !== undefined ? { threads: opts.threads } : {}),
    log,
  });

  let inFlight = 0;
  let arriving = 0;
  const idleWaiters: (() => void)[] = [];
  /** One counter's release: idempotent, and wakes the drain when both reach zero. */
  const counted = (dec: () => void) => {
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      dec();
      if (inFlight === 0 && arriving === 0) for (const fn of idleWaiters.splice(0)) fn();
    };
  };
  // Prompt prefixes the engine computed lately, oldest first (Map order), for
  // the heartbeat: routers send requests with these prefixes here.
  const prefixes = new Map<string, true>();
  // One fencing state for the worker: its HTTP API and its shard connections both admit tokens through it.
  const fencing = new FencingGuard(opts.fencingStatePath, opts.fencingKey ? { workerId: id, publicKey: opts.fencingKey } : undefined);
  const ctx: WorkerContext = {
    supervisor,
    token: opts.token,
    draining: false,
    log,
    get inFlight() {
      return inFlight;
    },
    begin() {
      inFlight++;
      return counted(() => inFlight--);
    },
    arrive() {
      arriving++;
      return counted(() => arriving--);
    },
    idle: () => (inFlight === 0 && arriving === 0 ? Promise.resolve() : new Promise((r) => idleWaiters.push(r))),
    fencing,
    notePrefix(key) {
      prefixes.delete(key);
      prefixes.set(key, true);
      if (prefixes.size > MAX_ADVERTISED_PREFIXES) prefixes.delete(prefixes.keys().next().value!);
    },
  };

  // A shard: the loaded llama model, when it holds only some blocks.
  const shardModel = () => [...supervisor.loaded.values()].find(isShard);
  // A shard's GGUF digest: peers refuse a pipeline that mixes model files.
  const llamaFile = models.find((m) => m.kind === ModelKind.LLAMA_GGUF)?.path;
  const digest = opts.layers && llamaFile ? await fileSha256(llamaFile) : undefined;
  const next = opts.next
    ? new LazyShardLink(opts.next, () => {
        const l = shardModel();
        return l && digest ? { model: l.model, digest, layerStart: l.layerEnd } : undefined;
      }, opts.shardKeepaliveMs)
    : undefined;
  // The head shard (block 0 on) answers generations like a whole worker, down
  // the pipeline: the static --next one, or the one a router's route names.
  const paths = opts.layers?.start === 0 ? new ShardPaths(() => {
    const l = shardModel();
    return l && digest ? { model: l.model, digest, layerStart: l.layerEnd } : undefined;
  }, opts.shardKeepaliveMs) : undefined;
  if (paths) {
    ctx.pipeline = new PipelineHead(() => supervisor.client, shardModel, next, { f16: opts.shardF16, depth: opts.pipelineDepth, paths, log });
    ctx.shardHead = { pipeline: ctx.pipeline as PipelineHead, shard: shardModel, digest: digest ?? "" };
  }

  const app = createWorkerApp(ctx);
  const host = opts.host;
  const { server, port } = await new Promise<{ server: HttpServer; port: number }>((resolve, reject) => {
    const s = createAdaptorServer({ fetch: app.fetch, hostname: host }) as HttpServer;
    // The routers are this listener's clients. They keep an idle connection
    // 30 s at most, or less when the Keep-Alive hint says so: Node's 5 s
    // made them reconnect after every lull of 3 s. Kept longer here than
    // there, the side that closes an idle connection is the client's. A
    // fleet of routers opening connections together (a burst of streams,
    // the worker back from a restart) waits in a 4096-deep accept queue
    // instead of having SYNs dropped past Node's 511.
    s.keepAliveTimeout = WORKER_KEEP_ALIVE_MS;
    s.once("error", reject);
    s.listen({ port: opts.port, host, backlog: WORKER_LISTEN_BACKLOG }, () => resolve({ server: s, port: (s.address() as AddressInfo).port }));
  });
  // Rows this shard forwards for an earlier one (a middle shard); the head counts its own.
  const forwarded = { frameBytes: 0, rowBytes: 0 };
  const shardServer = attachShardServer(server, { token: opts.token, workerId: id, engine: () => supervisor.client, shard: shardModel, ...(next ? { next } : {}), ...(digest ? { digest } : {}), log, wire: forwarded, keepaliveMs: opts.shardKeepaliveMs, fencing, hold: () => ctx.begin() });
  const shardWire = (): ShardWire => {
    const head = ctx.pipeline instanceof PipelineHead ? ctx.pipeline.wire : { frameBytes: 0, rowBytes: 0 };
    const link = next?.bytes() ?? { sent: 0, received: 0 };
    return { stepFrameBytes: head.frameBytes + forwarded.frameBytes, rowBytes: head.rowBytes + forwarded.rowBytes, linkSent: link.sent, linkReceived: link.received };
  };
  const url = opts.advertise ?? `http://${reachableHost(host)}:${port}`;
  const startedAt = Date.now();
  let queueDepth = 0;
  let memoryBytes = 0;
  let kvCacheBytes = 0;
  // Whether the engine keeps a prefix cache at all (SWITCHYARD_PREFIX_CACHE_MB=0 turns it off).
  let prefixCaching = true;

  const record = async (): Promise<WorkerRecord> => {
    const engine = supervisor.client;
    if (engine?.alive && supervisor.state !== "warming") {
      try {
        const ev = await Promise.race([engine.once({ case: "stats", value: { $typeName: "switchyard.engine.v1.StatsRequest" } }), new Promise<never>((_, rej) => setTimeout(() => rej(new Error("stats timeout")), 500))]);
        if (ev.kind.case === "stats") {
          queueDepth = ev.kind.value.queuedRequests;
          memoryBytes = Number(ev.kind.value.rssBytes);
          kvCacheBytes = Number(ev.kind.value.kvCacheBytes);
          prefixCaching = prefixes.size === 0 || ev.kind.value.prefixCacheBytes > 0n;
        }
      } catch {
        // keep the last known values
      }
    }
    const state: WorkerState = ctx.draining ? "draining" : supervisor.state;
    const loaded = [...supervisor.loaded.values()];
    // A shard is no whole model: routers must not send it whole requests, so
    // it advertises its model only in layerRanges (the blocks it holds).
    // (The head of a pipeline answers like a whole worker — while it can reach the next shard.)
    const pipelineUp =
      next !== undefined && ctx.pipeline !== undefined && supervisor.state !== "warming"
        ? await Promise.race([next.get().then((l) => l.alive, () => false), new Promise<boolean>((r) => setTimeout(() => r(false), 500))])
        : false;
    const shardModels = new Set(pipelineUp ? [] : loaded.filter(isShard).map((l) => l.model));
    // Until its engine has loaded (at start, after a restart) a --layers worker
    // can't tell a shard from a whole range: it claims no whole model then, or
    // /v1/models would list a model no router can place yet.
    if (opts.layers) for (const m of llamaModels) if (!supervisor.loaded.has(m.name)) shardModels.add(m.name);
    return {
      id,
      url,
      models: models.map((m) => m.name).filter((name) => !shardModels.has(name)),
      state,
      inFlight: ctx.inFlight,
      queueDepth,
      capacity: maxBatch,
      device: supervisor.device,
      memoryBytes,
      // The engine's own memory, measured: what this worker's share of a split model costs.
      weightBytes: loaded.reduce((n, l) => n + Number(l.weightBytes), 0),
      kvCacheBytes,
      layerRanges: loaded
        .filter((l) => l.nLayers > 0 && l.kind === ModelKind.LLAMA_GGUF)
        .map((l) => ({ model: l.model, start: l.layerStart, end: l.layerEnd, blocks: l.nLayers, ...(digest && isShard(l) ? { digest } : {}) })),
      // Only what the engine can actually reuse is worth routing by.
      prefixes: prefixCaching ? [...prefixes.keys()].reverse() : [],
      version: "0.1.0",
      startedAt,
      ...(readyMs !== undefined ? { readyMs } : {}),
      updatedAt: Date.now(),
      ttlMs: opts.ttlMs,
    };
  };

  const ttlMs = opts.ttlMs;
  let beating = true;
  // Beats still on their way: a stop waits for them before it removes the
  // record, or one that read its record before the stop would publish it
  // after the removal, and routers would see a stopped worker for a TTL.
  const pendingBeats = new Set<Promise<void>>();
  const beat = (): Promise<void> => {
    if (!beating) return Promise.resolve();
    const run = (async () => {
      try {
        const rec = await record();
        if (!beating) return; // the stop began while the record was read
        const r = await registry.publish(rec, ttlMs);
        if (!r.ok) log("heartbeat refused", { reason: r.reason });
      } catch (err) {
        log("heartbeat failed", { error: (err as Error).message });
      }
    })();
    pendingBeats.add(run);
    void run.finally(() => pendingBeats.delete(run));
    return run;
  };
  // Start → ready (models fetched, loaded and warmed up): routers route here only after it.
  let readyMs: number | undefined;
  supervisor.onState((st) => {
    if (readyMs === undefined && st !== "warming") {
      readyMs = Date.now() - t0;
      log("ready", { id, ms: readyMs, ...(opts.layers ? { layers: `${opts.layers.start}-${opts.layers.end}` } : {}) });
    }
  });
  await beat();
  const timer = setInterval(() => void beat(), opts.heartbeatMs);
  supervisor.onState(() => void beat());
  void supervisor.start();
  log("worker started", { id, url, models: models.map((m) => m.name), device });

  let stopping: Promise<void> | undefined;
  const stop = () =>
    (stopping ??= (async () => {
      ctx.draining = true;
      await beat();
      log("draining", { inFlight: ctx.inFlight });
      const grace = opts.drainGraceMs;
      await Promise.race([ctx.idle(), new Promise((r) => setTimeout(r, grace))]);
      beating = false;
      clearInterval(timer);
      await Promise.all([...pendingBeats]);
      await registry.remove(id).catch(() => {});
      await next?.close();
      await paths?.close();
      shardServer.closeAll();
      await new Promise<void>((r) => {
        server.close(() => r());
        server.closeAllConnections();
      });
      await supervisor.stop();
      log("worker stopped", { id });
    })());

  return { id, url, supervisor, models, ctx, record, heartbeat: beat, shardWire, stop };
}

/**
 * The address other hosts reach a worker listening on `host` at: the host
 * itself, or — listening on every interface without --advertise — this
 * machine's first non-loopback IPv4 address (a loopback URL in the registry
 * would be unreachable from every router on another host).
 */
export function reachableHost(host: string): string {
  if (host !== "0.0.0.0" && host !== "::") return host.includes(":") ? `[${host}]` : host;
  for (const list of Object.values(os.networkInterfaces())) {
    for (const a of list ?? []) if (a.family === "IPv4" && !a.internal) return a.address;
  }
  return "127.0.0.1";
}

/** SHA-256 (hex) of a file, streamed. */
async function fileSha256(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}
