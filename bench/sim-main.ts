// A sim worker in its own process for benchmarks. Env: PORT, TTFT_MS,
// INTER_TOKEN_MS, TOKENS, and optionally REDIS_URL + PREFIX to heartbeat.
import { Redis } from "ioredis";
import { RedisRegistryStore } from "@switchyard/state";
import { SimWorker } from "../test/fixtures/sim-worker.ts";

const env = process.env;
const registry = env.REDIS_URL ? new RedisRegistryStore(new Redis(env.REDIS_URL), env.PREFIX ?? "bench:") : undefined;
const w = await new SimWorker({
  id: env.WORKER_ID ?? "bench-sim",
  models: ["sim"],
  registry,
  port: Number(env.PORT ?? 0),
  capacity: 100_000,
  behavior: { ttftMs: Number(env.TTFT_MS ?? 0), interTokenMs: Number(env.INTER_TOKEN_MS ?? 0), tokens: Number(env.TOKENS ?? 5) },
}).start();
process.stdout.write(`listening ${w.url}\n`);
process.on("SIGTERM", () => void w.stop().then(() => process.exit(0)));
