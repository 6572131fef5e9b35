// `switchyard bench admission`: does admission control keep interactive
// traffic fast while batch traffic saturates the workers? Sim workers with
// decode slots (a saturated GPU: N sequences decode at once, the rest wait
// first in, first out), 500 closed-loop batch-band streams, an open-loop
// trickle of interactive streams; interactive time-to-first-token idle and
// under that load, through a router with admission on and one with it off,
// side by side in one run. Asserts both directions — on: p99 under load
// ≤ 1.25× idle; off: ≥ 10× idle (so the bench fails if the load stops being
// real) — and exits non-zero when either is not met.
import { setMaxListeners } from "node:events";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { Pool } from "undici";
import { RedisRegistryStore } from "@switchyard/state";
import { openLoop, percentile, type Target } from "./lib/load.ts";
import { freePort, repoRoot, startProc, waitHttp, type Proc } from "#testkit/procs";
import { benchScratch } from "./lib/scratch.ts";

const root = repoRoot();
const REDIS = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";
const cli = path.join(root, "apps/cli/bin/switchyard.mjs");

interface Shape {
  ttftMs: number;
  interTokenMs: number;
  tokens: number;
}

interface Plan {
  workers: number;
  slotsPerWorker: number;
  batchStreams: number;
  batch: Shape;
  interactive: Shape;
  /** Interactive arrivals per second, for this long (open loop). */
  ratePerS: number;
  durationS: number;
  /** Load running before interactive measurements start. */
  warmupS: number;
  rounds: number;
}

const fmt = (x: number, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : "-");
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);
/** The middle value; the mean of the two middle ones for an even count. */
const median = (xs: number[]) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const m = Math.floor(s.length / 2);
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};

interface PhaseResult {
  sent: number;
  ok: number;
  ttft: number[];
  batchDone: number;
  batchPerS: number;
  busy: number[];
  workerQueue: number[];
  routerQueue: number[];
}

/** 500 closed-loop batch streams: each starts its next request when the last one ends, until stopped. */
function batchLoad(url: string, key: string, streams: number, body: string) {
  const pool = new Pool(url, { connections: streams + 8, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });
  const ac = new AbortController();
  setMaxListeners(0, ac.signal); // one listener per stream
  let done = 0;
  const loops = Array.from({ length: streams }, async () => {
    while (!ac.signal.aborted) {
      try {
        const res = await pool.request({
          path: "/v1/chat/completions",
          method: "POST",
          headers: { "content-type": "application/json", authorization: `Bearer ${key}` },
          body,
          signal: ac.signal,
        });
        let tail = "";
        for await (const chunk of res.body) tail = (tail + chunk.toString()).slice(-64);
        if (res.statusCode === 200 && tail.includes("[DONE]")) done++;
        else await sleep(100); // refused: don't spin
      } catch {
        if (!ac.signal.aborted) await sleep(100);
      }
    }
  });
  return {
    get done() {
      return done;
    },
    stop: async () => {
      ac.abort();
      await Promise.all(loops);
      await pool.destroy();
    },
  };
}

export async function runAdmissionBench(opts: { quick: boolean; log?: (line: string) => void }): Promise<number> {
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const plan: Plan = {
    workers: 2,
    slotsPerWorker: 24,
    batchStreams: 500,
    // A prefill long enough that the router's own few milliseconds (and this
    // shared box's jitter) stay small next to it; per-token time fixed.
    batch: { ttftMs: 400, interTokenMs: 50, tokens: 20 },
    interactive: { ttftMs: 400, interTokenMs: 50, tokens: 4 },
    // Enough samples that p99 is not just the single slowest request (this
    // box is shared: one scheduling hiccup should not decide the verdict).
    ratePerS: 16,
    durationS: opts.quick ? 8 : 20,
    warmupS: 3,
    rounds: opts.quick ? 1 : 3,
  };
  const slots = plan.workers * plan.slotsPerWorker;
  const scratch = await benchScratch("adm_");
  const { prefix, dbUrl } = scratch;
  const procs: Proc[] = [];
  const dir = mkdtempSync(path.join(tmpdir(), "sy-bench-adm-"));
  const redis = new Redis(REDIS);
  const registry = new RedisRegistryStore(redis, prefix);
  try {
    const keys = await scratch.tenantKeys(["bench-interactive", "bench-batch"]);
    const configFile = path.join(dir, "switchyard.yaml");
    writeFileSync(
      configFile,
      [
        "admission:",
        // One tenant's 500 batch streams all wait their turn (the per-tenant bound would refuse most of them).
        "  maxQueuedPerTenant: 100000",
        "  tenants:",
        "    bench-interactive: { defaultBand: interactive, maxBand: interactive }",
        "    bench-batch: { defaultBand: batch, maxBand: batch }",
        "  bands:",
        // Every batch stream may wait its turn for as long as the run lasts.
        "    batch: { ttlMs: 600000, maxQueue: 100000 }",
        "deadlines:",
        // With admission off, streams wait on the worker's own queue for their first token.
        "  firstTokenMs: 300000",
        "  totalMs: 900000",
        "billing:",
        "  holdTtlMs: 960000",
        "",
      ].join("\n"),
    );

    for (let i = 0; i < plan.workers; i++) {
      const port = await freePort();
      const sim = startProc(process.execPath, ["--import", "tsx", path.join(root, "bench/sim-main.ts")], { PORT: String(port), REDIS_URL: REDIS, PREFIX: prefix, WORKER_ID: `adm-sim-${i}`, SLOTS: String(plan.slotsPerWorker), HEARTBEAT_MS: "1000" }, `sim-${i}`);
      procs.push(sim);
      await waitHttp(`http://127.0.0.1:${port}/healthz`, { ok: () => true });
    }
    const routers: Record<"on" | "off", { url: string; adminUrl: string; proc: Proc }> = {} as never;
    for (const mode of ["on", "off"] as const) {
      const port = await freePort();
      const adminPort = await freePort();
      // One router process: admission queues live in a process, and this bench measures one gate.
      const proc = startProc(process.execPath, [cli, "router", "--processes", "1"], {
        DATABASE_URL: dbUrl,
        REDIS_URL: REDIS,
        SWITCHYARD_CONFIG: configFile,
        SWITCHYARD_REDIS__KEY_PREFIX: prefix,
        SWITCHYARD_ROUTER__PORT: String(port),
        SWITCHYARD_ROUTER__ADMIN_PORT: String(adminPort),
        SWITCHYARD_ADMISSION__ENABLED: mode === "on" ? "true" : "false",
        SWITCHYARD_LOG__LEVEL: "warn",
      }, `router-${mode}`);
      procs.push(proc);
      routers[mode] = { url: `http://127.0.0.1:${port}`, adminUrl: `http://127.0.0.1:${adminPort}`, proc };
      await waitHttp(`${routers[mode].url}/readyz`, { ok: (s) => s === 200, timeoutMs: 60_000 });
    }
    const deadline = Date.now() + 10_000;
    while ((await registry.list()).length < plan.workers) {
      if (Date.now() > deadline) throw new Error("sim workers did not register");
      await sleep(100);
    }
    await sleep(600); // both routers' directories refreshed

    const body = (shape: Shape) => JSON.stringify({ model: "sim", stream: true, messages: [{ role: "user", content: "hi" }], sim: shape });
    const interactiveBody = body(plan.interactive);
    const batchBody = body(plan.batch);
    const target = (mode: "on" | "off"): Target => ({ name: `interactive-${mode}`, url: routers[mode].url, path: "/v1/chat/completions", headers: { authorization: `Bearer ${keys["bench-interactive"]}` } });

    const poolLoad = async () => {
      const recs = await registry.list();
      return { inFlight: recs.reduce((n, r) => n + r.inFlight, 0), queue: recs.reduce((n, r) => n + r.queueDepth, 0) };
    };
    const routerQueue = async (mode: "on" | "off") => {
      const text = await (await fetch(`${routers[mode].adminUrl}/metrics`)).text();
      const m = /switchyard_admission_queue_depth\{band="batch",pool="sim"\} (\d+)/.exec(text);
      return m ? Number(m[1]) : 0;
    };
    const waitIdle = async (mode: "on" | "off") => {
      const until = Date.now() + 60_000;
      for (;;) {
        const [l, q] = await Promise.all([poolLoad(), routerQueue(mode)]);
        if (l.inFlight === 0 && q === 0) return;
        if (Date.now() > until) throw new Error(`workers still busy after the phase (${l.inFlight} in flight, router queue ${q})`);
        await sleep(200);
      }
    };

    // Warm both paths (JIT, connection pools).
    for (const mode of ["on", "off"] as const) await openLoop(target(mode), { ratePerS: 10, durationS: 1, body: interactiveBody, stream: true });
    for (const mode of ["on", "off"] as const) await waitIdle(mode);

    const phase = async (mode: "on" | "off", loaded: boolean): Promise<PhaseResult> => {
      const load = loaded ? batchLoad(routers[mode].url, keys["bench-batch"]!, plan.batchStreams, batchBody) : undefined;
      const busy: number[] = [];
      const workerQueue: number[] = [];
      const rq: number[] = [];
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          const [l, q] = await Promise.all([poolLoad(), routerQueue(mode)]);
          busy.push(l.inFlight - l.queue);
          workerQueue.push(l.queue);
          rq.push(q);
          await sleep(250);
        }
      })();
      if (load) {
        // The load is on once the workers are at least at batch's share of the slots.
        const until = Date.now() + 30_000;
        while ((await poolLoad()).inFlight < Math.floor(slots * 0.65)) {
          if (Date.now() > until) throw new Error("batch load never reached the workers");
          await sleep(100);
        }
        await sleep(plan.warmupS * 1000);
      }
      const done0 = load?.done ?? 0;
      const t0 = performance.now();
      busy.length = workerQueue.length = rq.length = 0;
      const r = await openLoop(target(mode), { ratePerS: plan.ratePerS, durationS: plan.durationS, body: interactiveBody, stream: true });
      const wallS = (performance.now() - t0) / 1000;
      const batchDone = (load?.done ?? 0) - done0;
      sampling = false;
      await sampler;
      await load?.stop();
      await waitIdle(mode);
      const ok = r.samples.filter((s) => s.ok);
      return {
        sent: r.samples.length,
        ok: ok.length,
        ttft: ok.map((s) => s.ttftMs),
        batchDone,
        batchPerS: batchDone / wallS,
        busy,
        workerQueue,
        routerQueue: rq,
      };
    };

    type Key = `${"on" | "off"}-${"idle" | "load"}`;
    const results: Record<Key, PhaseResult[]> = { "on-idle": [], "on-load": [], "off-idle": [], "off-load": [] };
    for (let round = 0; round < plan.rounds; round++) {
      for (const mode of ["on", "off"] as const) {
        for (const loaded of [false, true]) {
          const key: Key = `${mode}-${loaded ? "load" : "idle"}`;
          log(`round ${round + 1}/${plan.rounds}: admission ${mode}, ${loaded ? `${plan.batchStreams} batch streams` : "idle"}…`);
          const r = await phase(mode, loaded);
          results[key].push(r);
          log(`  interactive TTFT p50 ${fmt(percentile(r.ttft, 50))} ms, p99 ${fmt(percentile(r.ttft, 99))} ms (${r.ok}/${r.sent} ok)`);
        }
      }
    }

    const p99s = (k: Key) => results[k].map((r) => percentile(r.ttft, 99));
    const p50s = (k: Key) => results[k].map((r) => percentile(r.ttft, 50));
    const spread = (xs: number[]) => (xs.length > 1 ? ` ±${fmt((Math.max(...xs) - Math.min(...xs)) / 2)}` : "");
    const out: string[] = [];
    const now = new Date().toISOString().replace("T", " ").slice(0, 16);
    out.push(`### Admission: interactive TTFT under ${plan.batchStreams} batch streams, admission on vs off — ${now} UTC${opts.quick ? " (--quick)" : ""}`);
    out.push("");
    out.push(
      `${plan.workers} sim workers × ${plan.slotsPerWorker} decode slots (${slots}; the rest wait FIFO on the worker), per stream ${plan.batch.ttftMs} ms prefill + ${plan.batch.interTokenMs} ms/token; ` +
        `batch: ${plan.batchStreams} closed-loop streams of ${plan.batch.tokens} tokens (tenant band batch); interactive: ${plan.ratePerS}/s open loop for ${plan.durationS} s, ${plan.interactive.tokens} tokens (band interactive). ` +
        `Ceilings: batch < 0.7, interactive < 1.0 of the pool's slots. ${plan.rounds} round(s) of on-idle, on-load, off-idle, off-load; ms, median over rounds${plan.rounds > 1 ? " ± half-range" : ""}.`,
    );
    out.push("");
    out.push("| admission | batch load | interactive ok | TTFT p50 | TTFT p99 | TTFT max | batch streams done/s | worker slots busy (mean) | worker queue (mean) | router batch queue (mean) |");
    out.push("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (const mode of ["on", "off"] as const) {
      for (const loaded of [false, true]) {
        const key: Key = `${mode}-${loaded ? "load" : "idle"}`;
        const rs = results[key];
        const ok = rs.reduce((n, r) => n + r.ok, 0);
        const sent = rs.reduce((n, r) => n + r.sent, 0);
        out.push(
          `| ${mode} | ${loaded ? `${plan.batchStreams} streams` : "idle"} | ${ok}/${sent} | ${fmt(median(p50s(key)), 1)}${spread(p50s(key))} | ${fmt(median(p99s(key)), 1)}${spread(p99s(key))} | ${fmt(Math.max(...rs.map((r) => Math.max(...r.ttft))), 1)} | ${loaded ? fmt(median(rs.map((r) => r.batchPerS)), 1) : "—"} | ${fmt(median(rs.map((r) => mean(r.busy))), 1)} / ${slots} | ${fmt(median(rs.map((r) => mean(r.workerQueue))), 1)} | ${mode === "on" ? fmt(median(rs.map((r) => mean(r.routerQueue))), 1) : "—"} |`,
        );
      }
    }
    const ratio = (mode: "on" | "off") => median(p99s(`${mode}-load`)) / median(p99s(`${mode}-idle`));
    const allOk = (Object.keys(results) as Key[]).every((k) => results[k].every((r) => r.ok === r.sent));
    const checks: Array<[string, boolean]> = [
      [`admission on: interactive TTFT p99 under load ≤ 1.25× idle (${fmt(median(p99s("on-load")), 1)} vs ${fmt(median(p99s("on-idle")), 1)} ms = ${ratio("on").toFixed(2)}×)`, ratio("on") <= 1.25],
      [`admission off: interactive TTFT p99 under load ≥ 10× idle (${fmt(median(p99s("off-load")), 1)} vs ${fmt(median(p99s("off-idle")), 1)} ms = ${ratio("off").toFixed(1)}×)`, ratio("off") >= 10],
      [`every interactive request answered (${(Object.keys(results) as Key[]).map((k) => `${k} ${results[k].reduce((n, r) => n + r.ok, 0)}/${results[k].reduce((n, r) => n + r.sent, 0)}`).join(", ")})`, allOk],
    ];
    out.push("");
    for (const [name, ok] of checks) out.push(`${ok ? "PASS" : "FAIL"}  ${name}`);
    const passed = checks.filter(([, ok]) => ok).length;
    out.push(`Admission: ${passed === checks.length ? "PASS" : "FAIL"} (${passed}/${checks.length})`);
    process.stdout.write(out.join("\n") + "\n");
    return passed === checks.length ? 0 : 1;
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    await scratch.drop(redis);
    redis.disconnect();
    rmSync(dir, { recursive: true, force: true });
  }
}
