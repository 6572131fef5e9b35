// Records llama.cpp's tokenization and greedy decode (with raw logits) for any
// GGUF, via node-llama-cpp's CPU prebuilt. Used for the Gemma 3 fixture and for
// the random-weight GGUFs of `switchyard-engine gguf-random` (issue 17):
//
//   node record-gguf.mjs MODEL.gguf OUT.json [--prompts p1,p2,...|--ids 1,2,3] [--tokens 16] [--top 5] [--texts t1|t2]
//
// --ids gives one prompt as token ids (random vocabularies have no text);
// --top N records the N highest logits per step (--top all: every logit).
// --texts: strings whose tokenization (add_special=false, parse_special=false)
// is recorded too.
import fs from "node:fs";
import path from "node:path";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";

const args = process.argv.slice(2);
const opt = (name, dflt) => {
    const i = args.indexOf(name);
    return i >= 0 ? args[i + 1] : dflt;
};
const [modelPath, outPath] = args;
if (!modelPath || !outPath) throw new Error("usage: node record-gguf.mjs MODEL.gguf OUT.json [--prompts ...] [--ids ...] [--tokens N] [--top N|all]");
const MAX_NEW = Number(opt("--tokens", "16"));
const THREADS = 2;

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.error });
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const vocab = model.fileInfo.metadata.tokenizer.ggml.tokens.length;
const topArg = opt("--top", "5");
const TOP = topArg === "all" ? vocab : Number(topArg);
const context = await model.createContext({ contextSize: 1024, threads: THREADS, sequences: 1 });
const sequence = context.getSequence();
const nextOpts = { token: true, options: { temperature: 0 }, logits: { filter: { tokens: [], includeTop: TOP, includeSelected: true } } };

async function greedy(promptIds) {
    await sequence.clearHistory();
    const out = [];
    const steps = [];
    let input = promptIds.map((id, i) => (i === promptIds.length - 1 ? [id, { generateNext: nextOpts }] : id));
    while (out.length < MAX_NEW) {
        const res = await sequence.controlledEvaluate(input);
        const next = res[input.length - 1]?.next;
        if (next?.token == null) throw new Error("no token generated");
        const top = [...next.logits.entries()].slice(0, TOP).map(([t, l]) => [t, Number(l.toFixed(5))]);
        out.push(next.token);
        steps.push({ id: next.token, top_logits: top, margin: Number((top[0][1] - top[1][1]).toFixed(5)) });
        if (model.isEogToken(next.token)) break;
        input = [[next.token, { generateNext: nextOpts }]];
    }
    return { completion_ids: out, steps };
}

const cases = [];
const idsArg = opt("--ids");
if (idsArg) {
    const prompt_ids = idsArg.split(",").map(Number);
    cases.push({ prompt_ids, ...(await greedy(prompt_ids)) });
} else {
    for (const prompt of opt("--prompts", "The capital of France is,def fibonacci(n):").split(",")) {
        // The way a completion request tokenizes: BOS where the model adds it, special tokens parsed.
        const prompt_ids = model.tokenize(prompt, true);
        if (model.tokens.shouldPrependBosToken && model.tokens.bos != null && prompt_ids[0] !== model.tokens.bos) prompt_ids.unshift(model.tokens.bos);
        const g = await greedy(prompt_ids);
        cases.push({ prompt, prompt_ids, ...g, completion_text: model.detokenize(g.completion_ids.filter((t) => !model.isEogToken(t)), false) });
        console.log(JSON.stringify(prompt), "->", JSON.stringify(cases.at(-1).completion_text));
    }
}
const texts = (opt("--texts", "") || "").split("|").filter((t) => t.length > 0);
const tokenizer = texts.map((text) => ({ text, ids: model.tokenize(text, false) }));

const nlc = JSON.parse(fs.readFileSync(path.join(path.dirname(new URL(import.meta.url).pathname), "node_modules", "node-llama-cpp", "package.json"), "utf8")).version;
fs.writeFileSync(outPath, JSON.stringify({
    model: path.basename(modelPath),
    generator: { tool: `node-llama-cpp ${nlc}`, llama_cpp_release: llama.llamaCppRelease.release, backend: "cpu prebuilt", script: "bench/reference/record-gguf.mjs", threads: THREADS },
    settings: { max_new_tokens: MAX_NEW, top: TOP, sampler: "greedy argmax (temperature 0), no penalties" },
    cases,
    tokenizer,
}) + "\n");
console.log(`wrote ${outPath}`);
await context.dispose();
await model.dispose();
await llama.dispose();
