// Rolling restart of workers under load (issue 12 item 3): two real
// `switchyard worker` processes (the Candle engine, SmolLM2) behind a router,
// clients sending streamed and plain chat requests all along, each worker in
// turn SIGTERMed (it drains: state draining, in-flight work finished, record
// removed), waited for (exit 0) and started again; the next one goes only
// once the restarted one is routable again. No request may fail.
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { engineBinary } from "../helpers/worker.ts";
import { REDIS_URL, uniqueName, waitFor } from "../helpers/env.ts";
import { readStream, sigterm, sleep } from "./harness.ts";

const MODEL = "smollm2-135m-instruct";
const TOKEN = "rolling-worker-token-0123456789";
const CLIENTS = 6;
const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");

let fx: RouterFixture;
const run = uniqueName("w").slice(-10);
const workers = new Map<string, ChildProcess>();

function startWorker(id: string): ChildProcess {
  const child = spawn(
    process.execPath,
    [bin, "worker", "--redis", REDIS_URL, "--key-prefix", fx.redis.prefix, "--token", TOKEN, "--model", MODEL, "--id", id, "--host", "127.0.0.1", "--port", "0", "--device", "cpu", "--engine", engineBinary(), "--max-batch", "4"],
    { stdio: ["ignore", "ignore", "pipe"] },
  );
  let tail = "";
  child.stderr!.on("data", (d: Buffer) => (tail = (tail + d.toString()).slice(-3000)));
  child.once("exit", (code, sig) => {
    if (code !== 0 && sig !== "SIGKILL") process.stderr.write(`[worker ${id}] exited ${code ?? sig}\n${tail}\n`);
  });
  workers.set(id, child);
  return child;
}

const routable = (id: string) => fx.router.deps.directory.candidates(MODEL).some((w) => w.id === id && w.state === "ready");

beforeAll(async () => {
  fx = await startTestRouter({ "workers.token": TOKEN, "registry.pollMs": 50 });
  for (const n of [1, 2]) startWorker(`${run}-${n}`);
  await waitFor(() => routable(`${run}-1`) && routable(`${run}-2`), { timeoutMs: 120_000, intervalMs: 100, what: "both workers ready" });
}, 180_000);

afterAll(async () => {
  for (const child of workers.values()) if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
  await fx?.close();
});

describe("rolling restart of workers", () => {
  it("restarts each worker in turn under load with 0 failed requests", async () => {
    const results: Array<{ ok: boolean; why?: string; worker?: string; startedAt: number; endedAt: number }> = [];
    let stopping = false;
    const client = async (i: number) => {
      for (let n = 0; !stopping; n++) {
        const stream = (i + n) % 2 === 0;
        const startedAt = Date.now();
        const push = (r: { ok: boolean; why?: string; worker?: string }) => results.push({ ...r, startedAt, endedAt: Date.now() });
        try {
          const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
            method: "POST",
            headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
            body: JSON.stringify({ model: MODEL, stream, max_tokens: 8, temperature: 0, messages: [{ role: "user", content: `Name a colour (${i}.${n}).` }] }),
          });
          const worker = res.headers.get("x-switchyard-backend") ?? undefined;
          if (stream) {
            const r = await readStream(res);
            const ok = !r.failure && r.errors.length === 0 && r.done && r.text.length > 0;
            push({ ok, ...(ok ? {} : { why: r.failure ?? r.errors[0] ?? "no [DONE]" }), ...(worker ? { worker } : {}) });
          } else {
            const body = (await res.json()) as { choices?: Array<{ message?: { content?: string } }> };
            const ok = res.status === 200 && typeof body.choices?.[0]?.message?.content === "string";
            push({ ok, ...(ok ? {} : { why: `${res.status} ${JSON.stringify(body).slice(0, 300)}` }), ...(worker ? { worker } : {}) });
          }
        } catch (err) {
          push({ ok: false, why: `fetch: ${(err as Error).message}` });
        }
      }
    };
    const clients = Array.from({ length: CLIENTS }, (_, i) => client(i));
    await waitFor(() => results.length >= 10, { timeoutMs: 60_000, what: "traffic flowing" });
    const restarts: string[] = [];
    for (const n of [1, 2]) {
      const id = `${run}-${n}`;
      await sleep(1_500);
      // Signal while it serves something: a quiet moment would drain nothing and prove nothing.
      await waitFor(() => fx.router.deps.directory.scorer.inFlight(`worker:${id}`) > 0, { timeoutMs: 30_000, intervalMs: 5, what: `a request in flight on ${id}` });
      const before = results.length;
      const signalledAt = Date.now();
      const exit = await sigterm(workers.get(id)!, 60_000);
      expect(exit.code, `${id} exit`).toBe(0);
      // Requests it was serving at the signal finished during its drain (the others went to the other replica).
      const drained = results.filter((r) => r.worker === `worker:${id}` && r.startedAt < signalledAt && r.endedAt >= signalledAt);
      expect(drained.length, `requests in flight on ${id} at SIGTERM`).toBeGreaterThan(0);
      const during = results.length - before;
      const t0 = Date.now();
      startWorker(id);
      await waitFor(() => routable(id), { timeoutMs: 120_000, intervalMs: 100, what: `${id} routable again` });
      restarts.push(`${id}: ${drained.length} in flight at SIGTERM, drained in ${exit.ms} ms (${during} requests meanwhile), back in ${Date.now() - t0} ms`);
      // Traffic reaches it again before the next one goes.
      const mark = results.length;
      await waitFor(() => results.slice(mark).some((r) => r.worker === `worker:${id}`), { timeoutMs: 60_000, what: `traffic on restarted ${id}` });
    }
    await sleep(1_000);
    stopping = true;
    await Promise.all(clients);
    console.log(`worker rolling restart: ${results.length} requests; ${restarts.join("; ")}`);
    const failed = results.filter((r) => !r.ok);
    expect(failed.slice(0, 5), `${failed.length} of ${results.length} requests failed`).toEqual([]);
    expect(results.length).toBeGreaterThan(30);
  }, 300_000);
});
