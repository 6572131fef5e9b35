// `switchyard bench routing`: latency-aware routing vs round-robin, side by
// side in one run. Three sim workers of different speeds (1×, 2×, 4× the
// per-token time; each slows as its batch fills) serve one model; two router
// processes share them, one with the scorer (routing.scorer.mode=score), one
// round-robin. The same open-loop streaming load runs against each in turn
// (alternating, repeated), at a rate round-robin can carry and one it cannot;
// the table shows TTFT and total latency and where the requests went. Last section: streams whose worker is killed (kill -9)
// mid-way, with and without resume opted in — how often the client's stream
// still completes. Exit code 1 when latency-aware routing does not beat
// round-robin's p95 or resume does not complete streams (the load stopped being real).
import path from "node:path";
import { Pool } from "undici";
import { Redis } from "ioredis";
import { RedisRegistryStore } from "@switchyard/state";
import { percentile } from "./lib/load.ts";
import { freePort, repoRoot, startProc, waitHttp, type Proc } from "#testkit/procs";
import { benchScratch } from "./lib/scratch.ts";

const root = repoRoot();
const REDIS = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";
const cli = path.join(root, "apps/cli/bin/switchyard.mjs");
const simMain = path.join(root, "bench/sim-main.ts");

const fmt = (x: number, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : "-");
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

interface Sample {
  ok: boolean;
  ttftMs: number;
  totalMs: number;
  backend: string;
  text: string;
  events: string[];
}

/** One streamed request: TTFT, total, the backend that answered and the SSE payloads. */
async function stream(pool: Pool, key: string, body: unknown, headers: Record<string, string> = {}, onEvent?: (n: number) => void): Promise<Sample> {
  const t0 = performance.now();
  try {
    const res = await pool.request({
      path: "/v1/chat/completions",
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
    const backend = String(res.headers["x-switchyard-backend"] ?? "");
    if (res.statusCode !== 200) {
      await res.body.dump();
      return { ok: false, ttftMs: NaN, totalMs: performance.now() - t0, backend, text: "", events: [] };
    }
    let ttft = NaN;
    let buf = "";
    const events: string[] = [];
    for await (const chunk of res.body) {
      buf += chunk.toString();
      let i: number;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        if (!block.startsWith("data: ")) continue;
        if (Number.isNaN(ttft)) ttft = performance.now() - t0;
        events.push(block.slice(6));
        onEvent?.(events.length);
      }
    }
    const text = events
      .filter((e) => e.startsWith("{") && !e.startsWith('{"error"'))
      .map((e) => (JSON.parse(e) as { choices?: Array<{ delta?: { content?: string } }> }).choices?.[0]?.delta?.content ?? "")
      .join("");
    const ok = events.at(-1) === "[DONE]" && !events.some((e) => e.startsWith('{"error"'));
    return { ok, ttftMs: ttft, totalMs: performance.now() - t0, backend, text, events };
  } catch {
    return { ok: false, ttftMs: NaN, totalMs: performance.now() - t0, backend: "", text: "", events: [] };
  }
}

async function openLoop(url: string, key: string, rate: number, durationS: number, body: unknown): Promise<Sample[]> {
  const pool = new Pool(url, { connections: 1024, pipelining: 1, headersTimeout: 60_000, bodyTimeout: 60_000 });
  const n = Math.max(1, Math.round(rate * durationS));
  const start = performance.now();
  const inflight: Promise<Sample>[] = [];
  for (let i = 0; i < n; i++) {
    const wait = start + (i * 1000) / rate - performance.now();
    if (wait > 1) await sleep(wait);
    inflight.push(stream(pool, key, body));
  }
  const samples = await Promise.all(inflight);
  await pool.close();
  return samples;
}

interface SimSpec {
  id: string;
  env: Record<string, string>;
}

async function startSim(spec: SimSpec, prefix: string): Promise<{ proc: Proc; url: string }> {
  const port = await freePort();
  const proc = startProc(process.execPath, ["--import", "tsx", simMain], { PORT: String(port), WORKER_ID: spec.id, REDIS_URL: REDIS, PREFIX: prefix, ...spec.env }, spec.id);
  const url = `http://127.0.0.1:${port}`;
  await waitHttp(`${url}/healthz`, { ok: () => true });
  return { proc, url };
}

export async function runRoutingBench(opts: { quick: boolean }): Promise<number> {
  const scratch = await benchScratch("routing_");
  const { prefix, dbUrl } = scratch;
  const procs: Proc[] = [];
  const out = (s = "") => process.stdout.write(`${s}\n`);
  const benchRedis = new Redis(REDIS);
  const registry = new RedisRegistryStore(benchRedis, prefix);
  try {
    const key = await scratch.tenantKey("bench");

    // Three workers, 1×/2×/4× per-token time; each batch step slows as it fills (capacity 8).
    const base = { ttftMs: 40, interTokenMs: 10, tokens: 20 };
    const speeds = [1, 2, 4];
    for (const k of speeds) {
      const sim = await startSim(
        { id: `w-${k}x`, env: { MODELS: "sim", TTFT_MS: String(base.ttftMs * k), INTER_TOKEN_MS: String(base.interTokenMs * k), TOKENS: String(base.tokens), CAPACITY: "8", LOAD_SLOWDOWN: "1", HEARTBEAT_MS: "250" } },
        prefix,
      );
      procs.push(sim.proc);
    }

    const routerEnv = async (mode: string) => ({
      DATABASE_URL: dbUrl,
      REDIS_URL: REDIS,
      SWITCHYARD_REDIS__KEY_PREFIX: prefix,
      SWITCHYARD_ROUTER__PORT: String(await freePort()),
      SWITCHYARD_ROUTER__ADMIN_PORT: String(await freePort()),
      SWITCHYARD_LOG__LEVEL: "warn",
      SWITCHYARD_REGISTRY__POLL_MS: "50",
      SWITCHYARD_ROUTING__SCORER__MODE: mode,
    });
    const routers: Array<{ mode: string; label: string; url: string }> = [];
    for (const [mode, label] of [
      ["score", "latency-aware"],
      ["round_robin", "round-robin"],
    ] as const) {
      const env = await routerEnv(mode);
      // One router process: the scorer's latency window lives in a process, and this bench compares policies, not process counts.
      const proc = startProc(process.execPath, [cli, "router", "--processes", "1"], env, `router-${mode}`);
      procs.push(proc);
      const url = `http://127.0.0.1:${env.SWITCHYARD_ROUTER__PORT}`;
      await waitHttp(`${url}/readyz`, { ok: (s) => s === 200, timeoutMs: 60_000 });
      routers.push({ mode, label, url });
    }
    // Every router sees the three workers before load starts.
    for (const r of routers) {
      const deadline = Date.now() + 10_000;
      for (;;) {
        const m = (await (await fetch(`${r.url}/v1/models`, { headers: { authorization: `Bearer ${key}` } })).json()) as { data: unknown[] };
        if (m.data.length > 0 && (await registry.list()).length === 3) break;
        if (Date.now() > deadline) throw new Error("workers not visible");
        await sleep(100);
      }
    }

    // Two loads: one round-robin can carry (the 4× worker near its limit),
    // one it cannot (the 4× worker's batch grows without bound).
    const rates = opts.quick ? [20] : [15, 30];
    const durationS = opts.quick ? 4 : 15;
    const repeats = opts.quick ? 1 : 3;
    const body = { model: "sim", stream: true, messages: [{ role: "user", content: "hi" }] };
    // Warm both (JIT, pools; the scorer's first samples) with the same short load.
    for (const r of routers) await openLoop(r.url, key, rates[0]!, 2, body);

    type Run = { ttft95: number[]; tot95: number[]; ttft50: number[]; tot50: number[]; ttft99: number[]; tot99: number[]; n: number; ok: number; share: Map<string, number> };
    const runs = new Map<string, Run>();
    for (const rate of rates) {
      for (let rep = 0; rep < repeats; rep++) {
        for (const r of rep % 2 === 0 ? routers : [...routers].reverse()) {
          const samples = await openLoop(r.url, key, rate, durationS, body);
          const ok = samples.filter((x) => x.ok);
          const k = `${rate}|${r.label}`;
          const s: Run = runs.get(k) ?? { ttft95: [], tot95: [], ttft50: [], tot50: [], ttft99: [], tot99: [], n: 0, ok: 0, share: new Map() };
          runs.set(k, s);
          s.ttft50.push(percentile(ok.map((x) => x.ttftMs), 50));
          s.ttft95.push(percentile(ok.map((x) => x.ttftMs), 95));
          s.ttft99.push(percentile(ok.map((x) => x.ttftMs), 99));
          s.tot50.push(percentile(ok.map((x) => x.totalMs), 50));
          s.tot95.push(percentile(ok.map((x) => x.totalMs), 95));
          s.tot99.push(percentile(ok.map((x) => x.totalMs), 99));
          s.n += samples.length;
          s.ok += ok.length;
          for (const x of ok) s.share.set(x.backend, (s.share.get(x.backend) ?? 0) + 1);
          process.stderr.write(`${rate}/s ${r.label} run ${rep + 1}/${repeats} done\n`);
          // Let the workers drain before the next run.
          await sleep(1_000);
        }
      }
    }
    const med = (xs: number[]) => percentile(xs, 50);
    const spread = (xs: number[]) => (xs.length > 1 ? ` ±${fmt((Math.max(...xs) - Math.min(...xs)) / 2)}` : "");
    out(`### Routing: latency-aware vs round-robin (3 sim workers at 1×/2×/4× per-token time, ${base.tokens} tokens, capacity 8 each, slower as a batch fills)`);
    out();
    out(`Open loop for ${durationS} s per run, ${repeats} run(s) per mode and rate, modes alternating; ms, median over runs ± half-range.`);
    out();
    out("| streams/s | routing | requests | ok | TTFT p50 | TTFT p95 | TTFT p99 | total p50 | total p95 | total p99 | share 1× / 2× / 4× |");
    out("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    const ratios: string[] = [];
    let routingMet = true;
    for (const rate of rates) {
      for (const r of routers) {
        const s = runs.get(`${rate}|${r.label}`)!;
        const share = speeds.map((k) => `${fmt((100 * (s.share.get(`worker:w-${k}x`) ?? 0)) / Math.max(1, s.ok))}%`).join(" / ");
        out(
          `| ${rate} | ${r.label} | ${s.n} | ${s.ok} | ${fmt(med(s.ttft50))} | ${fmt(med(s.ttft95))}${spread(s.ttft95)} | ${fmt(med(s.ttft99))} | ${fmt(med(s.tot50))} | ${fmt(med(s.tot95))}${spread(s.tot95)} | ${fmt(med(s.tot99))} | ${share} |`,
        );
      }
      const la = runs.get(`${rate}|latency-aware`)!;
      const rr = runs.get(`${rate}|round-robin`)!;
      const ttftRatio = med(la.ttft95) / med(rr.ttft95);
      const totRatio = med(la.tot95) / med(rr.tot95);
      ratios.push(`${rate}/s: TTFT ${fmt(ttftRatio, 2)}×, total ${fmt(totRatio, 2)}×`);
      routingMet &&= totRatio < 1 && ttftRatio < 1 && la.ok === la.n && rr.ok === rr.n;
    }
    out();
    out(`Latency-aware p95 ÷ round-robin p95 — ${ratios.join("; ")}.`);

    // Resume: a victim worker (preferred: the steady one advertises degraded)
    // is killed mid-stream; with x-switchyard-resume the stream should complete.
    const kills = opts.quick ? 3 : 15;
    const tokens = 40;
    const steady = await startSim({ id: "steady", env: { MODELS: "resume", TOKENS: String(tokens), INTER_TOKEN_MS: "2", STATE: "degraded", HEARTBEAT_MS: "250" } }, prefix);
    procs.push(steady.proc);
    const full = Array.from({ length: tokens }, (_, i) => `tok${i} `).join("");
    const pool = new Pool(routers[0]!.url, { connections: 8 });
    const tally = { on: { done: 0, n: 0, errors: 0 }, off: { done: 0, n: 0, errors: 0 } };
    for (let i = 0; i < kills * 2; i++) {
      const resume = i % 2 === 0;
      const id = `victim-${i}`;
      const victim = await startSim({ id, env: { MODELS: "resume", TOKENS: String(tokens), INTER_TOKEN_MS: "20", HEARTBEAT_MS: "250", TTL_MS: "1500" } }, prefix);
      procs.push(victim.proc);
      const seen = Date.now() + 10_000;
      while (!(await registry.list()).some((w) => w.id === id) && Date.now() < seen) await sleep(20);
      await sleep(150); // the router's next registry poll (50 ms)
      const killAfter = 3 + ((i * 7) % (tokens - 8));
      const s = await stream(pool, key, { model: "resume", stream: true, messages: [{ role: "user", content: "count" }] }, resume ? { "x-switchyard-resume": "true" } : {}, (n) => {
        if (n === killAfter) victim.proc.child.kill("SIGKILL");
      });
      if (s.backend !== `worker:${id}`) {
        process.stderr.write(`kill ${i}: served by ${s.backend}, not the victim; not counted\n`);
        continue;
      }
      const t = resume ? tally.on : tally.off;
      t.n++;
      if (s.ok && s.text === full) t.done++;
      t.errors += s.events.filter((e) => e.startsWith('{"error"')).length;
    }
    await pool.close();
    out();
    out(`### Resume: the serving worker killed (kill -9) mid-stream, ${tokens}-token streams, killed after 3–${tokens - 6} events`);
    out();
    out("| x-switchyard-resume | kills | streams completed (whole text, once) | error events | completion rate |");
    out("|---|---:|---:|---:|---:|");
    out(`| off | ${tally.off.n} | ${tally.off.done} | ${tally.off.errors} | ${fmt((100 * tally.off.done) / Math.max(1, tally.off.n))}% |`);
    out(`| true | ${tally.on.n} | ${tally.on.done} | ${tally.on.errors} | ${fmt((100 * tally.on.done) / Math.max(1, tally.on.n))}% |`);
    out();
    const resumeMet = tally.on.n > 0 && tally.on.done === tally.on.n && tally.off.errors === tally.off.n;
    out(
      `Checks: latency-aware p95 (TTFT and total) below round-robin's with every request ok: ${routingMet ? "met" : "NOT met"}; ` +
        `resume completes every killed stream, and without it each ends in one error event: ${resumeMet ? "met" : "NOT met"}`,
    );
    out();
    return routingMet && resumeMet ? 0 : 1;
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    await scratch.drop(benchRedis);
    benchRedis.disconnect();
  }
}
