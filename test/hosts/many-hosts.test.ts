// Many hosts (issue 12, item 4): the router, Redis, Postgres and three workers
// each on a "host" of their own — a network namespace on one bridge, nothing
// on 127.0.0.1. A worker joins the way an operator joins one (`workers invite`
// on the admin host, then the printed `switchyard worker` command on the GPU
// host) and serves SmolLM2 on the real engine; two sim workers take the
// failover cases: a cable cut mid-traffic, and a partition between one worker
// and Redis only (it leaves rotation within the heartbeat TTL and comes back
// once the partition heals).
import { rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import { Redis } from "ioredis";
import { defaultCacheDir } from "@switchyard/agent";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sleep, waitFor } from "../helpers/env.ts";
import { Fabric, startNsPostgres, startNsRedis, type NsPostgres, type NsProcess, type NsRedis } from "../helpers/netns.ts";
import { engineBinary } from "../helpers/worker.ts";

const root = path.resolve(import.meta.dirname, "../..");
const CLI = path.join(root, "apps/cli/bin/switchyard.mjs");
const SIM_HOST = path.join(import.meta.dirname, "sim-host.ts");
const SECRET_KEY = "many-hosts-secret-key-0123456789";
const REDIS_PASSWORD = "many-hosts-admin-pass";
const TTL_MS = 3000; // the heartbeat TTL of workers and sims
const POLL_MS = 250; // registry.pollMs (default)
const REAL_ID = "netns-real";

let fabric: Fabric;
let redis: NsRedis;
let pg: NsPostgres;
let admin: Redis;
let router: NsProcess;
let routerUrl: string;
let apiKey: string;
const sims = new Map<string, NsProcess>();
let real: NsProcess | undefined;

/** The environment of every process on a fabric host: only fabric addresses, nothing inherited that names 127.0.0.1. */
function hostEnv(extra: Record<string, string> = {}): Record<string, string | undefined> {
  const env: Record<string, string | undefined> = { REDIS_URL: redis.adminUrl, DATABASE_URL: pg.url, SWITCHYARD_WORKER_SECRET_KEY: SECRET_KEY, SWITCHYARD_LOG__LEVEL: "warn", ...extra };
  for (const k of Object.keys(process.env)) if ((k.startsWith("SWITCHYARD_") || k.startsWith("TEST_")) && !(k in env)) env[k] = undefined;
  return env;
}

/** A worker host knows only what its join command tells it. */
function workerEnv(): Record<string, string | undefined> {
  return { ...hostEnv(), REDIS_URL: undefined, DATABASE_URL: undefined, SWITCHYARD_WORKER_SECRET_KEY: undefined };
}

/** `switchyard ARGS…` on the admin host (the router's), to completion. */
async function cli(args: string[]): Promise<string> {
  const r = await fabric.run("router", process.execPath, [CLI, ...args], hostEnv());
  if (r.code !== 0) throw new Error(`switchyard ${args.join(" ")} exited ${r.code}: ${r.stderr}`);
  return r.stdout;
}

/** The words of a printed shell command (single quotes as the invite prints them). */
function shellWords(line: string): string[] {
  const words: string[] = [];
  for (const m of line.trim().matchAll(/'([^']*)'|(\S+)/g)) words.push(m[1] ?? m[2]!);
  return words;
}

async function invite(name: string, model: string): Promise<string[]> {
  const host = fabric.host(name);
  const out = await cli(["workers", "invite", name, "--model", model, "--advertise", `http://${host.ip}:9100`]);
  const words = shellWords(out.split("\n").find((l) => l.includes("switchyard worker"))!);
  expect(words.slice(0, 3)).toEqual(["npx", "switchyard", "worker"]);
  return words.slice(3);
}

async function startSim(name: string, model = "sim-chat"): Promise<void> {
  const args = await invite(name, model);
  const flag = (f: string) => args[args.indexOf(f) + 1]!;
  const host = fabric.host(name);
  const p = fabric.spawn(name, process.execPath, ["--import", "tsx", SIM_HOST], {
    ...workerEnv(),
    WORKER_ID: flag("--id"),
    REDIS_URL: flag("--redis"),
    TOKEN: flag("--token"),
    HOST: host.ip,
    PORT: "9100",
    ADVERTISE: flag("--advertise"),
    MODELS: model,
    TOKENS: "5",
    INTER_TOKEN_MS: "10",
  });
  await p.waitFor(/listening/, 30_000);
  sims.set(name, p);
}

interface Answer {
  status: number;
  servedBy?: string;
  route: string;
  start: number;
  end: number;
  body: string;
}

async function chat(model = "sim-chat"): Promise<Answer> {
  const start = Date.now();
  try {
    const res = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "x-switchyard-debug": "route" },
      // Short answers: a loaded CPU engine stays well inside deadlines.headersMs.
      body: JSON.stringify({ model, max_tokens: 8, messages: [{ role: "user", content: "hi" }] }),
      signal: AbortSignal.timeout(20_000),
    });
    const body = await res.text();
    let servedBy: string | undefined;
    if (res.status === 200) servedBy = /from (\S+)/.exec((JSON.parse(body) as { choices: Array<{ message: { content: string } }> }).choices[0]!.message.content)?.[1];
    return { status: res.status, servedBy, route: res.headers.get("x-switchyard-route") ?? "", start, end: Date.now(), body };
  } catch (err) {
    return { status: 0, route: "", start, end: Date.now(), body: (err as Error).message };
  }
}

/** One streamed chat: who served it (its content) and when its first byte reached the client. */
async function streamChat(model: string): Promise<{ id: string; firstByteMs: number }> {
  const t0 = performance.now();
  const res = await fetch(`${routerUrl}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "hi" }] }),
    signal: AbortSignal.timeout(20_000),
  });
  expect(res.status).toBe(200);
  let firstByteMs = NaN;
  let text = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) {
    if (Number.isNaN(firstByteMs)) firstByteMs = performance.now() - t0;
    text += decoder.decode(chunk, { stream: true });
  }
  const content = text
    .split("\n")
    .filter((l) => l.startsWith("data: {"))
    .map((l) => (JSON.parse(l.slice(6)) as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content ?? "")
    .join("");
  return { id: /from (\S+)/.exec(content)?.[1] ?? `? ${text.slice(0, 200)}`, firstByteMs };
}

/** Requests from `concurrency` clients until `stop()`; every answer kept. */
function traffic(concurrency: number) {
  const answers: Answer[] = [];
  let running = true;
  const loops = Array.from({ length: concurrency }, async () => {
    while (running) answers.push(await chat());
  });
  return {
    answers,
    served: (id: string) => answers.filter((a) => a.servedBy === id).length,
    stop: async () => {
      running = false;
      await Promise.all(loops);
      return answers;
    },
  };
}

const inRotation = async (id: string) => (await chat()).route.includes(`worker:${id} `);

beforeAll(async () => {
  fabric = Fabric.create();
  for (const h of ["router", "redis", "pg", REAL_ID, "sim-a", "sim-b", "sim-fast", "sim-slow"]) fabric.addHost(h);
  redis = await startNsRedis(fabric, "redis", { password: REDIS_PASSWORD });
  admin = new Redis(redis.adminUrl, { maxRetriesPerRequest: 2 });
  pg = await startNsPostgres(fabric, "pg");
  // The admin host migrates and creates a tenant and key; then the router starts there.
  await cli(["migrate"]);
  await cli(["tenants", "create", "hosts"]);
  apiKey = (await cli(["keys", "create", "--tenant", "hosts"])).trim();
  const routerIp = fabric.host("router").ip;
  routerUrl = `http://${routerIp}:8080`;
  // Worker URLs only inside the fabric's network (a list: only a config file can say it, env values are scalars).
  const config = path.join(fabric.tmpDir("config"), "switchyard.yaml");
  writeFileSync(config, `workers:\n  allowedNetworks: ["${fabric.subnet}.0/24"]\n`);
  router = fabric.spawn(
    "router",
    process.execPath,
    [CLI, "router", "--config", config],
    hostEnv({
      SWITCHYARD_HOME: fabric.tmpDir("home"),
      SWITCHYARD_HOST: routerIp,
      SWITCHYARD_PORT: "8080",
      SWITCHYARD_ROUTER__ADMIN_HOST: routerIp,
      SWITCHYARD_ROUTER__ADMIN_PORT: "9090",
      SWITCHYARD_REGISTRY__POLL_MS: String(POLL_MS),
      // A cut cable shows as a connect that never completes, or a request whose answer never comes.
      SWITCHYARD_DEADLINES__CONNECT_MS: "1000",
      SWITCHYARD_DEADLINES__HEADERS_MS: "5000",
    }),
  );
  await waitFor(
    async () => {
      if (router.child.exitCode !== null) throw new Error(`router exited ${router.child.exitCode}:\n${router.output()}`);
      return (await fetch(`${routerUrl}/healthz`).catch(() => undefined))?.status === 200;
    },
    { timeoutMs: 60_000, intervalMs: 100, what: "router healthy in its namespace" },
  );
  await Promise.all([startSim("sim-a"), startSim("sim-b"), startSim("sim-fast", "sim-lat"), startSim("sim-slow", "sim-lat")]);
  await waitFor(async () => (await inRotation("sim-a")) && (await inRotation("sim-b")), { timeoutMs: 20_000, intervalMs: 100, what: "both sims in rotation" });
}, 180_000);

afterAll(async () => {
  admin?.disconnect();
  await real?.stop(10_000);
  // The worker keeps its newest fencing token per id across restarts; this run's is not worth keeping.
  rmSync(path.join(defaultCacheDir(), "workers", `${REAL_ID}.fence`), { force: true });
  await pg?.stop();
  await fabric?.destroy();
  expect(fabric?.leftovers() ?? []).toEqual([]);
}, 60_000);

describe("many hosts", () => {
  it("joins a real worker from its own host (invite → switchyard worker --advertise) and routes SmolLM2 to it", async () => {
    const host = fabric.host(REAL_ID);
    const args = await invite(REAL_ID, "smollm2-135m-instruct");
    expect(args).toContain(`http://${host.ip}:9100`);
    // The printed command as the GPU owner runs it; --device/--engine only pin the prebuilt CPU engine.
    real = fabric.spawn(REAL_ID, process.execPath, [CLI, "worker", ...args, "--device", "cpu", "--engine", engineBinary()], workerEnv());
    await real.waitFor(/serving smollm2-135m-instruct at (\S+)/, 60_000);
    await waitFor(async () => (await chat("smollm2-135m-instruct")).status === 200, { timeoutMs: 90_000, intervalMs: 250, what: () => `real worker answering through the router\n${real!.output()}` });
    const res = await fetch(`${routerUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${apiKey}`, "content-type": "application/json", "x-switchyard-debug": "route" },
      body: JSON.stringify({ model: "smollm2-135m-instruct", stream: true, max_tokens: 12, messages: [{ role: "user", content: "What is a GPU?" }] }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-route")).toContain(`worker:${REAL_ID} `);
    const text = await res.text();
    const content = text
      .split("\n")
      .filter((l) => l.startsWith("data: {"))
      .map((l) => (JSON.parse(l.slice(6)) as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content ?? "")
      .join("");
    expect(content.trim().length).toBeGreaterThan(0);
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    // Every record in the registry names its host's fabric address, none a loopback one.
    const keys = await admin.keys("sy:{registry}:worker:*");
    const records = (await admin.mget(...keys)).map((r) => JSON.parse(r!) as { id: string; url: string });
    expect(records.map((r) => r.id).sort()).toEqual([REAL_ID, "sim-a", "sim-b", "sim-fast", "sim-slow"]);
    for (const r of records) expect(r.url).toBe(`http://${fabric.host(r.id).ip}:9100`);
  }, 180_000);

  it("routes across hosts: both sim workers serve through the router in its own namespace", async () => {
    const t = traffic(4);
    await waitFor(() => t.served("sim-a") >= 3 && t.served("sim-b") >= 3, { timeoutMs: 20_000, what: () => `both sims serving (a=${t.served("sim-a")}, b=${t.served("sim-b")})` });
    const answers = await t.stop();
    expect(answers.filter((a) => a.status !== 200)).toEqual([]);
  }, 60_000);

  it("fails over when a worker's cable is cut mid-traffic: no request started after the cut sees an error", async () => {
    const t = traffic(4);
    await waitFor(() => t.served("sim-b") >= 3, { timeoutMs: 20_000, what: "sim-b serving before the cut" });
    const cutAt = Date.now();
    fabric.cutLink("sim-b");
    // Long enough for sim-b's record to expire (its heartbeats are cut too) and for the router to see it.
    await sleep(TTL_MS + POLL_MS + 3000);
    const answers = await t.stop();
    const after = answers.filter((a) => a.start >= cutAt);
    const during = answers.filter((a) => a.start < cutAt && a.end >= cutAt);
    const slowest = Math.max(...after.map((a) => a.end - a.start));
    console.log(`cut link: ${after.length} requests after the cut, all 200: ${after.every((a) => a.status === 200)}; slowest ${slowest} ms; in flight at the cut: ${during.map((a) => a.status).join(",") || "none"}`);
    expect(after.length).toBeGreaterThan(10);
    expect(after.filter((a) => a.status !== 200).map((a) => `${a.status} ${a.body.slice(0, 200)}`)).toEqual([]);
    expect(new Set(after.map((a) => a.servedBy))).toEqual(new Set(["sim-a"]));
    // Once its record expired the router no longer even tries sim-b.
    expect(await inRotation("sim-b")).toBe(false);
    // Cable back: its heartbeats reach Redis again and it rejoins.
    const restoredAt = Date.now();
    fabric.restoreLink("sim-b");
    await waitFor(() => inRotation("sim-b"), { timeoutMs: 30_000, intervalMs: 100, what: "sim-b back in rotation after the cable is restored" });
    console.log(`cut link: sim-b back in rotation ${Date.now() - restoredAt} ms after the cable was restored`);
  }, 90_000);

  it("a worker partitioned from Redis only leaves rotation within the TTL (+ a poll) and comes back after the partition heals", async () => {
    await waitFor(() => inRotation("sim-b"), { timeoutMs: 10_000, what: "sim-b in rotation" });
    const samples: Array<{ at: number; status: number; hasB: boolean }> = [];
    const bound = TTL_MS + POLL_MS + 1500; // its last heartbeat landed at most a beat before the partition; slack for a loaded box
    const t0 = Date.now();
    fabric.partition("sim-b", "redis");
    // The router still reaches sim-b: until its record expires it keeps serving, without errors.
    while (Date.now() - t0 < bound + 2500) {
      const a = await chat();
      samples.push({ at: a.start - t0, status: a.status, hasB: a.route.includes("worker:sim-b ") });
      await sleep(50);
    }
    const firstGone = samples[samples.findLastIndex((s) => s.hasB) + 1];
    console.log(`partition: sim-b left rotation ${firstGone?.at} ms after the partition (TTL ${TTL_MS} ms, poll ${POLL_MS} ms); ${samples.length} requests, all 200: ${samples.every((s) => s.status === 200)}`);
    expect(samples.filter((s) => s.status !== 200)).toEqual([]);
    expect(samples[0]!.hasB).toBe(true); // it was in rotation when the partition began
    expect(firstGone, "sim-b still in rotation at the end").toBeDefined();
    expect(firstGone!.at).toBeLessThanOrEqual(bound);
    const healedAt = Date.now();
    fabric.heal("sim-b", "redis");
    await waitFor(() => inRotation("sim-b"), { timeoutMs: 40_000, intervalMs: 100, what: "sim-b back in rotation after the partition heals" });
    console.log(`partition: sim-b back in rotation ${Date.now() - healedAt} ms after the partition healed`);
    // And it serves again.
    const t = traffic(4);
    await waitFor(() => t.served("sim-b") >= 1, { timeoutMs: 15_000, what: "sim-b serving after the heal" });
    expect((await t.stop()).filter((a) => a.status !== 200)).toEqual([]);
  }, 120_000);
  it("a slow link shows up in routing latency: the router prefers the worker behind the fast one", async () => {
    // Its own pair of workers and model, so nothing the other tests did (failures) weighs on the scores.
    // No netem in this kernel: the slow link is a 32 kbit/s one (HTB), every packet sim-slow sends waits its turn.
    fabric.slowLink("sim-slow", 32);
    const answers: Array<{ id: string; firstByteMs: number }> = [];
    try {
      // Each of the two routers gives each worker a trial of minSamples (5)
      // requests before trusting its own p95, so the first ~20 requests are
      // split by design; the last 20 of 60 come after every trial.
      for (let i = 0; i < 60; i++) answers.push(await streamChat("sim-lat"));
    } finally {
      fabric.clearLink("sim-slow");
    }
    const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] ?? NaN;
    const of = (id: string) => answers.filter((a) => a.id === id).map((a) => a.firstByteMs);
    const late = answers.slice(40);
    console.log(
      `slow link: first byte median via the fast link ${median(of("sim-fast")).toFixed(0)} ms (n=${of("sim-fast").length}), via the slow one ${median(of("sim-slow")).toFixed(0)} ms (max ${Math.max(...of("sim-slow")).toFixed(0)}, n=${of("sim-slow").length}); last 20 requests on the fast one: ${late.filter((a) => a.id === "sim-fast").length}`,
    );
    expect(answers.every((a) => a.id === "sim-fast" || a.id === "sim-slow")).toBe(true);
    // The slow link is measured (the router tried it), and it is slower by far
    // more than the noise of a loaded box. Judged by its slowest answer, not
    // its median: HTB lets a burst of 1600 bytes through at line rate, so an
    // answer sent while the bucket is full is as quick as the fast link's,
    // and how many were depends on how soon the router stopped trying it
    // (a CI run had 8 tries and a median of 64 ms; alone the median is 300-400).
    expect(of("sim-slow").length).toBeGreaterThan(0);
    expect(Math.max(...of("sim-slow")) - median(of("sim-fast"))).toBeGreaterThan(100);
    // Once measured, latency-aware routing sends nearly everything over the fast link (epsilon explores a few).
    expect(late.filter((a) => a.id === "sim-fast").length).toBeGreaterThanOrEqual(16);
  }, 120_000);
});
