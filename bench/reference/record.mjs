// Records llama.cpp reference fixtures for SmolLM2-135M-Instruct (Q4_1 GGUF) via node-llama-cpp:
//   workers/engine/tests/fixtures/tokenizer_parity.json
//   workers/engine/tests/fixtures/greedy_reference.json
//   workers/engine/tests/fixtures/chat_template.jinja
//
// Usage (from bench/reference):  node record.mjs [path/to/SmolLM2-135M-Instruct.Q4_1.gguf]
// Default model path: ~/.cache/switchyard/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf
//
// Only the CPU prebuilt binary (@node-llama-cpp/linux-x64) is used: gpu:false, build:"never".
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { getLlama, LlamaLogLevel } from "node-llama-cpp";
import { Template } from "@huggingface/jinja";

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, "..", "..");
const fixturesDir = path.join(repoRoot, "workers", "engine", "tests", "fixtures");
const modelPath = process.argv[2] ??
    path.join(os.homedir(), ".cache", "switchyard", "models", "smollm2-135m-instruct", "SmolLM2-135M-Instruct.Q4_1.gguf");
const THREADS = 2;
const MAX_NEW_TOKENS = 16;

const nlcVersion = JSON.parse(fs.readFileSync(path.join(here, "node_modules", "node-llama-cpp", "package.json"), "utf8")).version;

const llama = await getLlama({ gpu: false, build: "never", logLevel: LlamaLogLevel.warn });
if (llama.gpu !== false) throw new Error(`expected CPU backend, got gpu=${llama.gpu}`);
const model = await llama.loadModel({ modelPath, gpuLayers: 0 });
const meta = model.fileInfo.metadata;
const tok = meta.tokenizer.ggml;
const chatTemplate = meta.tokenizer.chat_template;

const generator = {
    tool: `node-llama-cpp ${nlcVersion}`,
    llama_cpp_release: llama.llamaCppRelease.release,
    backend: "cpu (prebuilt @node-llama-cpp/linux-x64)",
    script: "bench/reference/record.mjs",
};
const modelFile = path.basename(modelPath);
// Pretty JSON, but arrays of scalars (ids, pieces, [id, logit] pairs) on one line.
const isScalar = (x) => typeof x === "number" || typeof x === "string" || typeof x === "boolean";
const toJson = (obj) => {
    const store = [];
    const s = JSON.stringify(obj, (_k, v) =>
        Array.isArray(v) && v.every((x) => isScalar(x) || (Array.isArray(x) && x.every(isScalar)))
            ? `\u0000${store.push(JSON.stringify(v)) - 1}\u0000`
            : v, 2);
    return s.replace(/"\\u0000(\d+)\\u0000"/g, (_m, i) => store[Number(i)]);
};
const writeJson = (name, obj) => {
    fs.mkdirSync(fixturesDir, { recursive: true });
    fs.writeFileSync(path.join(fixturesDir, name), toJson(obj) + "\n");
    console.log(`wrote ${path.join(fixturesDir, name)}`);
};

// ---------------------------------------------------------------- tokenizer parity
const corpus = [
    // digits
    ["1", false], ["12", false], ["123", false], ["1234567", false], ["3.14159", false],
    ["Call +1 (555) 123-4567 now", false], ["Dates: 2024-03-15, 15/03/2024 and March 15th, 1999.", false],
    ["x=1000000 and y=-42.5e-3", false],
    // unicode
    ["café naïve résumé Zürich", false], ["你好，世界！这是一个测试。", false], ["日本語のテキスト", false],
    ["Привет, как дела?", false], ["مرحبا بالعالم", false], ["Ελληνικά και 한국어", false],
    // emoji
    ["I love 🍕 and 🎉!", false], ["👨‍👩‍👧‍👦 family", false], ["🏳️‍🌈 and 🇫🇷🇯🇵", false], ["👍🏽 thumbs", false],
    // code
    ["def add(a, b):\n    return a + b\n", false],
    ["fn main() {\n    let v: Vec<u32> = (0..10).collect();\n    println!(\"{:?}\", v);\n}\n", false],
    ["{\n  \"name\": \"switchyard\",\n  \"tags\": [\"a\", \"b\"],\n  \"nested\": {\n    \"n\": 1\n  }\n}", false],
    ["if (x != null && y >= 0) { return x->y; } // comment", false],
    // whitespace
    ["hello  world", false], ["a   b    c     d", false], ["\tindented\twith\ttabs", false],
    ["line1\nline2\r\nline3", false], ["trailing spaces   ", false], ["\n\n\n", false], ["  leading two", false],
    ["    ", false], ["word\n\n\nword", false],
    // contractions / casing
    ["don't", false], ["I'LL", false], ["They're here, we've won, it's done, I'd go", false],
    ["HELLO World hello WORLD", false],
    // chat markers
    ["<|im_start|>user\nhi<|im_end|>\n", true],
    ["<|im_start|>user\nhi<|im_end|>\n", false],
    ["<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>assistant\n", true],
    ["<|endoftext|>", true], ["<|endoftext|>", false],
    // edge cases
    [" ", false], ["a", false], [" a", false], ["The quick brown fox jumps over the lazy dog.", false],
    ["https://example.com/path?q=1&lang=en#frag", false],
];

const tokCases = corpus.map(([text, special]) => {
    const ids = model.tokenize(text, special);
    const pieces = ids.map((id) => tok.tokens[id]);
    const roundtrip = model.detokenize(ids, special);
    return { text, special, ids, pieces, roundtrip_ok: roundtrip === text };
});

writeJson("tokenizer_parity.json", {
    model: modelFile,
    generator,
    note: "ids = llama.cpp common_tokenize(text, add_special=false, parse_special=special): no BOS/EOS added. " +
        "pieces = GGUF tokenizer.ggml.tokens (byte-level BPE, GPT-2 byte-to-unicode mapping, e.g. 'Ġ' = space, 'Ċ' = newline). " +
        "roundtrip_ok = llama.cpp detokenize(ids) === text.",
    add_bos: model.tokens.shouldPrependBosToken,
    add_eos: model.tokens.shouldAppendEosToken,
    tokenizer: {
        model: tok.model,
        pre: tok.pre,
        add_bos_token_metadata: tok.add_bos_token ?? null,
        add_space_prefix_metadata: tok.add_space_prefix ?? null,
        vocab_size: tok.tokens.length,
        n_merges: tok.merges?.length ?? null,
        bos_token_id: tok.bos_token_id ?? null,
        eos_token_id: tok.eos_token_id ?? null,
        unknown_token_id: tok.unknown_token_id ?? null,
        padding_token_id: tok.padding_token_id ?? null,
        bos_token: model.tokens.bosString ?? null,
        eos_token: model.tokens.eosString ?? null,
    },
    cases: tokCases,
});

// ---------------------------------------------------------------- chat template
fs.writeFileSync(path.join(fixturesDir, "chat_template.jinja"), chatTemplate);
console.log(`wrote ${path.join(fixturesDir, "chat_template.jinja")}`);

const template = new Template(chatTemplate);
const renderChat = (messages) => template.render({
    messages,
    add_generation_prompt: true,
    bos_token: model.tokens.bosString ?? "",
    eos_token: model.tokens.eosString ?? "",
});

// ---------------------------------------------------------------- greedy reference
const context = await model.createContext({ contextSize: 1024, threads: THREADS, sequences: 1 });
const sequence = context.getSequence();

const TOP_N = 5;
const STABLE_MARGIN = 0.5; // logits; see stable_prefix_len
const nextOpts = {
    token: true,
    options: { temperature: 0 }, // greedy argmax; no penalties / top-k / top-p / min-p / bias
    logits: { filter: { tokens: [], includeTop: TOP_N, includeSelected: true } },
};
async function greedy(promptIds) {
    // Low-level API only: LlamaContextSequence.controlledEvaluate. temperature 0 => llama_sampler_init_greedy
    // (argmax of raw logits). repeatPenalty, tokenBias, grammar, dry, xtc are all unset => those samplers are
    // not in the chain (LlamaChat/LlamaChatSession-level defaults such as repeatPenalty never apply here).
    await sequence.clearHistory();
    const out = [];
    const steps = [];
    let finish = "length";
    let input = promptIds.map((id, i) => (i === promptIds.length - 1 ? [id, { generateNext: nextOpts }] : id));
    while (true) {
        const res = await sequence.controlledEvaluate(input);
        const next = res[input.length - 1]?.next;
        if (next?.token == null) throw new Error("no token generated");
        const id = next.token;
        const top = [...next.logits.entries()].slice(0, TOP_N).map(([t, l]) => [t, Number(l.toFixed(4))]);
        if (top[0][0] !== id) throw new Error(`greedy token ${id} is not the top logit ${top[0][0]}`);
        out.push(id);
        steps.push({ id, top_logits: top, margin: Number((top[0][1] - top[1][1]).toFixed(4)) });
        if (model.isEogToken(id)) { finish = "eog"; break; }
        if (out.length >= MAX_NEW_TOKENS) break;
        input = [[id, { generateNext: nextOpts }]];
    }
    let stable = 0;
    while (stable < steps.length && steps[stable].margin >= STABLE_MARGIN) stable++;
    return { out, finish, steps, stable };
}

const user = (content) => [{ role: "user", content }];
const chatCases = [
    user("What is the capital of France?"),
    user("Write a haiku about the sea."),
    user("List three primary colors."),
    user("What is 12 + 7?"),
    user("Translate 'good morning' into Spanish."),
    user("Explain what a GPU is in one sentence."),
    // explicit system message: the template must NOT inject its default SmolLM system prompt
    [{ role: "system", content: "You are a concise assistant." }, { role: "user", content: "Count from 1 to 5." }],
    // multi-turn
    [
        { role: "user", content: "Hi!" },
        { role: "assistant", content: "Hello! How can I help you today?" },
        { role: "user", content: "What is 2 + 2?" },
    ],
];
const greedyCases = [];
for (const messages of chatCases) {
    const content = messages.at(-1).content;
    const prompt = renderChat(messages);
    const promptIds = model.tokenize(prompt, true);
    const { out, finish, steps, stable } = await greedy(promptIds);
    const textIds = out.filter((id) => !model.isEogToken(id));
    greedyCases.push({
        messages, prompt, prompt_ids: promptIds, completion_ids: out,
        completion_text: model.detokenize(textIds, false), finish_reason: finish,
        stable_prefix_len: stable, steps,
    });
    console.log(JSON.stringify(content), "->", JSON.stringify(greedyCases.at(-1).completion_text), finish, `stable=${stable}`);
}
{
    const prompt = "The three laws of thermodynamics are";
    const promptIds = model.tokenize(prompt, false);
    const { out, finish, steps, stable } = await greedy(promptIds);
    const textIds = out.filter((id) => !model.isEogToken(id));
    greedyCases.push({
        raw: true, prompt, prompt_ids: promptIds, completion_ids: out,
        completion_text: model.detokenize(textIds, false), finish_reason: finish,
        stable_prefix_len: stable, steps,
    });
    console.log("raw", JSON.stringify(prompt), "->", JSON.stringify(greedyCases.at(-1).completion_text), finish, `stable=${stable}`);
}

writeJson("greedy_reference.json", {
    model: modelFile,
    generator,
    settings: {
        threads: THREADS, context_size: 1024, max_new_tokens: MAX_NEW_TOKENS,
        sampler: "greedy argmax (temperature 0); no repeat/presence/frequency penalty, no top-k/top-p/min-p, no token bias",
        add_bos: model.tokens.shouldPrependBosToken,
        prompt_tokenization: "chat cases: tokenize(prompt, special=true); raw case: tokenize(prompt, special=false); no BOS prepended",
        chat_template: "GGUF tokenizer.chat_template rendered with @huggingface/jinja, add_generation_prompt=true (see chat_template.jinja)",
        steps: `per generated token: the top ${TOP_N} raw llama.cpp logits [id, logit] and margin = top1 - top2 logit`,
        stable_prefix_len: `number of leading steps whose top1-top2 logit margin is >= ${STABLE_MARGIN}. Steps after that are ` +
            "numerically fragile: llama.cpp's CPU Q4_1 matmul quantises activations to Q8_1 and keeps the KV cache in F16, " +
            "so an engine with a different (e.g. f32-activation) kernel can legitimately pick the runner-up there",
        stop: "stops after MAX_NEW_TOKENS or on an end-of-generation token; an EOG token, if produced, is the last entry of completion_ids " +
            "and is excluded from completion_text (finish_reason='eog')",
    },
    cases: greedyCases,
});

await context.dispose();
await model.dispose();
await llama.dispose();
