// A shard that vanishes without closing its connection (issue 11): a host
// gone or partitioned sends no FIN or RST, so only the shard link's keepalive
// can tell. Here the tails are `switchyard worker` processes frozen with
// SIGSTOP mid-stream — the kernel keeps their sockets open and acknowledges
// bytes, but nothing answers. The head (keepalive 1.5 s) takes the silent
// tail for lost: with a replica the stream continues there with the unsplit
// model's exact text and no error event; without one it ends with the one
// SSE error event — each within a bounded time, not the request's deadline.
// And a shard drops a connecting peer that stops pinging.
import { spawn, type ChildProcess } from "node:child_process";
import http from "node:http";
import type { Socket } from "node:net";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAgent, type AgentHandle } from "@switchyard/agent";
import { encodeShardRoute, MemoryRegistryStore, SHARD_ROUTE_HEADER, signShardRoute } from "@switchyard/state";
import { EXPECT_HEADERS, KEEPALIVE_HEADER, SHARD_PATH, SHARD_PROTOCOL } from "../../workers/agent/src/shard/link.ts";
import type { PipelineHead } from "../../workers/agent/src/shard/pipeline.ts";
import { createTestRedis, REDIS_URL, type TestRedis } from "../helpers/env.ts";
import { engineBinary, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const CLI = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const KEEPALIVE_MS = 1500;
/** Detection (the keepalive) plus reopening and re-prefilling, generously: a loaded 2-core box. */
const BOUND_MS = KEEPALIVE_MS + 8000;

let redis: TestRedis;
let whole: AgentHandle;
let head: AgentHandle;
interface Tail {
  id: string;
  url: string;
  child: ChildProcess;
}
const tails: Tail[] = [];

async function spawnTail(id: string): Promise<Tail> {
  const child = spawn(
    process.execPath,
    [CLI, "worker", "--redis", REDIS_URL, "--key-prefix", redis.prefix, "--token", WORKER_TOKEN, "--model", LLM, "--engine", engineBinary(), "--device", "cpu", "--port", "0", "--host", "127.0.0.1", "--id", id, "--layers", "15-30", "--max-batch", "4"],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let err = "";
    child.stderr!.on("data", (d: Buffer) => {
      err = (err + d.toString()).slice(-20_000);
      const m = / at (http:\/\/\S+)/.exec(err);
      if (m) resolve(m[1]!);
    });
    child.once("exit", (code) => reject(new Error(`${id} exited ${code}: ${err}`)));
  });
  const t = { id, url, child };
  tails.push(t);
  return t;
}

const agentOpts = { models: [LLM], token: WORKER_TOKEN, device: "cpu" as const, engineBinary: engineBinary(), maxBatch: 4, maxSeqLen: 512, drainGraceMs: 0, threads: 1, log: () => {} };

beforeAll(async () => {
  redis = await createTestRedis();
  [whole, head] = await Promise.all([
    startAgent({ ...agentOpts, registry: new MemoryRegistryStore(), workerId: "vanish-whole" }),
    startAgent({ ...agentOpts, registry: new MemoryRegistryStore(), workerId: "vanish-head", layers: { start: 0, end: 15 }, shardKeepaliveMs: KEEPALIVE_MS }),
    spawnTail("vanish-tail-a"),
    spawnTail("vanish-tail-b"),
  ]);
  await Promise.all([whole.supervisor.whenReady(), head.supervisor.whenReady()]);
}, 180_000);

afterAll(async () => {
  // SIGKILL ends a stopped process too.
  for (const t of tails) t.child.kill("SIGKILL");
  await Promise.all([whole?.stop(), head?.stop()]);
  await redis?.cleanup();
});

const story = [{ role: "user", content: "Tell me a long story about a lighthouse keeper and a storm." }];

async function reference(maxTokens: number): Promise<string> {
  const res = await fetch(`${whole.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: maxTokens }),
  });
  return ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
}

/** A greedy chat streamed from the head along a route through `replicas` (in that order); `freeze` runs after the first text. */
async function streamFreezing(maxTokens: number, replicas: Tail[], freeze: () => void): Promise<{ text: string; events: string[]; afterFreezeMs: number; endMs: number }> {
  const route = signShardRoute({ model: LLM, digest: head.ctx.shardHead!.digest, stages: [{ start: 15, end: 30, hops: replicas.map((t) => ({ id: t.id, url: t.url })) }] }, () => WORKER_TOKEN, Date.now() + 60_000)!;
  const res = await fetch(`${head.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json", [SHARD_ROUTE_HEADER]: encodeShardRoute(route) },
    body: JSON.stringify({ model: LLM, messages: story, temperature: 0, max_tokens: maxTokens, stream: true }),
    signal: AbortSignal.timeout(60_000),
  });
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  const dec = new TextDecoder();
  let raw = "";
  let frozenAt = 0;
  let afterFreezeMs = -1;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    const chunk = dec.decode(value, { stream: true });
    raw += chunk;
    if (frozenAt && afterFreezeMs < 0 && (chunk.includes('"content":"') || chunk.includes('{"error"'))) afterFreezeMs = performance.now() - frozenAt;
    if (!frozenAt && raw.includes('"content":"')) {
      freeze();
      frozenAt = performance.now();
    }
  }
  const endMs = performance.now() - frozenAt;
  const events = raw
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice(6));
  let text = "";
  for (const e of events) {
    if (e === "[DONE]" || e.startsWith('{"error"')) continue;
    text += (JSON.parse(e) as { choices: { delta?: { content?: string } }[] }).choices[0]?.delta?.content ?? "";
  }
  if (process.env.SY_TEST_LOG) console.info(`stream: freeze → next event ${afterFreezeMs.toFixed(0)} ms, → end ${endMs.toFixed(0)} ms`);
  return { text, events, afterFreezeMs, endMs };
}

const stopped = (t: Tail) => t.child.exitCode === null && t.child.signalCode === null;

describe("a shard that vanishes without closing its connection", () => {
  it("a frozen tail is taken for lost by the keepalive: the stream continues on its replica with the unsplit text, no error event", async () => {
    const [a, b] = tails;
    const maxTokens = 48;
    const want = await reference(maxTokens);
    const pipeline = head.ctx.shardHead!.pipeline as PipelineHead;
    const before = pipeline.rebuilt.sequences;
    const { text, events, afterFreezeMs } = await streamFreezing(maxTokens, [a!, b!], () => a!.child.kill("SIGSTOP"));
    expect(events.filter((e) => e.startsWith('{"error"'))).toEqual([]);
    expect(events.at(-1)).toBe("[DONE]");
    expect(text).toBe(want);
    expect(pipeline.rebuilt.sequences).toBe(before + 1);
    // Detected by silence, not by a closed connection: the frozen tail still exists.
    expect(stopped(a!)).toBe(true);
    expect(afterFreezeMs).toBeGreaterThan(0);
    expect(afterFreezeMs).toBeLessThan(BOUND_MS);
  }, 120_000);

  it("with no replica left, a frozen tail ends the stream with the one SSE error event, within the bound", async () => {
    const b = tails[1]!;
    const { events, endMs } = await streamFreezing(200, [b], () => b.child.kill("SIGSTOP"));
    const errors = events.filter((e) => e.startsWith('{"error"'));
    expect(errors).toHaveLength(1);
    expect(events.at(-1)).toBe(errors[0]);
    expect(endMs).toBeLessThan(BOUND_MS);
  }, 120_000);

  it("a shard drops a connecting peer that asked for a keepalive and then went silent", async () => {
    const c = await spawnTail("vanish-tail-c");
    // A static (--next) connection by hand: the right credential and expectations, then not a byte more — no pings.
    const socket = await new Promise<Socket>((resolve, reject) => {
      const req = http.request(new URL(SHARD_PATH, c.url), {
        headers: {
          authorization: `Bearer ${WORKER_TOKEN}`,
          connection: "Upgrade",
          upgrade: SHARD_PROTOCOL,
          [KEEPALIVE_HEADER]: "600",
          [EXPECT_HEADERS.model]: LLM,
          [EXPECT_HEADERS.digest]: head.ctx.shardHead!.digest,
          [EXPECT_HEADERS.layerStart]: "15",
        },
      });
      req.on("upgrade", (res, s) => {
        // It said it holds the sender to the keepalive asked for.
        expect(res.headers[KEEPALIVE_HEADER]).toBe("600");
        resolve(s);
      });
      req.on("response", (res) => reject(new Error(`refused: ${res.statusCode}`)));
      req.on("error", reject);
      req.end();
    });
    const t0 = performance.now();
    socket.on("end", () => socket.destroy());
    socket.resume();
    await new Promise<void>((resolve) => socket.once("close", () => resolve()));
    const ms = performance.now() - t0;
    expect(ms).toBeGreaterThanOrEqual(500);
    // The keepalive, then the next check; generously (a loaded box delays timers).
    expect(ms).toBeLessThan(600 + 10_000);
  }, 120_000);
});
