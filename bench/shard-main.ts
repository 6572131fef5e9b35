// One shard worker in its own process, for `bench split`'s replacement phase
// (a process that can be SIGKILLed mid-stream). Env: MODEL, LAYERS
// ("start-end"), WORKER_ID, TOKEN, THREADS, MAX_BATCH, MAX_SEQ_LEN. Prints
// `ready <url>` once warmed up; no registry (the bench signs the route).
import { startAgent } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";

const env = process.env;
const [start, end] = (env.LAYERS ?? "").split("-").map(Number);
const agent = await startAgent({
  registry: new MemoryRegistryStore(),
  models: [env.MODEL!],
  token: env.TOKEN!,
  device: "cpu",
  workerId: env.WORKER_ID!,
  maxBatch: Number(env.MAX_BATCH ?? 16),
  maxSeqLen: Number(env.MAX_SEQ_LEN ?? 512),
  threads: Number(env.THREADS ?? 1),
  drainGraceMs: 0,
  layers: { start: start!, end: end! },
  log: () => {},
});
await agent.supervisor.whenReady();
process.stdout.write(`ready ${agent.url}\n`);
process.on("SIGTERM", () => void agent.stop().then(() => process.exit(0)));
