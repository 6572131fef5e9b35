// `switchyard bench engine`: the Candle engine against llama.cpp on the same
// GGUF and thread count — llama.cpp compiled for this CPU (llama-cpp-python,
// GGML_NATIVE=ON, bench/lib/llama-cpp.ts) and node-llama-cpp's generic CPU
// prebuilt — in one run and interleaved round by round (this box is noisy);
// ratios are claimed against the stronger reference: prefill tok/s,
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
import { ensureLlamaCpp, installedLlamaCpp, LLAMA_CPP_INSTALL_HINT } from "./lib/llama-cpp.ts";
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
  const env = { ...process.env, NODE_LLAMA_CPP_SKIP_DOWNLOAD: "true" };
  try {
    // ci's output is kept back: its refusal below is expected on newer npm and is a page long.
    execFileSync("npm", ["ci", "--omit=optional", "--no-audit", "--no-fund"], { cwd: refDir, env, stdio: ["ignore", "inherit", "pipe"] });
  } catch (err) {
    // Newer npm refuses `ci` when the lockfile lacks entries for other
    // platforms' optional prebuilts (they are omitted on purpose); `install`
    // still takes every version it has from the lockfile.
    const lines = String((err as { stderr?: Buffer }).stderr ?? "").split("\n");
    const why = (lines.find((l) => l.includes("Missing:")) ?? lines.find((l) => l.startsWith("npm error")) ?? "").replace(/^npm error\s*/, "").trim();
    process.stderr.write(`» npm ci refused the lockfile (${why || "no reason given"}); installing with npm install (versions from the lockfile)\n`);
    execFileSync("npm", ["install", "--omit=optional", "--no-audit", "--no-fund", "--no-save"], { cwd: refDir, env, stdio: "inherit" });
  }
}

interface RefRound {
  prefill: number;
  decode: number;
  /** Aggregate decode tok/s at `streams` sequences in one batch (the native reference only). */
  aggregate?: { streams: number; tokS: number };
  engine: string;
}

type SpeedJson = { engine: string; prefill: { median_tok_s: number }; decode: { median_tok_s: number }; aggregate?: { streams: number; median_tok_s: number } };

async function nodeLlamaRound(model: string, runs: number): Promise<RefRound> {
  const out = path.join(mkdtempSync(path.join(tmpdir(), "sy-llama-")), "speed.json");
  await run(process.execPath, [path.join(refDir, "speed.mjs"), model, "--runs", String(runs), "--json", out], { cwd: refDir, maxBuffer: 1 << 20 });
  const r = JSON.parse(readFileSync(out, "utf8")) as SpeedJson;
  return { prefill: r.prefill.median_tok_s, decode: r.decode.median_tok_s, engine: r.engine };
}

async function nativeLlamaRound(python: string, model: string, runs: number, threads: number, streams: number, tokens: number): Promise<RefRound> {
  const out = path.join(mkdtempSync(path.join(tmpdir(), "sy-llama-native-")), "speed.json");
  const args = [path.join(refDir, "llama_cpp_speed.py"), model, "--threads", String(threads), "--runs", String(runs), "--streams", String(streams), "--tokens", String(tokens), "--json", out];
  await run(python, args, { cwd: refDir, maxBuffer: 1 << 20 });
  const r = JSON.parse(readFileSync(out, "utf8")) as SpeedJson;
  return {
    prefill: r.prefill.median_tok_s,
    decode: r.decode.median_tok_s,
    ...(r.aggregate ? { aggregate: { streams: r.aggregate.streams, tokS: r.aggregate.median_tok_s } } : {}),
    engine: r.engine,
  };
}

export type ReferenceChoice = "both" | "native" | "node";

/** The native reference's python, building it on first use; undefined (with the reason on stderr) when it cannot be had. */
async function nativeReference(choice: ReferenceChoice): Promise<string | undefined> {
  if (choice === "node") return undefined;
  const say = (s: string) => process.stderr.write(`${s}\n`);
  try {
    return installedLlamaCpp() ?? (await ensureLlamaCpp(say));
  } catch (e) {
    if (choice === "native") throw e;
    say(`» the native llama.cpp reference is not available (${String(e).slice(0, 1500)}); comparing with node-llama-cpp only. To build it: ${LLAMA_CPP_INSTALL_HINT}`);
    return undefined;
  }
}

export async function runEngineBench(opts: { quick: boolean; model?: string; reference?: ReferenceChoice }): Promise<number> {
  const choice = opts.reference ?? "both";
  const threads = 2;
  const streams = [1, 4, 8, 16];
  const tokens = opts.quick ? 32 : 64;
  const rounds = opts.quick ? 1 : 3;
  const modelName = opts.model ?? "smollm2-135m-instruct";
  const model = (await resolveModel(modelName)).path;
  // Worker start → ready loads what a default worker serves, or the model asked for.
  const workerModels = opts.model ? [opts.model] : ["smollm2-135m-instruct", "all-minilm-l6-v2"];
  const bin = await ensureEngine("cpu");
  const python = await nativeReference(choice);
  if (choice !== "native") ensureReference();

  const eng: EngineRound[] = [];
  const refs: { name: string; rounds: RefRound[] }[] = [];
  if (python) refs.push({ name: "llama.cpp native", rounds: [] });
  if (choice !== "native") refs.push({ name: "node-llama-cpp", rounds: [] });
  const refRuns = opts.quick ? 2 : 3;
  let nativeFailed: string | undefined;
  for (let r = 0; r < rounds; r++) {
    eng.push(await engineRound(bin, model, threads, streams, tokens));
    for (const ref of [...refs]) {
      if (ref.name === "node-llama-cpp") {
        ref.rounds.push(await nodeLlamaRound(model, refRuns));
        continue;
      }
      try {
        ref.rounds.push(await nativeLlamaRound(python!, model, refRuns, threads, 8, tokens));
      } catch (e) {
        // A native build that dies (an instruction this CPU lacks, a llama.cpp that rejects the file) must not take node-llama-cpp's figures with it.
        if (choice === "native") throw e;
        nativeFailed = String(e).split("\n").filter(Boolean).slice(-3).join(" | ").slice(0, 600);
        process.stderr.write(`» the native llama.cpp reference failed, going on with node-llama-cpp: ${nativeFailed}\n`);
        refs.splice(refs.indexOf(ref), 1);
      }
    }
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
  const engPrefill = med(eng.map((e) => e.prefill));
  const agg8 = med(eng.map((e) => e.rows.get(8)!.aggregate));
  const refPrefill = refs.map((r) => med(r.rounds.map((x) => x.prefill)));
  const refDecode = refs.map((r) => med(r.rounds.map((x) => x.decode)));
  const refAgg = refs.map((r) => {
    const a = r.rounds.map((x) => x.aggregate?.tokS).filter((x) => x !== undefined);
    return a.length > 0 ? med(a) : NaN;
  });
  // The stronger reference per measure: the ratio we claim is against it.
  const strongest = (xs: number[]) => xs.reduce((m, x) => (Number.isFinite(x) && !(x <= m) ? x : m), NaN);
  const llamaDecode = strongest(refDecode);
  const out: string[] = [];
  out.push(`Model ${opts.model ? `${modelName} (${path.basename(model)})` : "SmolLM2-135M-Instruct Q4_1"}, ${threads} threads, ${tokens} decoded tokens per stream, 128-token prompt; median of ${rounds} interleaved round(s).`);
  for (const r of refs) out.push(`Reference ${r.name}: ${r.rounds[0]!.engine}.`);
  if (!python && choice !== "node") out.push(`(The native llama.cpp reference was not available: ${LLAMA_CPP_INSTALL_HINT}.)`);
  if (nativeFailed) out.push(`(The native llama.cpp reference failed: ${nativeFailed}.)`);
  out.push("");
  out.push(`| measure | switchyard-engine | ${refs.map((r) => r.name).join(" | ")} | ratio vs the stronger |`);
  out.push(`|---|---:|${refs.map(() => "---:|").join("")}---:|`);
  const row = (label: string, mine: number, theirs: number[]) => `| ${label} | ${fmt(mine)} | ${theirs.map((x) => fmt(x)).join(" | ")} | ${fmt(mine / strongest(theirs), 2)}× |`;
  out.push(row("prefill tok/s", engPrefill, refPrefill));
  out.push(row("decode tok/s, 1 stream", single, refDecode));
  if (refAgg.some(Number.isFinite)) {
    out.push(row("aggregate decode tok/s, 8 streams", agg8, refAgg));
    out.push(`| aggregate at 8 ÷ single | ${fmt(agg8 / single, 2)} | ${refs.map((_, i) => fmt(refAgg[i]! / refDecode[i]!, 2)).join(" | ")} | |`);
  }
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
  out.push("");
  out.push(
    "Targets: " +
      [
        `prefill ≥ 1.0× llama.cpp (the stronger reference): ${engPrefill >= strongest(refPrefill) ? "met" : "NOT met"} (${fmt(engPrefill / strongest(refPrefill), 2)}×)`,
        `single-stream decode ≥ 1.0× llama.cpp (the stronger reference): ${single >= llamaDecode ? "met" : "NOT met"} (${fmt(single / llamaDecode, 2)}×)`,
        `aggregate at 8 streams ≥ 3× single: ${agg8 >= 3 * single ? "met" : "NOT met"} (${fmt(agg8 / single, 2)}×)`,
        `start → ready ≤ 5 s: ${med(starts) <= 5000 ? "met" : "NOT met"} (${fmt(med(starts) / 1000, 2)} s)`,
        `token mask < 5 % of decode time at 8 streams: ${maskPercent < 5 ? "met" : "NOT met"} (${fmt(maskPercent, 2)} %)`,
      ].join("; "),
  );
  process.stdout.write(out.join("\n") + "\n");
  return 0;
}
