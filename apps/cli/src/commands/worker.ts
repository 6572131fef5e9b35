// `switchyard worker`: join this host to a fabric. Fetches the models, builds
// or finds the engine, serves routers and heartbeats into Redis until SIGTERM
// (which drains).
import path from "node:path";
import { defaultCacheDir, startAgent } from "@switchyard/agent";
import { connectRedis, parseFencingPublicKey, RedisRegistryStore } from "@switchyard/state";
import { untilSignal } from "../signals.ts";
import { UsageError } from "../usage.ts";

export interface WorkerFlags {
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
  engine?: string;
  "fencing-key"?: string;
}

export async function workerCommand(flags: WorkerFlags): Promise<number> {
  const redisUrl = flags.redis ?? process.env.REDIS_URL;
  if (!redisUrl) throw new UsageError("worker: --redis redis://… is required (or REDIS_URL)");
  const token = flags.token ?? process.env.SWITCHYARD_WORKER_TOKEN;
  if (!token) throw new UsageError("worker: --token is required (printed by 'switchyard workers invite')");
  const models = flags.model?.length ? flags.model : ["smollm2-135m-instruct"];
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
  const redis = connectRedis(redisUrl, { readyCheck: false });
  redis.on("error", () => {}); // surfaced through heartbeat failures
  const registry = new RedisRegistryStore(redis, flags["key-prefix"] ?? process.env.SWITCHYARD_REDIS__KEY_PREFIX ?? "sy:");
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
    // A worker with a stable id remembers the newest lease it served across
    // restarts, so a superseded holder cannot slip in after one.
    fencingStatePath: flags.id ? path.join(defaultCacheDir(), "workers", `${flags.id}.fence`) : undefined,
    ...(fencingKey ? { fencingKey } : {}),
  });
  process.stderr.write(`worker ${agent.id} serving ${agent.models.map((m) => m.name).join(", ")} at ${agent.url}\n`);
  const sig = await untilSignal();
  process.stderr.write(`${sig}: draining\n`);
  await agent.stop();
  redis.disconnect();
  return 0;
}
