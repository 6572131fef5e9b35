// llama.cpp (node-llama-cpp, CPU prebuilt) speed baseline for SmolLM2-135M-Instruct Q4_1:
// single-stream prefill tok/s for a 128-token prompt and greedy decode tok/s for 64 tokens, threads=2.
//
// Usage (from bench/reference):  node speed.mjs [path/to/model.gguf] [--runs N] [--json out.json]
import os from "node:os";
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const here = path.dirname(fileURLToPath(import.meta.url));
const args = process.argv.slice(2);
const flag = (name, dflt) => {
    const i = args.indexOf(name);
    if (i < 0) return dflt;
    const v = args[i + 1];
    args.splice(i, 2);
    return v;
};
const RUNS = Number(flag("--runs", "7"));
const jsonOut = flag("--json", null);
const modelPath = args[0] ??
    path.join(os.homedir(), ".cache", "switchyard", "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf");
const THREADS = 2;
const PROMPT_TOKENS = 128;
const DECODE_TOKENS = 64;

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.warn });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const context = await model.createContext({ contextSize: 1024, batchSize: 512, threads: THREADS, sequences: 1 });
const sequence = context.getSequence();

const filler = "Switchyard routes OpenAI-compatible requests across self-hosted workers and paid APIs. " +
    "Each worker reports its queue depth, the models it has loaded, and its recent throughput, " +
    "so the router can pick the cheapest backend that still meets the latency target. ";
let promptIds = [];
while (promptIds.length < PROMPT_TOKENS) promptIds = model.tokenize(filler.repeat(Math.ceil(PROMPT_TOKENS / 40) + 1), false);
promptIds = promptIds.slice(0, PROMPT_TOKENS);
const decodePromptIds = model.tokenize("Once upon a time, in a small village by the sea,", false);

const now = () => Number(process.hrtime.bigint()) / 1e6; // ms
const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)]; };

async function prefillOnce() {
    await sequence.clearHistory();
    const t0 = now();
    await sequence.evaluateWithoutGeneratingNewTokens(promptIds);
    return now() - t0;
}

async function decodeOnce() {
    await sequence.clearHistory();
    const stamps = [];
    // greedy, no penalties; EOG is never a reason to stop early here (yieldEogToken + count only)
    for await (const _ of sequence.evaluate(decodePromptIds, { temperature: 0, yieldEogToken: true })) {
        stamps.push(now());
        if (stamps.length >= DECODE_TOKENS) break;
    }
    // first stamp = prefill of the short prompt + first sample; decode rate over the remaining steps
    return { n: stamps.length, ms: stamps.at(-1) - stamps[0], steps: stamps.length - 1 };
}

// warm-up
await prefillOnce();
await decodeOnce();

const prefillMs = [];
const decodeRates = [];
let decodedTokens = 0;
for (let i = 0; i < RUNS; i++) {
    prefillMs.push(await prefillOnce());
    const d = await decodeOnce();
    decodedTokens = d.n;
    decodeRates.push((d.steps / d.ms) * 1000);
}

const prefillRates = prefillMs.map((ms) => (PROMPT_TOKENS / ms) * 1000);
const nlcVersion = JSON.parse(fs.readFileSync(path.join(here, "node_modules", "node-llama-cpp", "package.json"), "utf8")).version;
const result = {
    model: path.basename(modelPath),
    engine: `llama.cpp ${llama.llamaCppRelease.release} via node-llama-cpp ${nlcVersion} (CPU prebuilt)`,
    threads: THREADS,
    cpu: `${os.cpus()[0]?.model ?? "?"} x${os.cpus().length}`,
    runs: RUNS,
    prefill: { prompt_tokens: PROMPT_TOKENS, median_tok_s: +median(prefillRates).toFixed(1), best_tok_s: +Math.max(...prefillRates).toFixed(1), all_tok_s: prefillRates.map((r) => +r.toFixed(1)) },
    decode: { tokens: decodedTokens, median_tok_s: +median(decodeRates).toFixed(1), best_tok_s: +Math.max(...decodeRates).toFixed(1), all_tok_s: decodeRates.map((r) => +r.toFixed(1)) },
};

console.log(`model:   ${result.model}`);
console.log(`engine:  ${result.engine}, threads=${THREADS}`);
console.log(`cpu:     ${result.cpu}`);
console.log("");
const row = (name, r) =>
    `| ${name.padEnd(28)} | ${String(r.median_tok_s).padStart(12)} | ${String(r.best_tok_s).padStart(10)} | ${r.all_tok_s.join(", ")}`;
console.log("| phase                        | median tok/s | best tok/s | runs (tok/s)");
console.log("|------------------------------|-------------:|-----------:|-------------");
console.log(row(`prefill (${PROMPT_TOKENS}-token prompt)`, result.prefill));
console.log(row(`decode (greedy, ${decodedTokens} tokens)`, result.decode));
console.log("\n(best = least-disturbed run; on a shared 2-core box other processes make single runs much slower)");
if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(result, null, 2) + "\n");

await context.dispose();
await model.dispose();
await llama.dispose();
