// `switchyard bench router`: what the router adds on top of a worker.
// Open-loop streaming load at 1/100/1000 concurrent streams through
// Switchyard, a bare Node pass-through proxy (the floor) and directly to the
// sim worker; closed-loop non-streaming throughput against the same targets
// plus Portkey's gateway (its streaming path fails on Node 20 here); router
// cold start to ready. Everything runs side by side in one run. Last section:
// the money path (bench/money.ts), whose PASS/FAIL sets the exit code.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { availableParallelism } from "node:os";
import path from "node:path";
import { pathToFileURL } from "node:url";
import { benchMoney } from "./money.ts";
import { benchMessages, causesText, closedLoop, openLoop, percentile, type LoadResult, type Target } from "./lib/load.ts";
import { startLiteLLM } from "./lib/litellm.ts";
import { boxCpuSince, boxReading, freePort, repoRoot, startProc, waitHttp, type Proc } from "#testkit/procs";
import { benchScratch, endBench } from "./lib/scratch.ts";
import { arrivalRate, levelOf, STREAM_LEVELS, streamLifeS } from "./lib/levels.ts";
import { busyStretches, readProfile, stretchesTable, topSelfTime } from "./lib/cpuprofile.ts";
import { allocationBy, allocationTable, type HeapProfile } from "./lib/heapprofile.ts";
import { censusGrowth, heapCensus, liveTable, responsesIn } from "./lib/heapsnapshot.ts";
import { kernelListenOverflows, routerExecArgv } from "@switchyard/router";

const root = repoRoot();
const here = path.join(root, "bench");
const REDIS = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";

const tsx = (file: string, env: Record<string, string>, label: string) => startProc(process.execPath, ["--import", "tsx", path.join(here, file)], env, label);
// The router as it is deployed: `switchyard router` (the CLI's bundle) with
// the router's node flags — one process as the Docker image's entrypoint
// starts it, N as the primary forks them (routerExecArgv: the semi-space,
// unless NODE_OPTIONS names one); `--processes N` for the one-process-per-core
// target, node flags (--cpu-prof) before the script.
const cli = path.join(root, "apps/cli/bin/switchyard.mjs");
const routerProc = (env: Record<string, string>, opts: { processes?: number; nodeFlags?: string[] } = {}) =>
  startProc(process.execPath, [...routerExecArgv(opts.nodeFlags ?? []), cli, "router", "--processes", String(opts.processes ?? 1)], env, opts.processes && opts.processes > 1 ? `router×${opts.processes}` : "router");

const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");

export interface RouterBenchOptions {
  quick: boolean;
  levels?: number[];
  /** "non-streaming" only with profile: the profile is of the non-streaming closed loop. */
  only?: "money" | "non-streaming";
  cluster?: string[];
  /** Only a CPU profile of one router process under the 100-stream load (or the one level of `levels`), written to this directory. */
  profile?: string;
  /** Router processes of the "switchyard ×N" target (default: the cores). */
  processes?: number;
  /** Unmeasured runs of each level's load before its measured repeats (default 2; 1 with quick). */
  warm?: number;
  /** With profile: each request a conversation of about this many KB (benchMessages), streamed or not. */
  bodyKb?: number;
}

/**
 * A load runs unmeasured first. Every process here — the router, the bare
 * proxy, the sim worker, this load generator — spends its first tens of
 * seconds under a load getting faster: at 100 streams the router's CPU per
 * stream fell by a quarter over its first 30 s, the sim's and this
 * generator's by a fifth (2026-12-05, docs/BENCHMARKS.md). A router that
 * serves for days is measured warm, not while V8 is still compiling it.
 */
export const defaultWarmRuns = (quick: boolean) => (quick ? 1 : 2);

export async function runRouterBench(opts: RouterBenchOptions): Promise<number> {
  if (opts.profile) return profileRouter({ quick: opts.quick, dir: opts.profile, stream: opts.only !== "non-streaming", ...(opts.levels ? { streams: opts.levels[0] } : {}), ...(opts.bodyKb ? { bodyKb: opts.bodyKb } : {}) });
  if (opts.only !== "money") await benchRouterOverhead({ ...opts, warm: opts.warm ?? defaultWarmRuns(opts.quick) });
  // Runs after the router's processes are gone, on its own database and prefix.
  const money = await benchMoney({ quick: opts.quick, log: (s) => process.stdout.write(`${s}\n`) });
  // --cluster: the money and lease figures on this node and on that Redis Cluster, side by side.
  const topo = opts.cluster?.length
    ? await (await import("./topologies.ts")).benchStateTopologies({ quick: opts.quick, single: REDIS, cluster: opts.cluster, log: (s) => process.stdout.write(`${s}\n`) })
    : { ok: true };
  return money.ok && topo.ok ? 0 : 1;
}

async function benchRouterOverhead(opts: { quick: boolean; levels?: number[]; processes?: number; warm: number }): Promise<number> {
  const nProcs = opts.processes ?? availableParallelism();
  const scratch = await benchScratch("");
  const { prefix, dbUrl } = scratch;
  const procs: Proc[] = [];
  try {
    const key = await scratch.tenantKey("bench");

    const simPort = await freePort();
    const sim = tsx("sim-main.ts", { PORT: String(simPort), REDIS_URL: REDIS, PREFIX: prefix, TOKENS: "5" }, "sim");
    procs.push(sim);
    const simUrl = `http://127.0.0.1:${simPort}`;
    const routerPort = await freePort();
    const routerEnv = {
      DATABASE_URL: dbUrl,
      REDIS_URL: REDIS,
      SWITCHYARD_REDIS__KEY_PREFIX: prefix,
      SWITCHYARD_ROUTER__PORT: String(routerPort),
      SWITCHYARD_ROUTER__ADMIN_PORT: String(await freePort()),
      // Access logs off: they measure the terminal, not the router.
      SWITCHYARD_LOG__LEVEL: "warn",
    };
    const routerUrl = `http://127.0.0.1:${routerPort}`;

    // Cold start: process spawn → /readyz 200, a few times, once the sim
    // has booted: its start (tsx compiling, CPU-bound on the same 2 cores)
    // is not the router's. Timed beside it, spawns took 406–513 ms; on an
    // idle box 260–330 ms (2026-12-04, docs/BENCHMARKS.md).
    await waitHttp(`${simUrl}/healthz`, { ok: () => true });
    const cold: number[] = [];
    for (let i = 0; i < (opts.quick ? 1 : 5); i++) {
      const t0 = performance.now();
      const r = routerProc(routerEnv);
      await waitHttp(`${routerUrl}/readyz`, { ok: (s) => s === 200 });
      cold.push(performance.now() - t0);
      await r.stop();
    }
    const router = routerProc(routerEnv);
    procs.push(router);
    // The same router, one process per core sharing the listener (`--processes N`).
    const routerNPort = await freePort();
    // On a prefix (and so a ledger stream) of its own, with its own sim worker
    // heartbeating there: routers sharing a stream share its drain, and the
    // idle one would take up rows of the loaded one, its CPU uncounted.
    const prefixN = `${prefix}n:`;
    const simN = tsx("sim-main.ts", { PORT: String(await freePort()), REDIS_URL: REDIS, PREFIX: prefixN, TOKENS: "5" }, "sim ×N");
    procs.push(simN);
    const routerN = routerProc({ ...routerEnv, SWITCHYARD_REDIS__KEY_PREFIX: prefixN, SWITCHYARD_ROUTER__PORT: String(routerNPort), SWITCHYARD_ROUTER__ADMIN_PORT: String(await freePort()) }, { processes: nProcs });
    procs.push(routerN);
    const routerNUrl = `http://127.0.0.1:${routerNPort}`;
    const passPort = await freePort();
    const pass = tsx("passthrough-main.ts", { PORT: String(passPort), UPSTREAM: simUrl }, "passthrough");
    procs.push(pass);
    const portkeyPort = await freePort();
    const portkey = startProc(process.execPath, [path.join(root, "node_modules/@portkey-ai/gateway/build/start-server.js"), `--port=${portkeyPort}`, "--headless"], { NODE_ENV: "production" }, "portkey");
    procs.push(portkey);
    await waitHttp(`http://127.0.0.1:${passPort}/`, { ok: () => true, init: { method: "POST", body: "{}" } });
    await waitHttp(`http://127.0.0.1:${portkeyPort}/`, { ok: (s) => s === 200 });
    const auth = { authorization: `Bearer ${key}` };
    for (const u of [routerUrl, routerNUrl]) await routerSeesWorker(u, auth);

    // LiteLLM: the streaming peer (Portkey's streaming fails on Node 20).
    const lite = await startLiteLLM({ upstream: `${simUrl}/v1`, port: await freePort(), log: (l) => process.stderr.write(`${l}\n`) });
    if ("skipped" in lite) process.stderr.write(`LiteLLM skipped: ${lite.skipped}\n`);
    else procs.push(lite.proc);
    const liteTarget = "skipped" in lite ? undefined : { t: { ...lite.target, name: "litellm" }, proc: lite.proc };

    const targets: { t: Target; proc?: Proc }[] = [
      { t: { name: "direct", url: simUrl, path: "/v1/chat/completions", headers: {} } },
      { t: { name: "node-passthrough", url: `http://127.0.0.1:${passPort}`, path: "/v1/chat/completions", headers: {} }, proc: pass },
      { t: { name: "switchyard", url: routerUrl, path: "/v1/chat/completions", headers: auth }, proc: router },
      { t: { name: `switchyard ×${nProcs}`, url: routerNUrl, path: "/v1/chat/completions", headers: auth }, proc: routerN },
    ];
    const portkeyTarget: Target = {
      name: "portkey",
      url: `http://127.0.0.1:${portkeyPort}`,
      path: "/v1/chat/completions",
      headers: { authorization: "Bearer sk-bench", "x-portkey-provider": "openai", "x-portkey-custom-host": `${simUrl}/v1` },
    };

    // Warm every path (JIT, connection pools).
    const warmBody = JSON.stringify({ model: "sim", messages: [{ role: "user", content: "hi" }] });
    for (const { t: tg } of [...targets, ...(liteTarget ? [liteTarget] : [])]) await closedLoop(tg, { clients: 8, durationS: 1, body: warmBody, stream: false });
    await closedLoop(portkeyTarget, { clients: 8, durationS: 1, body: warmBody, stream: false });

    const levels = STREAM_LEVELS;
    const durationS = opts.quick ? 3 : 10;
    const repeats = opts.quick ? 1 : 3;
    const rows: string[] = [];
    /** Every load's errors by cause, where there were any (the tables count them). */
    const causeRows: string[] = [];
    const summary: Record<string, Record<string, { ttft50: number[]; ttft99: number[]; tot50: number[]; tot99: number[]; errors: number; n: number; cpu: number[]; cpuPerReq: number[]; rps: number[]; waited: number[] }>> = {};
    const chosen = opts.levels ? levels.filter((l) => opts.levels!.includes(l.streams)) : opts.quick ? levels.slice(0, 2) : levels;
    for (const level of chosen) {
      const streamS = streamLifeS(level);
      const rate = arrivalRate(level);
      const body = JSON.stringify({ model: "sim", stream: true, messages: [{ role: "user", content: "hi" }], sim: level.shape });
      summary[level.streams] = {};
      // LiteLLM tops out near 40 streams/s on one core here: at 1000 streams
      // it only queues for minutes, so it runs at the lower levels.
      const levelTargets = liteTarget && level.streams <= 100 ? [...targets, liteTarget] : targets;
      // The first opts.warm repeats are the warm-up: run the same way, interleaved, and not counted.
      for (let rep = -opts.warm; rep < repeats; rep++) {
        for (const { t: tg, proc } of levelTargets) {
          const cpu0 = proc?.cpuSeconds() ?? NaN;
          const wait0 = proc?.runQueueSeconds() ?? NaN;
          const r: LoadResult = await openLoop(tg, { ratePerS: rate, durationS, body, stream: true });
          if (rep < 0) continue;
          if (r.errors > 0) causeRows.push(`- ${level.streams} streams, ${tg.name}, repeat ${rep + 1}: ${causesText(r.causes)}`);
          const cpuS = proc ? proc.cpuSeconds() - cpu0 : NaN;
          const waitS = proc ? proc.runQueueSeconds() - wait0 : NaN;
          const cpu = cpuS / r.wallS;
          const ok = r.samples.filter((s) => s.ok);
          const s = (summary[level.streams]![tg.name] ??= { ttft50: [], ttft99: [], tot50: [], tot99: [], errors: 0, n: 0, cpu: [], cpuPerReq: [], rps: [], waited: [] });
          s.cpuPerReq.push((cpuS * 1000) / Math.max(1, r.samples.length));
          s.ttft50.push(percentile(ok.map((x) => x.ttftMs), 50));
          s.ttft99.push(percentile(ok.map((x) => x.ttftMs), 99));
          s.tot50.push(percentile(ok.map((x) => x.totalMs), 50));
          s.tot99.push(percentile(ok.map((x) => x.totalMs), 99));
          s.errors += r.errors;
          s.n += r.samples.length;
          s.cpu.push(cpu);
          s.rps.push(ok.length / r.wallS);
          s.waited.push((waitS * 1000) / r.wallS);
        }
      }
      const med = (xs: number[]) => percentile(xs, 50);
      const spread = (xs: number[]) => (xs.length > 1 ? `±${fmt((Math.max(...xs) - Math.min(...xs)) / 2, 2)}` : "");
      const d = summary[level.streams]!.direct!;
      for (const { t: tg } of levelTargets) {
        const s = summary[level.streams]![tg.name]!;
        rows.push(
          `| ${level.streams} | ${tg.name} | ${fmt(med(s.rps))} | ${s.n - s.errors}/${s.n} | ${s.errors} | ${fmt(med(s.ttft50), 2)} | ${fmt(med(s.ttft99), 2)} | ${fmt(med(s.tot50))} | ${fmt(med(s.tot99))} | ${tg.name === "direct" ? "—" : `${fmt(med(s.ttft50) - med(d.ttft50), 2)}${spread(s.ttft50.map((x, i) => x - d.ttft50[i]!))}`} | ${tg.name === "direct" ? "—" : `${fmt(med(s.ttft99) - med(d.ttft99), 2)}${spread(s.ttft99.map((x, i) => x - d.ttft99[i]!))}`} | ${tg.name === "direct" ? "—" : fmt(med(s.tot50) - med(d.tot50), 2)} | ${tg.name === "direct" ? "—" : fmt(med(s.tot99) - med(d.tot99), 2)} | ${fmt(med(s.cpu), 2)} | ${fmt(med(s.cpuPerReq), 3)} | ${fmt(med(s.waited), 0)} |`,
        );
      }
      process.stderr.write(`level ${level.streams} done\n`);
    }

    // Peak non-streaming throughput, closed loop, zero-latency worker.
    const tpRows: string[] = [];
    const tp: Record<string, number> = {};
    const clients = 64;
    const cpuPerReq: Record<string, number> = {};
    const tpTargets = [...targets, { t: portkeyTarget, proc: portkey }, ...(liteTarget ? [liteTarget] : [])];
    // Warm-up loops first, interleaved and not counted, as for the streaming levels.
    for (let w = 0; w < opts.warm; w++) for (const { t: tg } of tpTargets) await closedLoop(tg, { clients, durationS: opts.quick ? 2 : 5, body: warmBody, stream: false });
    for (const { t: tg, proc } of tpTargets) {
      const cpu0 = proc?.cpuSeconds() ?? NaN;
      const wait0 = proc?.runQueueSeconds() ?? NaN;
      const box0 = boxReading();
      const r = await closedLoop(tg, { clients, durationS: opts.quick ? 2 : 5, body: warmBody, stream: false });
      const box = boxCpuSince(box0);
      const cpuS = proc ? proc.cpuSeconds() - cpu0 : NaN;
      const waitS = proc ? proc.runQueueSeconds() - wait0 : NaN;
      const ok = r.samples.filter((s) => s.ok);
      tp[tg.name] = ok.length / r.wallS;
      cpuPerReq[tg.name] = (cpuS * 1000) / Math.max(1, r.samples.length);
      if (r.errors > 0) causeRows.push(`- closed loop, ${tg.name}: ${causesText(r.causes)}`);
      tpRows.push(`| ${tg.name} | ${fmt(tp[tg.name]!, 0)} | ${fmt(percentile(ok.map((s) => s.totalMs), 50), 2)} | ${fmt(percentile(ok.map((s) => s.totalMs), 99), 2)} | ${r.errors} | ${fmt(cpuPerReq[tg.name]!, 3)} | ${fmt((waitS * 1000) / r.wallS, 0)} | ${fmt((box.busy * 1000) / Math.max(1, r.samples.length), 3)} | ${fmt(100 * box.idleShare, 1)} |`);
    }

    // Past capacity: whole answers offered at 1.5× the one-process router's
    // closed-loop rate, an open loop, so both router targets get more than
    // they can serve and the load opens a connection for each request in
    // flight. (1.5× the bare proxy's rate was more than the load generator,
    // one process on the same cores, could send: every target then measured
    // it.) The bare proxy, faster, shows what the box answers at that rate. A proxy that holds its
    // rate there is the one a traffic spike does not take down; one whose
    // accept queue overflows waits out SYN retransmits, idle (2026-12-06:
    // Node's backlog of 511 cost the router two thirds of its rate).
    const pastRate = Math.round(1.5 * tp.switchyard!);
    const pastS = opts.quick ? 2 : 5;
    const pastRows: string[] = [];
    for (const { t: tg, proc } of targets) {
      if (tg.name === "direct") continue;
      const cpu0 = proc?.cpuSeconds() ?? NaN;
      const o0 = kernelListenOverflows() ?? NaN;
      const r = await openLoop(tg, { ratePerS: pastRate, durationS: pastS, body: warmBody, stream: false });
      const overflows = (kernelListenOverflows() ?? NaN) - o0;
      const cpuS = proc ? proc.cpuSeconds() - cpu0 : NaN;
      const ok = r.samples.filter((x) => x.ok);
      const rps = ok.length / r.wallS;
      if (r.errors > 0) causeRows.push(`- past capacity, ${tg.name}: ${causesText(r.causes)}`);
      pastRows.push(`| ${tg.name} | ${fmt(rps, 0)} | ${fmt(rps / tp[tg.name]!, 2)} | ${r.errors} | ${fmt(percentile(ok.map((x) => x.totalMs), 50), 0)} | ${fmt(percentile(ok.map((x) => x.totalMs), 99), 0)} | ${fmt(r.wallS, 1)} | ${fmt(cpuS / r.wallS, 2)} | ${fmt(overflows, 0)} |`);
    }

    const out: string[] = [];
    out.push(`### Streaming, open loop (${durationS}s per run, ${repeats} repeat(s) after ${opts.warm} unmeasured warm-up repeat(s) per level; ms; Δ = target − direct, median over repeats ± half-range)`);
    out.push("");
    out.push(`Peers: node-passthrough = bare Node proxy (the floor); litellm = LiteLLM proxy ${"skipped" in lite ? "(skipped)" : lite.version} (streaming peer, levels ≤ 100); Portkey only in the non-streaming table (its streaming path fails on Node 20); switchyard = \`switchyard router --processes 1\` with the router's node flags (\`${routerExecArgv([]).join(" ")}\`, as the Docker image's router entrypoint starts it), ×${nProcs} as the primary forks them.`);
    out.push("");
    out.push(`Proxy CPU: user + system seconds of the proxy's processes (all of them for switchyard ×${nProcs}) from /proc, as cores over the run and as CPU ms per request sent. Waited for a CPU: ms per second of the run that the proxy's main threads (event loops) spent runnable without a core (/proc schedstat's run delay; summed over switchyard ×${nProcs}'s processes) — on a box whose load generator, sim worker and proxy share ${availableParallelism()} cores, latency the scheduler adds, not the proxy's code.`);
    out.push("");
    out.push("| streams | target | req/s | ok | errors | TTFT p50 | TTFT p99 | total p50 | total p99 | ΔTTFT p50 | ΔTTFT p99 | Δtotal p50 | Δtotal p99 | proxy CPU (cores) | CPU ms/req | waited for a CPU (ms/s) |");
    out.push("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    out.push(...rows);
    out.push("");
    out.push(`### Non-streaming peak throughput, closed loop (${clients} clients, zero-latency sim worker, after ${opts.warm} unmeasured warm-up loop(s) per target)`);
    out.push("");
    out.push(`Box busy: every process's and the kernel's CPU ms per whole answer (the cores' wall time less idle, /proc/stat, all ${availableParallelism()} cores: the load generator, the sim worker, Postgres and Redis included); box idle: the share of the cores' time nothing ran. With little idle left, req/s is the cores over the box's busy time per answer: a proxy's throughput then rests on what everyone spends for it, not on its own CPU alone.`);
    out.push("");
    out.push("| target | req/s | p50 ms | p99 ms | errors | CPU ms/req | waited for a CPU (ms/s) | box busy ms/req | box idle % |");
    out.push("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    out.push(...tpRows);
    out.push("");
    out.push(`### Past capacity: whole answers offered at ${pastRate}/s for ${pastS} s (1.5× the one-process router's closed-loop rate), open loop`);
    out.push("");
    out.push("Answered/s over the whole run (until the last answer); × closed loop: that over the target's own closed-loop rate above; listen overflows: handshakes the kernel dropped because a listener's accept queue was full (TcpExt ListenOverflows, the whole box), each a client waiting 1 s or more for a retransmit.");
    out.push("");
    out.push("| target | answered/s | × closed loop | errors | p50 ms | p99 ms | run s | proxy CPU (cores) | listen overflows |");
    out.push("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    out.push(...pastRows);
    out.push("");
    if (causeRows.length > 0) out.push("Errors by cause (status and the error code the answer named, a stream's error event, or the socket's error):", "", ...causeRows, "");
    out.push(`### Router cold start (spawn → /readyz 200): ${cold.map((c) => fmt(c, 0)).join(", ")} ms`);
    out.push("");
    const s100 = summary[100]?.switchyard;
    const d100 = summary[100]?.direct;
    const s1000 = summary[1000]?.switchyard;
    const n1000 = summary[1000]?.[`switchyard ×${nProcs}`];
    const d1000 = summary[1000]?.direct;
    const checks = [
      ["ΔTTFT p99 at 100 streams ≤ 1 ms", s100 && d100 ? percentile(s100.ttft99, 50) - percentile(d100.ttft99, 50) <= 1 : undefined],
      ["1000 streams with 0 errors", s1000 ? s1000.errors === 0 : undefined],
      [`1000 streams, ×${nProcs}: 0 errors and ΔTTFT p99 ≤ 2 ms`, n1000 && d1000 ? n1000.errors === 0 && percentile(n1000.ttft99, 50) - percentile(d1000.ttft99, 50) <= 2 : undefined],
      // Both router targets: one process, and N (what `switchyard router` runs by default: one per core).
      [`non-streaming throughput ≥ 0.7× the bare proxy, 1 process (${fmt(tp.switchyard! / tp["node-passthrough"]!, 2)}×)`, tp.switchyard! >= 0.7 * tp["node-passthrough"]!],
      [`non-streaming throughput ≥ 0.7× the bare proxy, ×${nProcs} (${fmt(tp[`switchyard ×${nProcs}`]! / tp["node-passthrough"]!, 2)}×)`, tp[`switchyard ×${nProcs}`]! >= 0.7 * tp["node-passthrough"]!],
      ["router CPU per request ≤ 2× the bare proxy's", cpuPerReq.switchyard! <= 2 * cpuPerReq["node-passthrough"]!],
      ["throughput ≥ 2× Portkey", tp.switchyard! >= 2 * tp.portkey!],
      ...(tp.litellm ? ([["throughput ≥ 2× LiteLLM", tp.switchyard! >= 2 * tp.litellm]] as const) : []),
      ["cold start ≤ 500 ms", percentile(cold, 50) <= 500],
    ] as const;
    out.push("Targets: " + checks.map(([name, ok]) => `${name}: ${ok === undefined ? "not run" : ok ? "met" : "NOT met"}`).join("; "));
    process.stdout.write(out.join("\n") + "\n\n");
    return 0;
  } finally {
    await endBench(procs, scratch);
  }
}

/** Until the router's /v1/models lists the sim worker (its first heartbeat seen). */
export async function routerSeesWorker(url: string, auth: Record<string, string>): Promise<void> {
  await waitHttp(`${url}/v1/models`, { init: { headers: auth }, ok: (s) => s === 200 });
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const m = (await (await fetch(`${url}/v1/models`, { headers: auth })).json()) as { data: unknown[] };
    if (m.data.length > 0) return;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * `bench router --profile DIR`: one router process (`node --cpu-prof`) under
 * the 100-stream load, or another level's (`streams`: 1 or 1000, with that
 * level's shape), or with only "non-streaming" the non-streaming closed loop; the profile is
 * written to DIR when the router exits, and its top self-time functions printed.
 */
async function profileRouter(opts: { quick: boolean; dir: string; stream: boolean; streams?: number; bodyKb?: number }): Promise<number> {
  const level = levelOf(opts.streams ?? 100, "bench router --profile");
  const dir = path.resolve(opts.dir);
  mkdirSync(dir, { recursive: true });
  const before = new Set(readdirSync(dir));
  const scratch = await benchScratch("");
  const procs: Proc[] = [];
  let loadWindow = { fromMs: 0, toMs: Infinity };
  try {
    const key = await scratch.tenantKey("bench");
    const simPort = await freePort();
    procs.push(tsx("sim-main.ts", { PORT: String(simPort), REDIS_URL: REDIS, PREFIX: scratch.prefix, TOKENS: "5" }, "sim"));
    const routerPort = await freePort();
    const adminPort = await freePort();
    const routerEnv = {
      DATABASE_URL: scratch.dbUrl,
      REDIS_URL: REDIS,
      SWITCHYARD_REDIS__KEY_PREFIX: scratch.prefix,
      SWITCHYARD_ROUTER__PORT: String(routerPort),
      SWITCHYARD_ROUTER__ADMIN_PORT: String(adminPort),
      SWITCHYARD_LOG__LEVEL: "warn",
    };
    // The profile's clock starts with the process: the load's window in it is
    // taken from the spawn (a few ms early, which only widens it).
    const spawnedAt = performance.now();
    const router = routerProc(routerEnv, { nodeFlags: ["--cpu-prof", `--cpu-prof-dir=${dir}`, "--cpu-prof-interval=250"] });
    procs.push(router);
    const url = `http://127.0.0.1:${routerPort}`;
    const auth = { authorization: `Bearer ${key}` };
    await waitHttp(`http://127.0.0.1:${simPort}/healthz`, { ok: () => true });
    await routerSeesWorker(url, auth);
    const t: Target = { name: "switchyard", url, path: "/v1/chat/completions", headers: auth };
    const messages = benchMessages(opts.bodyKb);
    const warmBody = JSON.stringify({ model: "sim", messages });
    // The level's load in every pass (100 streams: 20 tokens 50 ms apart after 50 ms), arrivals paced to keep that many in flight.
    const shape = level.shape;
    const streams = { ratePerS: arrivalRate(level), body: JSON.stringify({ model: "sim", stream: true, messages, sim: shape }), stream: true };
    await closedLoop(t, { clients: 8, durationS: 1, body: warmBody, stream: false });
    // Each pass runs its load unmeasured first (defaultWarmRuns): a profile of
    // a router still being compiled shows the compiler, not the router.
    const warmS = opts.quick ? 3 : 20;
    const warmUp = () => (opts.stream ? openLoop(t, { ...streams, durationS: warmS }) : closedLoop(t, { clients: 64, durationS: warmS, body: warmBody, stream: false }));
    await warmUp();
    const durationS = opts.quick ? 5 : 15;
    const adminUrl = `http://127.0.0.1:${adminPort}`;
    // One read of the router's /metrics before the load and one after: its GC pauses and its worker calls' waits.
    const metrics0 = await routerMetrics(adminUrl);
    const loadFromMs = performance.now() - spawnedAt;
    if (!opts.stream) {
      // The non-streaming closed loop of the bench's throughput table (64 clients, zero-latency worker).
      const cpu0 = router.cpuSeconds();
      const wait0 = router.runQueueSeconds();
      const r = await closedLoop(t, { clients: 64, durationS, body: warmBody, stream: false });
      const cpu = router.cpuSeconds() - cpu0;
      const waited = router.runQueueSeconds() - wait0;
      const ok = r.samples.filter((s) => s.ok);
      process.stdout.write(`non-streaming closed loop, 64 clients${opts.bodyKb ? ` (each request a ${warmBody.length}-byte conversation)` : ""}, ${durationS}s: ${ok.length}/${r.samples.length} ok, ${fmt(ok.length / r.wallS, 0)} req/s; router CPU ${fmt(cpu, 2)} s = ${fmt((cpu * 1000) / Math.max(1, r.samples.length), 3)} ms/request; its event loop waited for a CPU ${fmt((waited * 1000) / r.wallS, 0)} ms per second (run queue)\n`);
    } else {
      const cpu0 = router.cpuSeconds();
      const wait0 = router.runQueueSeconds();
      const r = await openLoop(t, { ...streams, durationS });
      const cpu = router.cpuSeconds() - cpu0;
      const waited = router.runQueueSeconds() - wait0;
      const ok = r.samples.filter((s) => s.ok);
      process.stdout.write(
        `${level.streams} streams${opts.bodyKb ? ` (each request a ${streams.body.length}-byte conversation)` : ""}, ${durationS}s: ${ok.length}/${r.samples.length} ok, TTFT p50 ${fmt(percentile(ok.map((s) => s.ttftMs), 50), 2)} ms, p99 ${fmt(percentile(ok.map((s) => s.ttftMs), 99), 2)} ms; router CPU ${fmt(cpu, 2)} s = ${fmt((cpu * 1000) / r.samples.length, 3)} ms/request; its event loop waited for a CPU ${fmt((waited * 1000) / r.wallS, 0)} ms per second (run queue)\n`,
      );
    }
    const loadToMs = performance.now() - spawnedAt;
    const metrics1 = await routerMetrics(adminUrl);
    process.stdout.write(`\nGarbage-collection pauses during the load (the router's own switchyard_gc_pause_seconds):\n\n${gcTable(gcPauses(metrics0), gcPauses(metrics1))}\n`);
    process.stdout.write(
      `\nWorker calls during the load, by how long undici held each before writing its headers (the router's own switchyard_upstream_send_wait_seconds; on a reused idle connection the write waits for the event loop's check phase):\n\n${heldTable(upstreamHeld(metrics0), upstreamHeld(metrics1))}\n`,
    );
    await router.stop();
    loadWindow = { fromMs: loadFromMs, toMs: loadToMs };
    // The same load on a router counting its async resources (not profiled:
    // the count does not depend on the profiler, and the hook slows it).
    const censusFile = path.join(dir, `async-census-${process.pid}.json`);
    const counted = routerProc({ ...routerEnv, CENSUS_OUT: censusFile }, { nodeFlags: ["--import", pathToFileURL(path.join(root, "bench/lib/async-census.mjs")).href] });
    procs.push(counted);
    await routerSeesWorker(url, auth);
    await closedLoop(t, { clients: 8, durationS: 1, body: warmBody, stream: false });
    await warmUp();
    const snap = async (): Promise<Record<string, number>> => {
      await new Promise((r) => setTimeout(r, 700)); // past the next write (every 500 ms)
      return JSON.parse(readFileSync(censusFile, "utf8")) as Record<string, number>;
    };
    const a = await snap();
    if (!opts.stream) await closedLoop(t, { clients: 64, durationS: 3, body: warmBody, stream: false });
    else await openLoop(t, { ...streams, durationS: 3 });
    const b = await snap();
    const n = b.requests! - a.requests!;
    const per = Object.keys(b)
      .filter((k) => k !== "requests" && (b[k]! - (a[k] ?? 0)) / n >= 0.05)
      .sort((x, y) => b[y]! - (a[y] ?? 0) - (b[x]! - (a[x] ?? 0)));
    process.stdout.write(`\nAsync resources created per request (${n} requests, ${opts.stream ? `${level.streams} streams` : "non-streaming closed loop"}; bench/lib/async-census.mjs):\n\n| resource | per request |\n|---|---:|\n${per.map((k) => `| ${k} | ${fmt((b[k]! - (a[k] ?? 0)) / n, 2)} |`).join("\n")}\n`);
    await counted.stop();
    // Once more, on a router sampling what it allocates (the census's hook allocates itself: not on that one).
    const heapFile = path.join(dir, `heap-${process.pid}.json`);
    const sampled = routerProc({ ...routerEnv, HEAP_OUT: heapFile }, { nodeFlags: ["--import", pathToFileURL(path.join(root, "bench/lib/heap-sample.mjs")).href] });
    procs.push(sampled);
    await routerSeesWorker(url, auth);
    await closedLoop(t, { clients: 8, durationS: 1, body: warmBody, stream: false });
    await warmUp();
    sampled.child.kill("SIGUSR2");
    const load = opts.stream
      ? await openLoop(t, { ...streams, durationS: 5 })
      : await closedLoop(t, { clients: 64, durationS: 3, body: warmBody, stream: false });
    sampled.child.kill("SIGUSR2");
    const heap = await waitForFile(heapFile, 10_000);
    process.stdout.write(
      `\nAllocated per request (${load.samples.length} requests, ${opts.stream ? `${level.streams} streams of ${shape.tokens} tokens` : "non-streaming closed loop"}; V8's sampling heap profiler, collected objects included; bench/lib/heap-sample.mjs):\n\n${heapTable(heap, load.samples.length)}\n`,
    );
    await sampled.stop();
    // Last, what the load keeps alive: heap snapshots of one more router, idle
    // and with the load's requests in flight (a snapshot stops the router for
    // seconds, so none is taken where anything is timed).
    const snapOut = path.join(dir, `live-${process.pid}`);
    const snapped = routerProc({ ...routerEnv, SNAPSHOT_OUT: snapOut }, { nodeFlags: ["--import", pathToFileURL(path.join(root, "bench/lib/heap-snapshot.mjs")).href] });
    procs.push(snapped);
    await routerSeesWorker(url, auth);
    await closedLoop(t, { clients: 8, durationS: 1, body: warmBody, stream: false });
    await warmUp();
    const snapshot = async (n: number) => {
      snapped.child.kill("SIGUSR2");
      const file = `${snapOut}-${n}.heapsnapshot`;
      // Whole once it exists: heap-snapshot.mjs renames it when written.
      const text = await waitForFile(file, 120_000, () => true);
      if (text === undefined) throw new Error(`no heap snapshot at ${file} within 120 s`);
      return text;
    };
    const idle = heapCensus(await snapshot(1));
    // Past one stream's life, every stream of the level is open (a closed loop: its 64 at once).
    const steadyS = opts.stream ? Math.max(2, 1.5 * streamLifeS(level)) : 2;
    const underLoad = async (n: number) => {
      const loaded = opts.stream ? openLoop(t, { ...streams, durationS: steadyS + 2 }) : closedLoop(t, { clients: 64, durationS: steadyS + 2, body: warmBody, stream: false });
      await new Promise((r) => setTimeout(r, steadyS * 1000));
      const census = heapCensus(await snapshot(n));
      await loaded;
      return census;
    };
    // A snapshot counts only the requests the router has read: on a crowded
    // box much of the load can wait in the kernel's queue at that moment, and
    // an idle and a loaded heap differ by a few hundred KB of their own, which
    // a handful of requests cannot outweigh (CI once read -17,675 bytes per
    // request with 14 in flight). So the load is run again (three times at
    // most) until half of it is in flight, and the snapshot with most is kept.
    const wanted = Math.ceil((opts.stream ? level.streams : 64) / 2);
    let busy = await underLoad(2);
    for (let n = 3; n <= 4 && responsesIn(busy) - responsesIn(idle) < wanted; n++) {
      const again = await underLoad(n);
      if (responsesIn(again) > responsesIn(busy)) busy = again;
    }
    process.stdout.write(
      `\nKept alive per request in flight (${opts.stream ? `${level.streams} streams` : "non-streaming closed loop, 64 clients"}; heap snapshots idle and under the load, objects by kind; a scavenge copies this while a request is young; bench/lib/heapsnapshot.ts):\n\n${liveTable(censusGrowth(idle, busy), responsesIn(busy) - responsesIn(idle))}\n`,
    );
    await snapped.stop();
    for (const f of readdirSync(dir)) if (f.startsWith(path.basename(snapOut))) rmSync(path.join(dir, f), { force: true });
  } finally {
    await endBench(procs, scratch);
  }
  const written = readdirSync(dir).filter((f) => f.endsWith(".cpuprofile") && !before.has(f));
  if (written.length === 0) {
    process.stderr.write(`no profile written under ${dir}\n`);
    return 1;
  }
  for (const f of written) {
    const prof = readProfile(path.join(dir, f));
    process.stdout.write(`\nCPU profile: ${path.join(dir, f)} (open in Chrome DevTools or speedscope); the top functions during the load:\n\n${topSelfTime(prof, 25, root, loadWindow.fromMs, loadWindow.toMs)}\n`);
    process.stdout.write(
      `\nBusy stretches during the load (no idle sample between; a request arriving in one waits for its end; 250 µs sampling):\n\n${stretchesTable(busyStretches(prof, loadWindow.fromMs, loadWindow.toMs))}\n`,
    );
  }
  return 0;
}

/** The allocation table of a heap profile's text, or why there is none. */
function heapTable(text: string | undefined, requests: number): string {
  const prof = text === undefined ? undefined : (JSON.parse(text) as Partial<HeapProfile> & { error?: string });
  if (!prof?.head) return `(no heap profile${prof?.error ? `: ${prof.error}` : " written"})`;
  return allocationTable(allocationBy(prof as HeapProfile), requests);
}

/**
 * A file's text once it exists and is whole (a process writing it on a
 * signal; by default, whole when it parses as JSON), or undefined after `ms`.
 */
async function waitForFile(file: string, ms: number, whole: (text: string) => boolean = parsesAsJson): Promise<string | undefined> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (existsSync(file)) {
      const text = readFileSync(file, "utf8");
      if (whole(text)) return text; // else still being written
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  return undefined;
}

function parsesAsJson(text: string): boolean {
  try {
    JSON.parse(text);
    return true;
  } catch {
    return false;
  }
}

type GcPauses = Map<string, { count: number; sum: number }>;

/** The router's admin /metrics, as text. */
async function routerMetrics(adminUrl: string): Promise<string> {
  return (await fetch(`${adminUrl}/metrics`)).text();
}

/** The router's GC pause histogram by kind, from its /metrics text. */
function gcPauses(text: string): GcPauses {
  const out: GcPauses = new Map();
  for (const m of text.matchAll(/^switchyard_gc_pause_seconds_(sum|count)\{kind="(\w+)"\} (\S+)$/gm)) {
    const e = out.get(m[2]!) ?? { count: 0, sum: 0 };
    e[m[1] === "sum" ? "sum" : "count"] = Number(m[3]);
    out.set(m[2]!, e);
  }
  return out;
}

/** The router's switchyard_upstream_send_wait_seconds: cumulative count per bucket bound (seconds; Infinity for +Inf), and the sum. */
interface HeldHistogram {
  buckets: Array<[number, number]>;
  sum: number;
}

function upstreamHeld(text: string): HeldHistogram {
  const buckets: Array<[number, number]> = [];
  for (const m of text.matchAll(/^switchyard_upstream_send_wait_seconds_bucket\{le="([^"]+)"\} (\S+)$/gm)) buckets.push([m[1] === "+Inf" ? Infinity : Number(m[1]), Number(m[2])]);
  const sum = Number(/^switchyard_upstream_send_wait_seconds_sum (\S+)$/m.exec(text)?.[1] ?? 0);
  return { buckets, sum };
}

/** The calls of the load by how long they were held: each bucket's share, and the mean. */
function heldTable(before: HeldHistogram, after: HeldHistogram): string {
  const at = (h: HeldHistogram, i: number) => h.buckets[i]?.[1] ?? 0;
  const total = at(after, after.buckets.length - 1) - at(before, before.buckets.length - 1);
  if (total <= 0) return "(no worker calls)";
  const ms = (s: number) => (s === Infinity ? "∞" : fmt(s * 1000, s < 0.001 ? 2 : 1));
  const rows = after.buckets.map(([le], i) => {
    const lower = i === 0 ? 0 : after.buckets[i - 1]![0];
    const n = at(after, i) - at(before, i) - (i === 0 ? 0 : at(after, i - 1) - at(before, i - 1));
    return `| ${ms(lower)}–${ms(le)} | ${n} | ${fmt((100 * n) / total, 1)} |`;
  });
  return [
    "| held (ms) | calls | share % |",
    "|---|---:|---:|",
    ...rows,
    `| **all** | **${total}** | mean ${fmt(((after.sum - before.sum) * 1000) / total, 3)} ms |`,
  ].join("\n");
}

function gcTable(before: GcPauses, after: GcPauses): string {
  const rows = [...after].map(([kind, a]) => {
    const b = before.get(kind) ?? { count: 0, sum: 0 };
    const n = a.count - b.count;
    const ms = (a.sum - b.sum) * 1000;
    return { kind, n, ms };
  });
  return ["| kind | pauses | total ms | mean ms |", "|---|---:|---:|---:|", ...rows.filter((r) => r.n > 0).map((r) => `| ${r.kind} | ${r.n} | ${fmt(r.ms, 1)} | ${fmt(r.ms / r.n, 2)} |`)].join("\n");
}

