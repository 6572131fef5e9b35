// The stream relay alone, on a real socket: an HTTP server in this process
// answers each request with relayStream (the router's relay, outgoing = the
// Node response) over an in-memory upstream that sends a worker's chat
// chunks; a client in a child process reads the streams. This process's CPU
// (process.cpuUsage: the relay, Node's HTTP and its socket writes, and no
// router admission, auth or Redis) per stream and per event, for events one
// per upstream chunk (a worker streaming tokens) and four per chunk (chunks
// that arrive together under load).
//
//   node --import tsx apps/router/src/relay/micro-bench.ts [streams=3000] [concurrency=100]
//
// Written for issue 14's "SSE relayed by slices" change; it reads the relay's
// API as it is before and after that change (firstEvent's result is spread
// into the leg), so one script measures both trees.
import { fork } from "node:child_process";
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Backend, UpstreamResponse } from "../backends/types.ts";
import { createLogger } from "../observability/log.ts";
import { RouterMetrics } from "../observability/metrics.ts";
import { startAttempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";
import * as sse from "./sse.ts";
import * as stream from "./stream.ts";

const TOKENS = 20;
const chunkJson = (i: number) =>
  JSON.stringify({ id: "chatcmpl-5f0c2a", object: "chat.completion.chunk", created: 1764600000, model: "smollm2-135m-instruct", system_fingerprint: "switchyard", choices: [{ index: 0, delta: { content: ` tok${i}` }, logprobs: null, finish_reason: null }] });
const events = [...Array.from({ length: TOKENS }, (_, i) => `data: ${chunkJson(i)}\n\n`), "data: [DONE]\n\n"];

/** The upstream's body as chunks of `perChunk` events each (fresh Buffers, as a socket read gives). */
function chunksOf(perChunk: number): string[] {
  const out: string[] = [];
  for (let i = 0; i < events.length; i += perChunk) out.push(events.slice(i, i + perChunk).join(""));
  return out;
}

function upstream(perChunk: number): UpstreamResponse {
  const texts = chunksOf(perChunk);
  const body = async function* () {
    for (const t of texts) {
      // Each chunk after a turn of the event loop, as socket reads arrive.
      await new Promise((r) => setImmediate(r));
      yield Buffer.from(t);
    }
  };
  const parseBatches = (sse as { parseSseBatches?: (c: AsyncIterable<Uint8Array>, o: object) => AsyncGenerator<unknown> }).parseSseBatches;
  return {
    text: () => Promise.reject(new Error("stream only")),
    raw: () => {
      throw new Error("stream only");
    },
    events: () => sse.parseSse(body(), { label: "w" }),
    ...(parseBatches ? { batches: () => parseBatches(body(), { label: "w" }) } : {}),
    abort: () => {},
  } as UpstreamResponse;
}

const backend: Backend = { id: "w1", kind: "worker", paid: false, model: "m", supports: () => true, open: () => Promise.reject(new Error("unused")) };
const metrics = new RouterMetrics();
const log = createLogger("error", {}, () => {});

async function serve(req: IncomingMessage, res: ServerResponse, perChunk: number): Promise<void> {
  req.resume();
  const ctx: RelayContext = {
    requestId: "r",
    deadlines: { connectMs: 10_000, headersMs: 10_000, answerMs: 10_000, firstTokenMs: 10_000, idleMs: 10_000, totalMs: 60_000 },
    signal: new AbortController().signal,
    startedAt: performance.now(),
    log,
    metrics,
    maxAttempts: 1,
    route: "chat",
    outgoing: res,
  };
  const a = startAttempt(ctx, backend);
  const up = upstream(perChunk);
  const got = (await stream.firstEvent(backend, up, a, 10_000)) as unknown as Record<string, unknown> & { first: stream.CheckedEvent };
  const leg = { backend, up, a, ttftMs: 0, ...got } as unknown as stream.Leg;
  stream.relayStream(leg, got.first, ctx, performance.now());
}

/** Child: `streams` requests, `concurrency` at a time, each on its own connection, read to the end. */
async function client(url: string, streams: number, concurrency: number): Promise<void> {
  let next = 0;
  let bytes = 0;
  const one = () =>
    new Promise<void>((resolve, reject) => {
      const req = request(url, { method: "POST", agent: false }, (res) => {
        res.on("data", (d: Buffer) => (bytes += d.length));
        res.on("end", () => resolve());
      });
      req.on("error", reject);
      req.end("{}");
    });
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next++ < streams) await one();
    }),
  );
  process.send?.({ bytes });
}

async function main(): Promise<void> {
  if (process.argv[2] === "--client") return client(process.argv[3]!, Number(process.argv[4]), Number(process.argv[5]));
  const streams = Number(process.argv[2] ?? 3000);
  const concurrency = Number(process.argv[3] ?? 100);
  for (const perChunk of [1, 4]) {
    const server = createServer((req, res) => void serve(req, res, perChunk));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
    const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/`;
    const run = async (n: number) => {
      const child = fork(import.meta.filename, ["--client", url, String(n), String(concurrency)], { execArgv: ["--import", "tsx"] });
      const bytes = await new Promise<number>((resolve, reject) => {
        child.once("message", (m) => resolve((m as { bytes: number }).bytes));
        child.once("exit", (code) => (code ? reject(new Error(`client exited ${code}`)) : undefined));
      });
      await new Promise((r) => child.once("exit", r));
      return bytes;
    };
    await run(Math.min(500, streams)); // warm the JIT
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const bytes = await run(streams);
    const wall = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    const cpuMs = (cpu.user + cpu.system) / 1000;
    const want = streams * events.join("").length;
    process.stdout.write(
      `${perChunk} event(s)/chunk: ${streams} streams × ${events.length} events, ${concurrency} at a time: relay-side CPU ${cpuMs.toFixed(0)} ms = ${((cpuMs * 1000) / streams).toFixed(1)} µs/stream, ${((cpuMs * 1000) / (streams * events.length)).toFixed(2)} µs/event (user ${(cpu.user / 1000).toFixed(0)} ms, sys ${(cpu.system / 1000).toFixed(0)} ms); wall ${wall.toFixed(0)} ms; client read ${bytes} bytes${bytes === want ? "" : ` (expected ${want}!)`}\n`,
    );
    await new Promise<void>((r) => server.close(() => r()));
  }
}

await main();
