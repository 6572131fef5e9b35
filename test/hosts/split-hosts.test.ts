// A split model across hosts (issue 11, item 9): the router, Redis, Postgres
// and three shard workers each in a network namespace of their own, created
// and removed by this test; nothing on 127.0.0.1. Each shard joins as an
// operator joins a worker (`workers invite`, then the printed `switchyard
// worker` command plus --layers); the router chains them into a pipeline
// from their heartbeats, and activations go head → middle → tail over the
// fabric. Greedy output through the router equals the unsplit model's,
// streamed and not, and so do hidden states gathered from the three hosts.
// Then a second tail joins and the serving tail's cable is cut mid-stream —
// no FIN, no RST, its packets just stop: the middle shard's keepalive takes
// it for lost, the head rebuilds on the other tail, and the stream goes on
// with the unsplit text and no error event.
import { writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAgent, type AgentHandle } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";
import { waitFor } from "../helpers/env.ts";
import { Fabric, startNsPostgres, startNsRedis, type NsPostgres, type NsProcess, type NsRedis } from "../helpers/netns.ts";
import { engineBinary, WORKER_TOKEN } from "../helpers/worker.ts";

const root = path.resolve(import.meta.dirname, "../..");
const CLI = path.join(root, "apps/cli/bin/switchyard.mjs");
const LLM = "smollm2-135m-instruct";
const SECRET_KEY = "split-hosts-secret-key-0123456789";
const REDIS_PASSWORD = "split-hosts-admin-pass";

let fabric: Fabric;
let redis: NsRedis;
let pg: NsPostgres;
let router: NsProcess;
let routerUrl: string;
let apiKey: string;
let whole: AgentHandle;
const shards = new Map<string, NsProcess>();

/** Only fabric addresses; nothing inherited that names 127.0.0.1. */
function hostEnv(extra: Record<string, string> = {}): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { REDIS_URL: redis.adminUrl, DATABASE_URL: pg.url, SWITCHYARD_WORKER_SECRET_KEY: SECRET_KEY, SWITCHYARD_LOG__LEVEL: "warn", ...extra };
  for (const k of Object.keys(process.env)) if ((k.startsWith("SWITCHYARD_") || k.startsWith("TEST_")) && !(k in env)) env[k] = undefined;
  return env;
}

/** A worker host knows only what its join command tells it. */
const workerEnv = () => ({ ...hostEnv(), REDIS_URL: undefined, DATABASE_URL: undefined, SWITCHYARD_WORKER_SECRET_KEY: undefined });

async function cli(args: string[]): Promise<string> {
  const r = await fabric.run("router", process.execPath, [CLI, ...args], hostEnv());
  if (r.code !== 0) throw new Error(`switchyard ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

/** The printed join command's arguments after `npx switchyard worker`. */
async function invite(name: string): Promise<string[]> {
  const out = await cli(["workers", "invite", name, "--model", LLM, "--advertise", `http://${fabric.host(name).ip}:9100`]);
  const line = out.split("\n").find((l) => l.includes("switchyard worker"))!;
  const words = [...line.trim().matchAll(/'([^']*)'|(\S+)/g)].map((m) => m[1] ?? m[2]!);
  expect(words.slice(0, 3)).toEqual(["npx", "switchyard", "worker"]);
  return words.slice(3);
}

beforeAll(async () => {
  fabric = Fabric.create();
  for (const h of ["router", "redis", "pg", "shard-head", "shard-mid", "shard-tail", "shard-tail-b"]) fabric.addHost(h);
  redis = await startNsRedis(fabric, "redis", { password: REDIS_PASSWORD });
  pg = await startNsPostgres(fabric, "pg");
  await cli(["migrate"]);
  await cli(["tenants", "create", "split"]);
  apiKey = (await cli(["keys", "create", "--tenant", "split"])).trim();
  const routerIp = fabric.host("router").ip;
  routerUrl = `http://${routerIp}:8080`;
  const config = path.join(fabric.tmpDir("config"), "switchyard.yaml");
  writeFileSync(config, `workers:\n  allowedNetworks: ["${fabric.subnet}.0/24"]\n`);
  router = fabric.spawn(
    "router",
    process.execPath,
    [CLI, "router", "--config", config],
    hostEnv({ SWITCHYARD_HOME: fabric.tmpDir("home"), SWITCHYARD_HOST: routerIp, SWITCHYARD_PORT: "8080", SWITCHYARD_ROUTER__ADMIN_HOST: routerIp, SWITCHYARD_ROUTER__ADMIN_PORT: "9090" }),
  );
  // The unsplit reference: a whole worker in this process, off the fabric.
  whole = await startAgent({ registry: new MemoryRegistryStore(), models: [LLM], token: WORKER_TOKEN, device: "cpu", engineBinary: engineBinary(), workerId: "split-hosts-whole", maxBatch: 4, maxSeqLen: 512, drainGraceMs: 0, threads: 1, log: () => {} });
  await waitFor(
    async () => {
      if (router.child.exitCode !== null) throw new Error(`router exited ${router.child.exitCode}:\n${router.output()}`);
      return (await fetch(`${routerUrl}/healthz`).catch(() => undefined))?.status === 200;
    },
    { timeoutMs: 60_000, intervalMs: 100, what: "router healthy in its namespace" },
  );
  await whole.supervisor.whenReady();
}, 180_000);

afterAll(async () => {
  for (const p of shards.values()) await p.stop(10_000);
  await whole?.stop();
  await pg?.stop();
  await fabric?.destroy();
  expect(fabric?.leftovers() ?? []).toEqual([]);
}, 60_000);

async function viaRouter(q: string, stream: boolean): Promise<{ text: string; route: string }> {
  const res = await fetch(`${routerUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "x-switchyard-debug": "route" },
    body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: q }], temperature: 0, max_tokens: 16, stream }),
    signal: AbortSignal.timeout(60_000),
  });
  const body = await res.text();
  expect(res.status, body).toBe(200);
  const route = res.headers.get("x-switchyard-route") ?? "";
  if (!stream) return { text: (JSON.parse(body) as { choices: { message: { content: string } }[] }).choices[0]!.message.content, route };
  expect(body.trimEnd().endsWith("data: [DONE]")).toBe(true);
  const text = body
    .split("\n")
    .filter((l) => l.startsWith("data: {"))
    .map((l) => (JSON.parse(l.slice(6)) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content ?? "")
    .join("");
  return { text, route };
}

/** A greedy chat streamed through the router; `onFirst` runs once the first text arrived (with the route header). */
async function streamVia(q: string, maxTokens: number, onFirst: (route: string) => void): Promise<{ text: string; events: string[]; stallMs: number }> {
  const res = await fetch(`${routerUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "x-switchyard-debug": "route" },
    body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: q }], temperature: 0, max_tokens: maxTokens, stream: true }),
    signal: AbortSignal.timeout(90_000),
  });
  expect(res.status).toBe(200);
  const route = res.headers.get("x-switchyard-route") ?? "";
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let raw = "";
  let firedAt = 0;
  let stallMs = -1;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const chunk = dec.decode(value, { stream: true });
    raw += chunk;
    if (firedAt && stallMs < 0 && (chunk.includes('"content":"') || chunk.includes('{"error"'))) stallMs = performance.now() - firedAt;
    if (!firedAt && raw.includes('"content":"')) {
      onFirst(route);
      firedAt = performance.now();
    }
  }
  const events = raw
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice(6));
  const text = events
    .filter((e) => e !== "[DONE]" && !e.startsWith('{"error"'))
    .map((e) => (JSON.parse(e) as { choices?: { delta?: { content?: string } }[] }).choices?.[0]?.delta?.content ?? "")
    .join("");
  return { text, events, stallMs };
}

async function unsplit(q: string, maxTokens = 16): Promise<string> {
  const res = await fetch(`${whole.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: q }], temperature: 0, max_tokens: maxTokens }),
  });
  expect(res.status).toBe(200);
  return ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
}

const SHARDS = [
  { host: "shard-head", layers: "0-10" },
  { host: "shard-mid", layers: "10-20" },
  { host: "shard-tail", layers: "20-30" },
] as const;

describe("a model split across hosts", () => {
  it("serves greedy output equal to the unsplit model's through the router, on a pipeline it placed across three hosts", async () => {
    const pin = ["--device", "cpu", "--engine", engineBinary()];
    const ids: string[] = [];
    for (const { host, layers } of SHARDS) {
      const args = await invite(host);
      ids.push(args[args.indexOf("--id") + 1]!);
      shards.set(host, fabric.spawn(host, process.execPath, [CLI, "worker", ...args, "--layers", layers, ...pin], workerEnv()));
    }
    for (const p of shards.values()) await p.waitFor(/serving smollm2-135m-instruct at (\S+)/, 90_000);
    // Listed only once the router sees a complete pipeline (all three ready).
    await waitFor(
      async () => {
        const r = await fetch(`${routerUrl}/v1/models`, { headers: { authorization: `Bearer ${apiKey}` } });
        return r.status === 200 && ((await r.json()) as { data: { id: string }[] }).data.some((m) => m.id === LLM);
      },
      { timeoutMs: 90_000, intervalMs: 250, what: () => `the split model listed by the router\n${[...shards.values()].map((p) => p.output()).join("\n")}` },
    );
    for (const q of ["What is the capital of France?", "Write a haiku about the sea."]) {
      const reference = await unsplit(q);
      expect(reference.length).toBeGreaterThan(0);
      for (const stream of [false, true]) {
        const got = await viaRouter(q, stream);
        expect(got.route).toMatch(new RegExp(`^pipeline\\[${ids[0]} 0-10 > ${ids[1]} 10-20 > ${ids[2]} 20-30\\]`));
        expect(got.text).toBe(reference);
      }
    }
  }, 240_000);

  it("gathers hidden states from the three hosts: the same safetensors bytes as the unsplit worker", async () => {
    const body = JSON.stringify({ model: LLM, input: "The lighthouse keeper climbed the stairs.", layers: [0, 7, 10, 15, 20, 30] });
    const ref = await fetch(`${whole.url}/v1/hidden_states`, { method: "POST", headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" }, body });
    expect(ref.status).toBe(200);
    const res = await fetch(`${routerUrl}/v1/hidden_states`, { method: "POST", headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "x-switchyard-debug": "route" }, body });
    const bytes = Buffer.from(await res.arrayBuffer());
    expect(res.status, bytes.toString().slice(0, 300)).toBe(200);
    expect(res.headers.get("x-switchyard-route")).toMatch(/^pipeline\[/);
    expect(bytes.equals(Buffer.from(await ref.arrayBuffer()))).toBe(true);
  }, 60_000);

  it("a tail whose cable is cut mid-stream (no FIN, no RST) is taken for lost by the keepalive and replaced by the other tail: the unsplit text, no error event", async () => {
    const pin = ["--device", "cpu", "--engine", engineBinary()];
    const args = await invite("shard-tail-b");
    const tailB = args[args.indexOf("--id") + 1]!;
    shards.set("shard-tail-b", fabric.spawn("shard-tail-b", process.execPath, [CLI, "worker", ...args, "--layers", "20-30", ...pin], workerEnv()));
    await shards.get("shard-tail-b")!.waitFor(/serving smollm2-135m-instruct at (\S+)/, 90_000);
    // Both tails in the chain the router sends.
    await waitFor(async () => (await viaRouter("Say hi.", false)).route.includes(`|`), { timeoutMs: 30_000, intervalMs: 250, what: "the second tail in the pipeline" });
    const q = "Tell me a long story about a lighthouse keeper and a storm.";
    const want = await unsplit(q, 48);
    let cut = "";
    try {
      const { text, events, stallMs } = await streamVia(q, 48, (route) => {
        // The head takes the first tail the route names: that one's cable is cut.
        const first = /> ([^ |]+)(\|[^ ]+)? 20-30\]/.exec(route)?.[1];
        cut = first === tailB ? "shard-tail-b" : "shard-tail";
        fabric.cutLink(cut);
      });
      expect(events.filter((e) => e.startsWith('{"error"'))).toEqual([]);
      expect(events.at(-1)).toBe("[DONE]");
      expect(text).toBe(want);
      if (process.env.SY_TEST_LOG) console.info(`cut ${cut} → next text ${stallMs.toFixed(0)} ms`);
      // Only the keepalive (5 s by default) can tell, then reopening and re-prefilling; generously.
      expect(stallMs).toBeGreaterThan(0);
      expect(stallMs).toBeLessThan(5000 + 10_000);
    } finally {
      if (cut) fabric.restoreLink(cut);
    }
  }, 240_000);
});
