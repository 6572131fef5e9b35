// A sim worker as a host of its own (run inside a network namespace): listens
// on HOST:PORT, advertises ADVERTISE, heartbeats with its invited Redis user
// through the same client the `switchyard worker` command uses, answers with
// "from <id>" so a test sees who served. Env: WORKER_ID, HOST, PORT,
// ADVERTISE, REDIS_URL, PREFIX, TOKEN, MODELS, TOKENS, INTER_TOKEN_MS.
import { connectRedis, RedisRegistryStore } from "@switchyard/state";
import { SimWorker } from "#testkit/sim-worker";

const env = process.env;
const need = (k: string) => env[k] ?? (process.stderr.write(`sim-host: ${k} is required\n`), process.exit(2));
const id = need("WORKER_ID");
const redis = connectRedis(need("REDIS_URL"), { readyCheck: false });
redis.on("error", () => {}); // heartbeats fail meanwhile, as the agent's do
const registry = new RedisRegistryStore(redis, env.PREFIX ?? "sy:");
const tokens = Number(env.TOKENS ?? 5);
const w = await new SimWorker({
  id,
  models: (env.MODELS ?? "sim").split(","),
  token: need("TOKEN"),
  host: need("HOST"),
  port: Number(need("PORT")),
  behavior: { text: Array.from({ length: tokens }, (_, i) => (i === 0 ? `from ${id}` : ` .`)).join(""), tokens, interTokenMs: Number(env.INTER_TOKEN_MS ?? 0) },
}).start();
// SimWorker names itself by 127.0.0.1; on a host of its own it is reached by its address.
w.url = need("ADVERTISE");
const beat = () => void registry.publish(w.record(), 3000).catch(() => {});
beat();
const timer = setInterval(beat, 1000);
process.stdout.write(`listening ${w.url}\n`);
process.on("SIGTERM", () => {
  clearInterval(timer);
  void registry
    .remove(id)
    .catch(() => {})
    .finally(() => void w.stop().then(() => process.exit(0)));
});
