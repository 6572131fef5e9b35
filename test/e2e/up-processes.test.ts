// `switchyard up --processes 2` as a user runs it: embedded Postgres, a
// private redis-server, two router processes sharing the port under the
// supervisor, and the local worker with the real engine and model. Both
// processes serve, one killed is restarted while requests are served, and
// `up` stops cleanly with its redis-server gone. Without redis-server on
// PATH, --processes 2 is a usage error naming what to install.
import { spawn } from "node:child_process";
import { request } from "node:http";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { engineBinary } from "../helpers/worker.ts";
import { sleep, waitFor } from "../helpers/env.ts";
import { alive } from "#testkit/procs";

const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const greedy = JSON.parse(readFileSync(path.resolve(import.meta.dirname, "../../workers/engine/tests/fixtures/greedy_reference.json"), "utf8")) as {
  cases: { messages?: { role: string; content: string }[]; completion_text: string; stable_prefix_len: number }[];
};
const MODEL = "smollm2-135m-instruct";
const home = mkdtempSync(path.join(tmpdir(), "sy-up-procs-"));
const env = { ...process.env, SWITCHYARD_CONFIG: "", SWITCHYARD_HOME: home, SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0", DATABASE_URL: "", REDIS_URL: "", SWITCHYARD_ROUTER__PROCESSES: "" };
let child: ReturnType<typeof spawn>;
let stderr = "";
let url = "";
let adminUrl = "";
let redisPid = 0;
let key = "";

type Readyz = { status: string; processes: Array<{ pid: number; ready: boolean }>; restarts: number };
const readyz = (): Promise<Readyz> => fetch(`${adminUrl}/readyz`).then((r) => r.json() as Promise<Readyz>, () => ({ status: "down", processes: [], restarts: 0 }));
const metrics = async (pid: number): Promise<string> => (await fetch(`${adminUrl}/metrics?process=${pid}`)).text();
const chatOk = `switchyard_requests_total{route="/v1/chat/completions",status="200"}`;
const sample = (text: string, series: string): number => {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : 0;
};

/** One short chat on a connection of its own: the primary hands each connection to the next process. */
function chat(): Promise<number> {
  return new Promise((resolve, reject) => {
    const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: "hi" }], max_tokens: 2 });
    const req = request(`${url}/v1/chat/completions`, { method: "POST", agent: false, headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "content-length": Buffer.byteLength(body) } }, (res) => {
      res.resume();
      res.on("end", () => resolve(res.statusCode ?? 0));
    });
    req.setTimeout(30_000, () => req.destroy(new Error("no answer in 30 s")));
    req.on("error", reject);
    req.end(body);
  });
}

describe("switchyard up --processes 2", () => {
  beforeAll(async () => {
    engineBinary(); // prepared by scripts/prepare.ts
    child = spawn(process.execPath, [bin, "up", "--processes", "2", "--model", MODEL], { env, stdio: ["ignore", "ignore", "pipe"] });
    child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    await waitFor(() => /Try: curl/.test(stderr) || child.exitCode !== null, { timeoutMs: 180_000, intervalMs: 100, what: () => `up to finish starting:\n${stderr.slice(-2000)}` });
    if (child.exitCode !== null) throw new Error(`up exited ${child.exitCode}:\n${stderr.slice(-2000)}`);
    const m = /Switchyard router: (http:\/\/\S+)\s+\(metrics: (http:\/\/\S+)\/metrics\)/.exec(stderr)!;
    url = m[1]!;
    adminUrl = m[2]!;
    redisPid = Number(/private redis-server for the 2 router processes: pid (\d+)/.exec(stderr)![1]);
    key = readFileSync(path.join(home, "api-key"), "utf8").trim();
  }, 200_000);

  afterAll(async () => {
    if (child && child.exitCode === null) child.kill("SIGKILL");
    // A killed `up` leaves its redis-server (own process group) behind: never leave it running.
    if (redisPid && alive(redisPid)) process.kill(redisPid, "SIGKILL");
    await sleep(200);
    rmSync(home, { recursive: true, force: true });
  });

  it("runs two router processes on a private redis-server, and serves chat from the real model", async () => {
    expect(alive(redisPid)).toBe(true);
    const r = await readyz();
    expect(r.status).toBe("ready");
    expect(r.processes).toHaveLength(2);
    const client = new OpenAI({ apiKey: key, baseURL: `${url}/v1`, maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual([MODEL]);
    // Each process sees the worker from its own registry snapshot: listed
    // is not yet ready (a warming worker is listed with ready: false). Wait
    // until fresh connections, whichever process takes them, say ready.
    let readyInARow = 0;
    await waitFor(
      async () => {
        const r = await fetch(`${url}/v1/models`, { headers: { authorization: `Bearer ${key}`, connection: "close" } });
        const ready = r.status === 200 && ((await r.json()) as { data: { id: string; ready?: boolean }[] }).data.some((m) => m.id === MODEL && m.ready === true);
        readyInARow = ready ? readyInARow + 1 : 0;
        return readyInARow >= 6;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: "the model ready in both router processes" },
    );
    const ref = greedy.cases.find((c) => c.messages?.[0]?.content === "List three primary colors.")!;
    const messages = ref.messages as OpenAI.ChatCompletionMessageParam[];
    const res = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 8 });
    expect(ref.completion_text.startsWith(res.choices[0]!.message.content!)).toBe(true);
    const stream = await client.chat.completions.create({ model: MODEL, messages, temperature: 0, max_tokens: 8, stream: true });
    let text = "";
    for await (const ch of stream) text += ch.choices[0]?.delta.content ?? "";
    expect(text).toBe(res.choices[0]!.message.content);
  }, 60_000);

  it("both router processes serve requests (their own metrics, by pid)", async () => {
    for (let i = 0; i < 12; i++) expect(await chat()).toBe(200);
    const { processes } = await readyz();
    const each = await Promise.all(processes.map(async (p) => sample(await metrics(p.pid), chatOk)));
    for (const n of each) expect(n).toBeGreaterThan(0);
    expect(each[0]! + each[1]!).toBeGreaterThanOrEqual(12);
  }, 120_000);

  it("a router process killed with SIGKILL is restarted, and requests are served meanwhile and after", async () => {
    const before = (await readyz()).processes.map((p) => p.pid);
    expect(before).toHaveLength(2);
    process.kill(before[0]!, "SIGKILL");
    await waitFor(async () => (await readyz()).restarts === 1, { timeoutMs: 10_000, intervalMs: 20, what: "the primary seeing the death" });
    let served = 0;
    const replaced = await waitFor(
      async () => {
        // A connection handed over in the instant of the death is reset: that request is lost, not the listener.
        if ((await chat().catch(() => 0)) === 200) served++;
        const now = await readyz();
        const pids = now.processes.filter((p) => p.ready).map((p) => p.pid);
        return pids.length === 2 && !pids.includes(before[0]!) && pids.includes(before[1]!) ? now : undefined;
      },
      { timeoutMs: 60_000, intervalMs: 100, what: "the killed router process replaced" },
    );
    expect(served).toBeGreaterThan(0);
    const fresh = replaced.processes.find((p) => p.pid !== before[1])!;
    // The new process sees the worker through Redis (its registry poll) and serves.
    await waitFor(
      async () => {
        expect(await chat()).toBe(200);
        return sample(await metrics(fresh.pid), chatOk) > 0;
      },
      { timeoutMs: 30_000, intervalMs: 50, what: "the new process answering" },
    );
  }, 120_000);

  it("SIGTERM stops up cleanly: exit 0, router processes and the redis-server gone", async () => {
    const pids = (await readyz()).processes.map((p) => p.pid);
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    for (const pid of [...pids, redisPid]) expect(alive(pid)).toBe(false);
  }, 60_000);
});

describe("switchyard up --processes 2 without redis-server", () => {
  it("is a usage error naming what to install, before anything starts", async () => {
    const bare = mkdtempSync(path.join(tmpdir(), "sy-up-noredis-"));
    try {
      const p = spawn(process.execPath, [bin, "up", "--processes", "2"], { env: { ...env, SWITCHYARD_HOME: bare, PATH: path.join(bare, "no-bin") }, stdio: ["ignore", "ignore", "pipe"] });
      let err = "";
      p.stderr!.on("data", (d: Buffer) => (err += d.toString()));
      const code = await new Promise<number | null>((r) => p.once("exit", (c) => r(c)));
      expect(code).toBe(2);
      expect(err).toMatch(/--processes 2 needs redis-server on PATH/);
      expect(err).toMatch(/apt-get install redis-server/);
      expect(err).toMatch(/without --processes/);
      // Nothing was started: no embedded database was made.
      expect(() => readFileSync(path.join(bare, "pg", "PG_VERSION"))).toThrow();
    } finally {
      rmSync(bare, { recursive: true, force: true });
    }
  }, 60_000);
});
