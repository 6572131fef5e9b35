// `switchyard bench router`: what the router adds on top of a worker.
// Open-loop streaming load at 1/100/1000 concurrent streams through
// Switchyard, a bare Node pass-through proxy (the floor) and directly to the
// sim worker; closed-loop non-streaming throughput against the same targets
// plus Portkey's gateway (its streaming path fails on Node 20 here); router
// cold start to ready. Everything runs side by side in one run. Last section:
// the money path (bench/money.ts), whose PASS/FAIL sets the exit code.
import path from "node:path";
import { Redis } from "ioredis";
import { benchMoney } from "./money.ts";
import { closedLoop, openLoop, percentile, type LoadResult, type Target } from "./lib/load.ts";
import { startLiteLLM } from "./lib/litellm.ts";
import { freePort, repoRoot, startProc, waitHttp, type Proc } from "#testkit/procs";
import { benchScratch } from "./lib/scratch.ts";

const root = repoRoot();
const here = path.join(root, "bench");
const REDIS = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";

const tsx = (file: string, env: Record<string, string>, label: string) => startProc(process.execPath, ["--import", "tsx", path.join(here, file)], env, label);
// The router as users start it: `switchyard router` (the CLI's bundle).
const cli = path.join(root, "apps/cli/bin/switchyard.mjs");
const routerProc = (env: Record<string, string>) => startProc(process.execPath, [cli, "router"], env, "router");

interface Level {
  streams: number;
  shape: { ttftMs: number; interTokenMs: number; tokens: number };
}

const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");

export async function runRouterBench(opts: { quick: boolean; levels?: number[]; only?: "money"; cluster?: string[] }): Promise<number> {
  if (opts.only !== "money") await benchRouterOverhead(opts);
  // Runs after the router's processes are gone, on its own database and prefix.
  const money = await benchMoney({ quick: opts.quick, log: (s) => process.stdout.write(`${s}\n`) });
  // --cluster: the money and lease figures on this node and on that Redis Cluster, side by side.
  const topo = opts.cluster?.length
    ? await (await import("./topologies.ts")).benchStateTopologies({ quick: opts.quick, single: REDIS, cluster: opts.cluster, log: (s) => process.stdout.write(`${s}\n`) })
    : { ok: true };
  return money.ok && topo.ok ? 0 : 1;
}

async function benchRouterOverhead(opts: { quick: boolean; levels?: number[] }): Promise<number> {
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

    // Cold start: process spawn → /readyz 200, a few times.
    const cold: number[] = [];
    for (let i = 0; i < (opts.quick ? 1 : 3); i++) {
      const t0 = performance.now();
      const r = routerProc(routerEnv);
      await waitHttp(`${routerUrl}/readyz`, { ok: (s) => s === 200 });
      cold.push(performance.now() - t0);
      await r.stop();
    }
    const router = routerProc(routerEnv);
    procs.push(router);
    const passPort = await freePort();
    const pass = tsx("passthrough-main.ts", { PORT: String(passPort), UPSTREAM: simUrl }, "passthrough");
    procs.push(pass);
    const portkeyPort = await freePort();
    const portkey = startProc(process.execPath, [path.join(root, "node_modules/@portkey-ai/gateway/build/start-server.js"), `--port=${portkeyPort}`, "--headless"], { NODE_ENV: "production" }, "portkey");
    procs.push(portkey);
    await waitHttp(`${simUrl}/healthz`, { ok: () => true });
    await waitHttp(`http://127.0.0.1:${passPort}/`, { ok: () => true, init: { method: "POST", body: "{}" } });
    await waitHttp(`http://127.0.0.1:${portkeyPort}/`, { ok: (s) => s === 200 });
    const auth = { authorization: `Bearer ${key}` };
    await waitHttp(`${routerUrl}/v1/models`, { init: { headers: auth }, ok: (s) => s === 200 });
    // The sim's first heartbeat must be visible before load starts.
    const deadline = Date.now() + 5000;
    while (Date.now() < deadline) {
      const m = (await (await fetch(`${routerUrl}/v1/models`, { headers: auth })).json()) as { data: unknown[] };
      if (m.data.length > 0) break;
      await new Promise((r) => setTimeout(r, 50));
    }

    // LiteLLM: the streaming peer (Portkey's streaming fails on Node 20).
    const lite = await startLiteLLM({ upstream: `${simUrl}/v1`, port: await freePort(), log: (l) => process.stderr.write(`${l}\n`) });
    if ("skipped" in lite) process.stderr.write(`LiteLLM skipped: ${lite.skipped}\n`);
    else procs.push(lite.proc);
    const liteTarget = "skipped" in lite ? undefined : { t: { ...lite.target, name: "litellm" }, proc: lite.proc };

    const targets: { t: Target; proc?: Proc }[] = [
      { t: { name: "direct", url: simUrl, path: "/v1/chat/completions", headers: {} } },
      { t: { name: "node-passthrough", url: `http://127.0.0.1:${passPort}`, path: "/v1/chat/completions", headers: {} }, proc: pass },
      { t: { name: "switchyard", url: routerUrl, path: "/v1/chat/completions", headers: auth }, proc: router },
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

    const levels: Level[] = [
      { streams: 1, shape: { ttftMs: 20, interTokenMs: 20, tokens: 10 } },
      { streams: 100, shape: { ttftMs: 50, interTokenMs: 50, tokens: 20 } },
      { streams: 1000, shape: { ttftMs: 100, interTokenMs: 100, tokens: 20 } },
    ];
    const durationS = opts.quick ? 3 : 10;
    const repeats = opts.quick ? 1 : 3;
    const rows: string[] = [];
    const summary: Record<string, Record<string, { ttft50: number[]; ttft99: number[]; tot50: number[]; tot99: number[]; errors: number; n: number; cpu: number[]; rps: number[] }>> = {};
    const chosen = opts.levels ? levels.filter((l) => opts.levels!.includes(l.streams)) : opts.quick ? levels.slice(0, 2) : levels;
    for (const level of chosen) {
      const streamS = (level.shape.ttftMs + level.shape.interTokenMs * level.shape.tokens) / 1000;
      const rate = level.streams / streamS;
      const body = JSON.stringify({ model: "sim", stream: true, messages: [{ role: "user", content: "hi" }], sim: level.shape });
      summary[level.streams] = {};
      // LiteLLM tops out near 40 streams/s on one core here: at 1000 streams
      // it only queues for minutes, so it runs at the lower levels.
      const levelTargets = liteTarget && level.streams <= 100 ? [...targets, liteTarget] : targets;
      for (let rep = 0; rep < repeats; rep++) {
        for (const { t: tg, proc } of levelTargets) {
          const cpu0 = proc?.cpuSeconds() ?? NaN;
          const r: LoadResult = await openLoop(tg, { ratePerS: rate, durationS, body, stream: true });
          const cpu = proc ? (proc.cpuSeconds() - cpu0) / r.wallS : NaN;
          const ok = r.samples.filter((s) => s.ok);
          const s = (summary[level.streams]![tg.name] ??= { ttft50: [], ttft99: [], tot50: [], tot99: [], errors: 0, n: 0, cpu: [], rps: [] });
          s.ttft50.push(percentile(ok.map((x) => x.ttftMs), 50));
          s.ttft99.push(percentile(ok.map((x) => x.ttftMs), 99));
          s.tot50.push(percentile(ok.map((x) => x.totalMs), 50));
          s.tot99.push(percentile(ok.map((x) => x.totalMs), 99));
          s.errors += r.errors;
          s.n += r.samples.length;
          s.cpu.push(cpu);
          s.rps.push(ok.length / r.wallS);
        }
      }
      const med = (xs: number[]) => percentile(xs, 50);
      const spread = (xs: number[]) => (xs.length > 1 ? `±${fmt((Math.max(...xs) - Math.min(...xs)) / 2, 2)}` : "");
      const d = summary[level.streams]!.direct!;
      for (const { t: tg } of levelTargets) {
        const s = summary[level.streams]![tg.name]!;
        rows.push(
          `| ${level.streams} | ${tg.name} | ${fmt(med(s.rps))} | ${s.n - s.errors}/${s.n} | ${s.errors} | ${fmt(med(s.ttft50), 2)} | ${fmt(med(s.ttft99), 2)} | ${fmt(med(s.tot50))} | ${fmt(med(s.tot99))} | ${tg.name === "direct" ? "—" : `${fmt(med(s.ttft50) - med(d.ttft50), 2)}${spread(s.ttft50.map((x, i) => x - d.ttft50[i]!))}`} | ${tg.name === "direct" ? "—" : `${fmt(med(s.ttft99) - med(d.ttft99), 2)}${spread(s.ttft99.map((x, i) => x - d.ttft99[i]!))}`} | ${tg.name === "direct" ? "—" : fmt(med(s.tot50) - med(d.tot50), 2)} | ${tg.name === "direct" ? "—" : fmt(med(s.tot99) - med(d.tot99), 2)} | ${fmt(med(s.cpu), 2)} |`,
        );
      }
      process.stderr.write(`level ${level.streams} done\n`);
    }

    // Peak non-streaming throughput, closed loop, zero-latency worker.
    const tpRows: string[] = [];
    const tp: Record<string, number> = {};
    const clients = 64;
    for (const tg of [...targets.map((x) => x.t), portkeyTarget, ...(liteTarget ? [liteTarget.t] : [])]) {
      const r = await closedLoop(tg, { clients, durationS: opts.quick ? 2 : 5, body: warmBody, stream: false });
      const ok = r.samples.filter((s) => s.ok);
      tp[tg.name] = ok.length / r.wallS;
      tpRows.push(`| ${tg.name} | ${fmt(tp[tg.name]!, 0)} | ${fmt(percentile(ok.map((s) => s.totalMs), 50), 2)} | ${fmt(percentile(ok.map((s) => s.totalMs), 99), 2)} | ${r.errors} |`);
    }

    const out: string[] = [];
    out.push(`### Streaming, open loop (${durationS}s per run, ${repeats} repeat(s); ms; Δ = target − direct, median over repeats ± half-range)`);
    out.push("");
    out.push(`Peers: node-passthrough = bare Node proxy (the floor); litellm = LiteLLM proxy ${"skipped" in lite ? "(skipped)" : lite.version} (streaming peer, levels ≤ 100); Portkey only in the non-streaming table (its streaming path fails on Node 20).`);
    out.push("");
    out.push("| streams | target | req/s | ok | errors | TTFT p50 | TTFT p99 | total p50 | total p99 | ΔTTFT p50 | ΔTTFT p99 | Δtotal p50 | Δtotal p99 | proxy CPU (cores) |");
    out.push("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    out.push(...rows);
    out.push("");
    out.push(`### Non-streaming peak throughput, closed loop (${clients} clients, zero-latency sim worker)`);
    out.push("");
    out.push("| target | req/s | p50 ms | p99 ms | errors |");
    out.push("|---|---:|---:|---:|---:|");
    out.push(...tpRows);
    out.push("");
    out.push(`### Router cold start (spawn → /readyz 200): ${cold.map((c) => fmt(c, 0)).join(", ")} ms`);
    out.push("");
    const s100 = summary[100]?.switchyard;
    const d100 = summary[100]?.direct;
    const s1000 = summary[1000]?.switchyard;
    const checks = [
      ["ΔTTFT p99 at 100 streams ≤ 1 ms", s100 && d100 ? percentile(s100.ttft99, 50) - percentile(d100.ttft99, 50) <= 1 : undefined],
      ["1000 streams with 0 errors", s1000 ? s1000.errors === 0 : undefined],
      ["throughput ≥ 2× Portkey", tp.switchyard! >= 2 * tp.portkey!],
      ...(tp.litellm ? ([["throughput ≥ 2× LiteLLM", tp.switchyard! >= 2 * tp.litellm]] as const) : []),
      ["cold start ≤ 500 ms", percentile(cold, 50) <= 500],
    ] as const;
    out.push("Targets: " + checks.map(([name, ok]) => `${name}: ${ok === undefined ? "not run" : ok ? "met" : "NOT met"}`).join("; "));
    process.stdout.write(out.join("\n") + "\n\n");
    return 0;
  } finally {
    await Promise.all(procs.map((p) => p.stop()));
    const r = new Redis(REDIS);
    await scratch.drop(r);
    r.disconnect();
  }
}
