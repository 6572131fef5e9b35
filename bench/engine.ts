// `switchyard bench engine`: the Candle engine against llama.cpp
// (node-llama-cpp's CPU prebuilt) on the same GGUF and thread count, in one
// run and interleaved round by round (this box is noisy): prefill tok/s,
// single-stream decode, aggregate decode at 1/4/8/16 streams, KV memory per
// added sequence, constrained decoding's token-mask cost per token at 8
// streams (engine only), and worker start → ready with a warm cache.
import { execFile, execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { ensureEngine, resolveModel, startAgent } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";
import { percentile } from "./lib/load.ts";
import { repoRoot } from "#testkit/procs";

const run = promisify(execFile);
const refDir = path.join(repoRoot(), "bench", "reference");
const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
const med = (xs: number[]) => percentile(xs, 50);

interface EngineRound {
  prefill: number;
  /** Time to first token of the prompt computed whole, and with all but its last 16 tokens from the prefix cache. */
  ttft?: { cold: number; warm: number; cached: number };
  rows: Map<number, { perStream: number; aggregate: number; kvBytesPerToken: number }>;
  /** JSON Schema token masks at `streams` streams: µs per masked token and their share of decode time. */
  mask?: { streams: number; usPerToken: number; percent: number };
}

async function engineRound(bin: string, model: string, threads: number, streams: number[], tokens: number): Promise<EngineRound> {
  const { stdout } = await run(bin, ["bench", "--model", model, "--streams", streams.join(","), "--tokens", String(tokens), "--threads", String(threads), "--repeats", "1"], { maxBuffer: 1 << 20 });
  const prefill = Number(/prefill \d+ tokens: ([\d.]+) tok\/s/.exec(stdout)?.[1]);
  const rows = new Map<number, { perStream: number; aggregate: number; kvBytesPerToken: number }>();
  for (const line of stdout.split("\n")) {
    const m = /^\| (\d+) \| ([\d.]+) \| ([\d.]+) \| [\d.]+ \| [\d.]+ \| \d+ \((\d+) per token\)/.exec(line);
    if (m) rows.set(Number(m[1]), { perStream: Number(m[2]), aggregate: Number(m[3]), kvBytesPerToken: Number(m[4]) });
  }
  if (!Number.isFinite(prefill) || rows.size === 0) throw new Error(`could not read the engine bench output:\n${stdout}`);
  const t = /time to first token, \d+-token prompt: ([\d.]+) ms computed, ([\d.]+) ms with (\d+) tokens/.exec(stdout);
  const m = /constrained decoding \(JSON Schema\), (\d+) streams: mask ([\d.]+) us\/token, ([\d.]+)% of decode time/.exec(stdout);
  return {
    prefill,
    rows,
    ...(t ? { ttft: { cold: Number(t[1]), warm: Number(t[2]), cached: Number(t[3]) } } : {}),
    ...(m ? { mask: { streams: Number(m[1]), usPerToken: Number(m[2]), percent: Number(m[3]) } } : {}),
  };
}

function ensureReference(): void {
  if (existsSync(path.join(refDir, "node_modules", "node-llama-cpp"))) return;
  process.stderr.write("» installing node-llama-cpp (CPU prebuilt only) in bench/reference\n");
  const opts = { cwd: refDir, stdio: "inherit" as const, env: { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: "true" } };
  try {
    execFileSync("npm", ["ci", "--omit=optional", "--no-audit", "--no-fund"], opts);
  } catch {
    // Newer npm refuses `ci` when the lockfile lacks entries for other
    // platforms' optional prebuilts (they are omitted on purpose); `install`
    // still takes every version it has from the lockfile.
    process.stderr.write("» npm ci refused the lockfile; installing with npm install (versions from the lockfile)\n");
    execFileSync("npm", ["install", "--omit=optional", "--no-audit", "--no-fund", "--no-save"], opts);
  }
}

async function llamaRound(model: string, runs: number): Promise<{ prefill: number; decode: number; engine: string }> {
  const out = path.join(mkdtempSync(path.join(tmpdir(), "sy-llama-")), "speed.json");
  await run(process.execPath, [path.join(refDir, "speed.mjs"), model, "--runs", String(runs), "--json", out], { cwd: refDir, maxBuffer: 1 << 20 });
  const r = JSON.parse(readFileSync(out, "utf8")) as { engine: string; prefill: { median_tok_s: number }; decode: { median_tok_s: number } };
  return { prefill: r.prefill.median_tok_s, decode: r.decode.median_tok_s, engine: r.engine };
}

export async function runEngineBench(opts: { quick: boolean; model?: string }): Promise<number> {
  const threads = 2;
  const streams = [1, 4, 8, 16];
  const tokens = opts.quick ? 32 : 64;
  const rounds = opts.quick ? 1 : 3;
  const modelName = opts.model ?? "smollm2-135m-instruct";
  const model = (await resolveModel(modelName)).path;
  // Worker start → ready loads what a default worker serves, or the model asked for.
  const workerModels = opts.model ? [opts.model] : ["smollm2-135m-instruct", "all-minilm-l6-v2"];
  const bin = await ensureEngine("cpu");
  ensureReference();

  const eng: EngineRound[] = [];
  const ref: { prefill: number; decode: number; engine: string }[] = [];
  for (let r = 0; r < rounds; r++) {
    eng.push(await engineRound(bin, model, threads, streams, tokens));
    ref.push(await llamaRound(model, opts.quick ? 2 : 3));
    process.stderr.write(`round ${r + 1}/${rounds} done\n`);
  }

  // Worker start → ready (engine spawned, both models loaded, warm-up pass), cache warm.
  const starts: number[] = [];
  for (let i = 0; i < (opts.quick ? 1 : 3); i++) {
    const t0 = performance.now();
    const agent = await startAgent({ registry: new MemoryRegistryStore(), models: workerModels, token: "bench-token-0000", device: "cpu", engineBinary: bin, log: () => {} });
    await agent.supervisor.whenReady();
    starts.push(performance.now() - t0);
    await agent.stop();
  }

  const single = med(eng.map((e) => e.rows.get(1)!.perStream));
  const llamaDecode = med(ref.map((r) => r.decode));
  const out: string[] = [];
  out.push(`Model ${opts.model ? `${modelName} (${path.basename(model)})` : "SmolLM2-135M-Instruct Q4_1"}, ${threads} threads, ${tokens} decoded tokens per stream, 128-token prompt; median of ${rounds} interleaved round(s).`);
  out.push(`Reference: ${ref[0]!.engine}.`);
  out.push("");
  out.push("| measure | switchyard-engine | llama.cpp | ratio |");
  out.push("|---|---:|---:|---:|");
  out.push(`| prefill tok/s | ${fmt(med(eng.map((e) => e.prefill)))} | ${fmt(med(ref.map((r) => r.prefill)))} | ${fmt(med(eng.map((e) => e.prefill)) / med(ref.map((r) => r.prefill)), 2)}× |`);
  out.push(`| decode tok/s, 1 stream | ${fmt(single)} | ${fmt(llamaDecode)} | ${fmt(single / llamaDecode, 2)}× |`);
  const ttft = eng.map((e) => e.ttft).filter((t) => t !== undefined);
  if (ttft.length > 0) {
    const cold = med(ttft.map((t) => t.cold));
    const warm = med(ttft.map((t) => t.warm));
    out.push("");
    out.push(`Prefix cache: time to first token of the 128-token prompt ${fmt(cold, 2)} ms computed, ${fmt(warm, 2)} ms with ${ttft[0]!.cached} tokens from the cache (${fmt(cold / warm)}×).`);
  }
  out.push("");
  out.push("| streams | per-stream tok/s | aggregate tok/s | × single stream | KV cache per sequence (bytes/token) |");
  out.push("|---:|---:|---:|---:|---:|");
  for (const n of streams) {
    const agg = med(eng.map((e) => e.rows.get(n)!.aggregate));
    out.push(`| ${n} | ${fmt(med(eng.map((e) => e.rows.get(n)!.perStream)))} | ${fmt(agg)} | ${fmt(agg / single, 2)} | ${eng[0]!.rows.get(n)!.kvBytesPerToken} |`);
  }
  const masks = eng.map((e) => e.mask).filter((m) => m !== undefined);
  const maskPercent = masks.length > 0 ? med(masks.map((m) => m.percent)) : NaN;
  if (masks.length > 0) {
    out.push("");
    out.push(`Constrained decoding (a JSON Schema, llguidance): token mask ${fmt(med(masks.map((m) => m.usPerToken)))} µs per token at ${masks[0]!.streams} streams, ${fmt(maskPercent, 2)} % of decode time.`);
  }
  out.push("");
  out.push(`Worker start → ready (warm cache, ${workerModels.join(" + ")} loaded and warmed): ${starts.map((s) => fmt(s, 0)).join(", ")} ms`);
  const agg8 = med(eng.map((e) => e.rows.get(8)!.aggregate));
  out.push("");
  out.push(
    "Targets: " +
      [
        `single-stream decode ≥ 1.0× llama.cpp: ${single >= llamaDecode ? "met" : "NOT met"} (${fmt(single / llamaDecode, 2)}×)`,
        `aggregate at 8 streams ≥ 3× single: ${agg8 >= 3 * single ? "met" : "NOT met"} (${fmt(agg8 / single, 2)}×)`,
        `start → ready ≤ 5 s: ${med(starts) <= 5000 ? "met" : "NOT met"} (${fmt(med(starts) / 1000, 2)} s)`,
        `token mask < 5 % of decode time at 8 streams: ${maskPercent < 5 ? "met" : "NOT met"} (${fmt(maskPercent, 2)} %)`,
      ].join("; "),
  );
  process.stdout.write(out.join("\n") + "\n");
  return 0;
}
