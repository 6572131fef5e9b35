// A sim worker in its own process for benchmarks. Env: PORT, TTFT_MS,
// INTER_TOKEN_MS, TOKENS, and optionally REDIS_URL + PREFIX to heartbeat,
// SLOTS (decode slots: a saturated GPU, see SimWorkerOptions.slots) and
// HEARTBEAT_MS; CAPACITY (advertised, without SLOTS), LOAD_SLOWDOWN (token
// delays grow with concurrency), MODELS (comma-separated), TTL_MS and STATE
// (the advertised state, e.g. degraded).
import { Redis } from "ioredis";
import { RedisRegistryStore, type WorkerState } from "@switchyard/state";
import { SimWorker } from "#testkit/sim-worker";

const env = process.env;
const registry = env.REDIS_URL ? new RedisRegistryStore(new Redis(env.REDIS_URL), env.PREFIX ?? "bench:") : undefined;
const w = await new SimWorker({
  id: env.WORKER_ID ?? "bench-sim",
  models: env.MODELS ? env.MODELS.split(",") : ["sim"],
  registry,
  port: Number(env.PORT ?? 0),
  capacity: env.SLOTS ? Number(env.SLOTS) : env.CAPACITY ? Number(env.CAPACITY) : 100_000,
  slots: env.SLOTS ? Number(env.SLOTS) : undefined,
  heartbeatMs: env.HEARTBEAT_MS ? Number(env.HEARTBEAT_MS) : undefined,
  ttlMs: env.TTL_MS ? Number(env.TTL_MS) : undefined,
  ...(env.STATE ? { state: env.STATE as WorkerState } : {}),
  behavior: { ttftMs: Number(env.TTFT_MS ?? 0), interTokenMs: Number(env.INTER_TOKEN_MS ?? 0), tokens: Number(env.TOKENS ?? 5), ...(env.LOAD_SLOWDOWN ? { loadSlowdown: Number(env.LOAD_SLOWDOWN) } : {}) },
}).start();
process.stdout.write(`listening ${w.url}\n`);
process.on("SIGTERM", () => void w.stop().then(() => process.exit(0)));
