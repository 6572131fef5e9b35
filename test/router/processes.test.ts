// `switchyard router --processes 2` as operators start it: two router
// processes share the public port, the primary serves the admin port with
// their metrics added up, and a router process killed with SIGKILL is
// restarted while the other keeps serving.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { request } from "node:http";
import path from "node:path";
import { createKey, createTenant } from "@switchyard/db";
import { ROUTER_SEMI_SPACE_MB } from "@switchyard/router";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startSimProcess, type SimProcess } from "../helpers/sim-process.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { createTestDb, createTestRedis, REDIS_URL, sleep, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";

let db: TestDb;
let redis: TestRedis;
let sim: SimProcess;
let router: RouterProc;
let key: string;

type ProcessInfo = { pid: number; ready: boolean };
type Readyz = { status: string; processes: ProcessInfo[]; restarts: number };

// The public port answers first; the primary opens the admin port once every process has started.
const readyz = (): Promise<Readyz> => fetch(`${router.adminUrl}/readyz`).then((r) => r.json() as Promise<Readyz>, () => ({ status: "down", processes: [], restarts: 0 }));
const metrics = async (pid?: number): Promise<string> => (await fetch(`${router.adminUrl}/metrics${pid ? `?process=${pid}` : ""}`)).text();
const sample = (text: string, series: string): number => {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : NaN;
};
const chatOk = `switchyard_requests_total{route="/v1/chat/completions",status="200"}`;

/** One chat request on a connection of its own: the primary hands each connection to the next process. */
function chat(): Promise<number> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: "sim", messages: [{ role: "user", content: "hi" }] });
    const req = request(`${router.url}/v1/chat/completions`, { method: "POST", agent: false, headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.setTimeout(10_000, () => req.destroy(new Error("no answer in 10 s")));
    req.on("error", reject);
    req.end(body);
  });
}

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  const t = await createTenant(db.db, "procs");
  if (!t.ok) throw new Error("tenant");
  key = (await createKey(db.db, t.tenant.id)).key;
  sim = await startSimProcess({ id: "w1", redisUrl: REDIS_URL, prefix: redis.prefix });
  router = await spawnRouter({ DATABASE_URL: db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix, SWITCHYARD_ROUTER__PROCESSES: "2" }, "router×2");
  await waitFor(async () => (await readyz()).processes.length === 2 && (await readyz()).processes.every((p) => p.ready), { timeoutMs: 60_000, what: "two ready router processes" });
  await waitFor(async () => (await chat()) === 200, { timeoutMs: 20_000, what: "the sim worker routed" });
}, 120_000);

afterAll(async () => {
  await router?.stop();
  await sim?.kill();
  await redis?.cleanup();
  await db?.drop();
});

describe("switchyard router --processes 2", () => {
  it("the admin /metrics adds up both processes, and each process's own metrics are there by pid", async () => {
    for (let i = 0; i < 40; i++) expect(await chat()).toBe(200);
    const { processes } = await readyz();
    expect(processes).toHaveLength(2);
    const own = await Promise.all(processes.map((p) => metrics(p.pid)));
    const total = await metrics();
    const each = own.map((t) => sample(t, chatOk));
    // Connections are handed out round-robin: both served some.
    for (const n of each) expect(n).toBeGreaterThan(0);
    expect(sample(total, chatOk)).toBe(each[0]! + each[1]!);
    expect(sample(total, chatOk)).toBeGreaterThanOrEqual(41);
    expect(sample(total, "switchyard_router_processes")).toBe(2);
    // Counters and histograms are summed, CPU per request recomputed from the sums.
    const cpu = sample(total, "process_cpu_seconds_total");
    expect(cpu).toBeCloseTo(sample(own[0]!, "process_cpu_seconds_total") + sample(own[1]!, "process_cpu_seconds_total"), 0);
    // The loop keeps sampling between the reads: the sum read later is at least the parts read before.
    expect(sample(total, "switchyard_event_loop_delay_seconds_count")).toBeGreaterThanOrEqual(
      sample(own[0]!, "switchyard_event_loop_delay_seconds_count") + sample(own[1]!, "switchyard_event_loop_delay_seconds_count"),
    );
    expect(sample(total, 'switchyard_event_loop_delay_seconds_bucket{le="+Inf"}')).toBeGreaterThan(0);
    expect(total).toMatch(/# TYPE switchyard_gc_pauses_total counter/);
    expect(sample(total, "switchyard_cpu_seconds_per_request")).toBeGreaterThan(0);
    // Shared state seen by each process is not doubled: workers by state take the max.
    expect(sample(total, 'switchyard_workers{state="ready"}')).toBe(1);
  });

  it("each router process runs with the router's semi-space (the primary started without one)", async () => {
    const { processes } = await readyz();
    expect(processes).toHaveLength(2);
    for (const p of processes) {
      const argv = readFileSync(`/proc/${p.pid}/cmdline`, "utf8").split("\0");
      expect(argv, `process ${p.pid}`).toContain(`--max-semi-space-size=${ROUTER_SEMI_SPACE_MB}`);
    }
    expect(readFileSync(`/proc/${router.proc.child.pid}/cmdline`, "utf8").split("\0").some((a) => a.includes("semi-space"))).toBe(false);
  });

  it("a router process killed with SIGKILL is restarted; the listener keeps answering meanwhile", async () => {
    const before = (await readyz()).processes.map((p) => p.pid);
    expect(before).toHaveLength(2);
    process.kill(before[0]!, "SIGKILL");
    // node:cluster hands each connection to a process over IPC: one handed over in the instant
    // before the primary sees the death is lost (a load balancer retries it). Send once it has.
    await waitFor(async () => (await readyz()).restarts === 1, { timeoutMs: 10_000, intervalMs: 20, what: "the primary seeing the death" });
    // The other process serves while the primary forks a replacement.
    let served = 0;
    const replaced = await waitFor(
      async () => {
        // A connection handed to the process as it died is reset: that request is lost, not the listener.
        if ((await chat()) === 200) served++;
        const now = await readyz();
        const pids = now.processes.filter((p) => p.ready).map((p) => p.pid);
        return pids.length === 2 && !pids.includes(before[0]!) && pids.includes(before[1]!) ? now : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: "the killed router process replaced" },
    );
    expect(served).toBeGreaterThan(0);
    expect(replaced.restarts).toBe(1);
    expect(sample(await metrics(), "switchyard_router_process_restarts_total")).toBe(1);
    // The new process serves too.
    await sleep(200);
    for (let i = 0; i < 10; i++) expect(await chat()).toBe(200);
    const fresh = replaced.processes.find((p) => p.pid !== before[1])!;
    await waitFor(async () => sample(await metrics(fresh.pid), chatOk) > 0, { timeoutMs: 10_000, what: "the new process answering" });
  }, 90_000);

  it("SIGTERM to the primary drains both processes and exits 0", async () => {
    const pids = (await readyz()).processes.map((p) => p.pid);
    const exit = new Promise<number | null>((r) => router.proc.child.once("exit", (code) => r(code)));
    router.proc.child.kill("SIGTERM");
    expect(await exit).toBe(0);
    for (const pid of pids) expect(() => process.kill(pid, 0)).toThrow();
  }, 30_000);
});

describe("switchyard router --processes 4 stopped while starting", () => {
  it("SIGTERM as soon as the first process listens ends the ones still starting too, and exits", async () => {
    // A stop message sent to a process that has not started yet would be lost
    // (it listens for none), and the primary would wait for it forever.
    const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
    const env = { ...process.env, SWITCHYARD_CONFIG: "", DATABASE_URL: db.url, REDIS_URL, SWITCHYARD_REDIS__KEY_PREFIX: redis.prefix, SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0", SWITCHYARD_ROUTER__PROCESSES: "4" };
    const child = spawn(process.execPath, [bin, "router"], { env, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const exit = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    try {
      await waitFor(() => /router listening/.test(out), { timeoutMs: 60_000, what: () => `a first router process:\n${out.slice(-2000)}` });
      child.kill("SIGTERM");
      const code = await Promise.race([exit, sleep(20_000).then(() => "still running after 20 s")]);
      expect(code, out.slice(-2000)).toBe(0);
    } finally {
      child.kill("SIGKILL");
    }
  }, 90_000);
});
