// `switchyard worker`: join this host to a fabric. Fetches the models, builds
// or finds the engine, serves routers and heartbeats into Redis until SIGTERM
// (which drains). Redis (a URL, a Cluster or Sentinels), the key prefix and
// the token come from the same config as the routers' (--config FILE,
// SWITCHYARD_* env); flags win.
import path from "node:path";
import { defaultCacheDir, startAgent, WorkerConfigError } from "@switchyard/agent";
// The config module alone: a worker does not load the router.
import { loadConfig, redisTarget } from "@switchyard/router/config";
import { connectRedis, describeRedisTarget, parseFencingPublicKey, RedisRegistryStore, type RedisTarget } from "@switchyard/state";
import { untilSignal } from "../signals.ts";
import { UsageError } from "../usage.ts";

export interface WorkerFlags {
  config?: string;
  redis?: string;
  model?: string[];
  advertise?: string;
  token?: string;
  id?: string;
  port?: string;
  host?: string;
  device?: string;
  "key-prefix"?: string;
  "max-batch"?: string;
  "max-seq-len"?: string;
  "memory-budget-mb"?: string;
  engine?: string;
  "engine-stall-ms"?: string;
  "fencing-key"?: string;
  "fencing-state"?: string;
  layers?: string;
  next?: string;
  "next-token"?: string;
  "shard-keepalive"?: string;
}

/**
 * `--layers START-END`: blocks [START, END) of the model, one shard of a
 * split model (`0-15` and `15-30` split SmolLM2's 30). Whether END fits the
 * model is the engine's check, at load.
 */
export function parseLayers(spec: string): { start: number; end: number } {
  const m = /^(\d{1,5})-(\d{1,5})$/.exec(spec);
  if (!m) throw new UsageError(`worker: --layers must be START-END, blocks [START, END) (got '${spec}')`);
  const [start, end] = [Number(m[1]), Number(m[2])];
  if (start >= end) throw new UsageError(`worker: --layers ${spec}: START must be below END`);
  return { start, end };
}

export async function workerCommand(flags: WorkerFlags): Promise<number> {
  const config = loadConfig({ file: flags.config, env: process.env });
  const target: RedisTarget | undefined = flags.redis ? { url: flags.redis } : redisTarget(config);
  if (!target) throw new UsageError("worker: --redis redis://… is required (or redis.url / redis.cluster / redis.sentinels in --config FILE, or REDIS_URL)");
  const token = flags.token ?? config.workers.token;
  if (!token) throw new UsageError("worker: --token is required (printed by 'switchyard workers invite')");
  const models = flags.model?.length ? flags.model : ["smollm2-135m-instruct"];
  const layers = flags.layers === undefined ? undefined : parseLayers(flags.layers);
  if (flags.next !== undefined && !layers) throw new UsageError("worker: --next URL (the next shard) needs --layers");
  const device = (flags.device ?? "auto") as "auto" | "cpu" | "cuda" | "metal";
  if (!["auto", "cpu", "cuda", "metal"].includes(device)) throw new UsageError(`worker: --device must be auto, cpu, cuda or metal (got '${device}')`);
  const port = flags.port === undefined ? 9100 : Number(flags.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) throw new UsageError(`worker: --port must be a port number (got '${flags.port}')`);
  // Invited workers get the routers' public fencing key: only router-signed lease tokens then count.
  const fencingKey = flags["fencing-key"] ?? process.env.SWITCHYARD_WORKER_FENCING_KEY;
  if (fencingKey !== undefined) {
    try {
      parseFencingPublicKey(fencingKey);
    } catch (err) {
      throw new UsageError(`worker: --fencing-key: ${(err as Error).message}`);
    }
    if (!flags.id) throw new UsageError("worker: --fencing-key needs --id (tokens are signed for one worker id)");
  }
  // No seed / Sentinel check here: an invited worker's ACL user may run only
  // what a heartbeat needs (and CLUSTER SLOTS); routers do the checking.
  const redis = connectRedis(target, { readyCheck: false });
  redis.on("error", () => {}); // surfaced through heartbeat failures
  const registry = new RedisRegistryStore(redis, flags["key-prefix"] ?? config.redis.keyPrefix);
  // The agent validates what the flags amount to (config.ts): a bad value is a usage error, not a crash.
  const agent = await startAgent({
    registry,
    models,
    token,
    device,
    workerId: flags.id,
    host: flags.host ?? "0.0.0.0",
    port,
    advertise: flags.advertise,
    engineBinary: flags.engine,
    maxBatch: flags["max-batch"] ? Number(flags["max-batch"]) : undefined,
    // The context each sequence may fill (prompt + answer), and the memory the models and their KV may take.
    ...(flags["max-seq-len"] !== undefined ? { maxSeqLen: Number(flags["max-seq-len"]) } : {}),
    ...(flags["memory-budget-mb"] !== undefined ? { memoryBudget: Number(flags["memory-budget-mb"]) * 1024 * 1024 } : {}),
    ...(flags["engine-stall-ms"] !== undefined ? { engineStallMs: Number(flags["engine-stall-ms"]) } : {}),
    // A worker with a stable id remembers the newest lease it served across
    // restarts, so a superseded holder cannot slip in after one.
    // (--fencing-state FILE puts it elsewhere.)
    fencingStatePath: flags["fencing-state"] ?? (flags.id ? path.join(defaultCacheDir(), "workers", `${flags.id}.fence`) : undefined),
    ...(fencingKey ? { fencingKey } : {}),
    ...(layers ? { layers } : {}),
    // The next shard of a split model, and the credential it accepts (default: this worker's own).
    ...(flags.next ? { next: { url: flags.next, token: flags["next-token"] ?? token } } : {}),
    ...(flags["shard-keepalive"] !== undefined ? { shardKeepaliveMs: Number(flags["shard-keepalive"]) } : {}),
  }).catch((err: unknown) => {
    redis.disconnect();
    throw err instanceof WorkerConfigError ? new UsageError(`worker: ${err.message}`) : err;
  });
  if (layers) {
    // A range outside the model is refused at load: say so and exit, not restart forever.
    try {
      await agent.supervisor.whenReady();
    } catch (err) {
      await agent.stop();
      redis.disconnect();
      throw new UsageError(`worker: ${(err as Error).message}`);
    }
  }
  process.stderr.write(`worker ${agent.id} serving ${agent.models.map((m) => m.name).join(", ")} at ${agent.url} (redis: ${describeRedisTarget(target)})\n`);
  const sig = await untilSignal();
  process.stderr.write(`${sig}: draining\n`);
  await agent.stop();
  redis.disconnect();
  return 0;
}
