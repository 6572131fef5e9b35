// End to end: OpenAI client → router → worker agent → Candle engine → the
// real SmolLM2 and MiniLM models, checked against llama.cpp and
// sentence-transformers references recorded in workers/engine/tests/fixtures.
import { readFileSync } from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentHandle } from "@switchyard/agent";
import { decodeSafetensors, tensorToFloats } from "@switchyard/agent";
import { createKey, createTenant, setRateLimit } from "@switchyard/db";
import { sleep } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

const fixtures = path.resolve(import.meta.dirname, "../../workers/engine/tests/fixtures");
const greedy = JSON.parse(readFileSync(path.join(fixtures, "greedy_reference.json"), "utf8")) as {
  cases: { messages?: { role: string; content: string }[]; prompt: string; raw?: boolean; completion_ids: number[]; completion_text: string; stable_prefix_len: number }[];
};
const minilm = JSON.parse(readFileSync(path.join(fixtures, "minilm_reference.json"), "utf8")) as { cases: { text: string; embedding: number[] }[] };

let fx: RouterFixture;
let agent: AgentHandle;
let client: OpenAI;
const LLM = "smollm2-135m-instruct";

beforeAll(async () => {
  // Aliases to the workers' models (routing.models): the worker knows them by its own name.
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN, "rateLimits.refreshMs": 0, "routing.models": { fast: { worker: LLM }, vectors: { worker: "all-minilm-l6-v2" } } });
  agent = await startTestWorker(fx, { id: "e2e-models" });
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

const cosine = (a: number[], b: number[]) => {
  let d = 0;
  let na = 0;
  let nb = 0;
  for (let i = 0; i < a.length; i++) {
    d += a[i]! * b[i]!;
    na += a[i]! ** 2;
    nb += b[i]! ** 2;
  }
  return d / Math.sqrt(na * nb);
};

describe("SmolLM2 through the router", () => {
  it("lists the real models, then the aliases that resolve to them", async () => {
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toEqual(["all-minilm-l6-v2", LLM, "fast", "vectors"]);
  });

  it("an alias to a worker's model is served by the worker under the worker's name (whole, streamed, completions)", async () => {
    const ask = { messages: [{ role: "user" as const, content: "Name a colour." }], temperature: 0, max_tokens: 8 };
    const direct = await client.chat.completions.create({ model: LLM, ...ask });
    const { data: aliased, response } = await client.chat.completions.create({ model: "fast", ...ask }).withResponse();
    expect(response.headers.get("x-switchyard-backend")).toMatch(/^worker:/);
    expect(aliased.choices[0]!.message.content).toBe(direct.choices[0]!.message.content);
    expect(aliased.model).toBe(LLM);
    let text = "";
    for await (const chunk of await client.chat.completions.create({ model: "fast", ...ask, stream: true })) text += chunk.choices[0]?.delta.content ?? "";
    expect(text).toBe(direct.choices[0]!.message.content);
    const completion = await client.completions.create({ model: "fast", prompt: "The sky is", max_tokens: 4, temperature: 0 });
    expect(completion.choices[0]!.text.length).toBeGreaterThan(0);
  });

  it("greedy output agrees with llama.cpp for at least the first 8 tokens", async () => {
    // Prompts whose first 8 llama.cpp decisions are not near-ties (top-1 vs
    // top-2 logit margin ≥ 0.5, recorded with the fixture): there any correct
    // engine must agree. Near-tie prompts are compared token by token, with
    // their logit margins, by the engine's own Rust parity test.
    const chatCases = greedy.cases.filter((c) => !c.raw && c.messages && c.stable_prefix_len >= 8);
    expect(chatCases.length).toBeGreaterThanOrEqual(4);
    for (const c of chatCases) {
      const res = await client.chat.completions.create({ model: LLM, messages: c.messages as OpenAI.ChatCompletionMessageParam[], temperature: 0, max_tokens: 8 });
      const text = res.choices[0]!.message.content ?? "";
      expect(res.usage?.completion_tokens).toBe(8);
      // 8 tokens that equal llama.cpp's first 8 decode to a prefix of its 16-token text.
      expect(c.completion_text.startsWith(text), `${JSON.stringify(text)} vs ${JSON.stringify(c.completion_text)}`).toBe(true);
      expect(text.length).toBeGreaterThan(0);
    }
  });

  it("raw completions agree with llama.cpp too", async () => {
    const raw = greedy.cases.find((c) => c.raw && c.stable_prefix_len >= 4);
    expect(raw).toBeDefined();
    const res = await client.completions.create({ model: LLM, prompt: raw!.prompt, temperature: 0, max_tokens: raw!.stable_prefix_len });
    expect(raw!.completion_text.startsWith(res.choices[0]!.text)).toBe(true);
  });

  it("continues a partial assistant message where it left off (continue_final_message, as stream resume sends it)", async () => {
    const user = { role: "user" as const, content: "Name three fruits and say why they are healthy." };
    const stream = await client.chat.completions.create({ model: LLM, messages: [user], temperature: 0, max_tokens: 16, stream: true });
    const deltas: string[] = [];
    for await (const chunk of stream) {
      const d = chunk.choices[0]?.delta?.content;
      if (d) deltas.push(d);
    }
    const whole = deltas.join("");
    const partial = deltas.slice(0, 8).join("");
    expect(partial.length).toBeGreaterThan(0);
    const body = {
      model: LLM,
      messages: [user, { role: "assistant", content: partial }],
      continue_final_message: true,
      add_generation_prompt: false,
      temperature: 0,
      max_tokens: 8,
    };
    const res = await fetch(`${fx.router.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" }, body: JSON.stringify(body) });
    expect(res.status).toBe(200);
    const cont = ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
    // The same greedy answer, not a new assistant turn after the partial one.
    expect(partial + cont).toBe(whole);

    const bad = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ ...body, messages: [user] }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toContain("continue_final_message");
  });

  it("reports logprobs (chat streamed and not, legacy completions) in OpenAI's shapes", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "What is 12 + 7?" }];
    const whole = await client.chat.completions.create({ model: LLM, messages, temperature: 0, max_tokens: 8, logprobs: true, top_logprobs: 3 });
    const content = whole.choices[0]!.logprobs!.content!;
    expect(content).toHaveLength(whole.usage!.completion_tokens);
    expect(content.map((c) => c.token).join("")).toBe(whole.choices[0]!.message.content);
    for (const c of content) {
      expect(c.logprob).toBeLessThanOrEqual(0);
      expect(Buffer.from(c.bytes!).toString("utf8")).toBe(c.token);
      expect(c.top_logprobs).toHaveLength(3);
      // Greedy: the chosen token is the most likely one.
      expect(c.top_logprobs[0]!).toEqual({ token: c.token, logprob: c.logprob, bytes: c.bytes });
      expect(c.top_logprobs[0]!.logprob).toBeGreaterThanOrEqual(c.top_logprobs[2]!.logprob);
    }

    const stream = await client.chat.completions.create({ model: LLM, messages, temperature: 0, max_tokens: 8, logprobs: true, stream: true });
    const streamed: OpenAI.ChatCompletionTokenLogprob[] = [];
    let text = "";
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta?.content ?? "";
      streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    }
    expect(text).toBe(whole.choices[0]!.message.content);
    expect(streamed.map((c) => [c.token, c.logprob])).toEqual(content.map((c) => [c.token, c.logprob]));
    expect(streamed.every((c) => c.top_logprobs.length === 0)).toBe(true);

    const legacy = await client.completions.create({ model: LLM, prompt: "The capital of France is", temperature: 0, max_tokens: 6, logprobs: 2 });
    const lp = legacy.choices[0]!.logprobs!;
    expect(lp.tokens).toHaveLength(6);
    expect(lp.tokens!.join("")).toBe(legacy.choices[0]!.text);
    expect(lp.text_offset![0]).toBe(0);
    for (let i = 0; i < 6; i++) {
      expect(lp.token_logprobs![i]).toBeLessThanOrEqual(0);
      expect(lp.top_logprobs![i]![lp.tokens![i]!]).toBe(lp.token_logprobs![i]);
      if (i > 0) expect(lp.text_offset![i]).toBe(lp.text_offset![i - 1]! + lp.tokens![i - 1]!.length);
    }

    const bad = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: LLM, messages, top_logprobs: 2 }),
    });
    expect(bad.status).toBe(400);
    expect(((await bad.json()) as { error: { message: string } }).error.message).toContain("top_logprobs");
    // Legacy completions have no top_logprobs: a 400 naming it, not an answer without logprobs.
    const chatStyle = await fetch(`${fx.router.url}/v1/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: LLM, prompt: "The capital of France is", max_tokens: 2, top_logprobs: 3 }),
    });
    const err = ((await chatStyle.json()) as { error: { message: string; param: string | null } }).error;
    expect([chatStyle.status, err.message]).toEqual([400, expect.stringContaining("top_logprobs: not a completions field")]);
  });

  it("a prompt that starts like an earlier one reuses its computed prefix (usage.prompt_tokens_details.cached_tokens)", async () => {
    const system = { role: "system" as const, content: "You answer questions about the solar system in one short sentence, citing the planet's order from the sun." };
    const first = await client.chat.completions.create({ model: LLM, messages: [system, { role: "user", content: "Tell me about Mars." }], temperature: 0, max_tokens: 4 });
    const second = await client.chat.completions.create({ model: LLM, messages: [system, { role: "user", content: "Tell me about Venus." }], temperature: 0, max_tokens: 4 });
    const cached = (second.usage as { prompt_tokens_details?: { cached_tokens?: number } }).prompt_tokens_details?.cached_tokens ?? 0;
    // The system prompt and the chat markers before the question (~30 tokens).
    expect(cached).toBeGreaterThan(20);
    expect(cached).toBeLessThan(second.usage!.prompt_tokens);
    expect(first.usage!.prompt_tokens).toBeGreaterThan(cached);
  });

  it("without max_tokens an answer runs past 256 tokens (to its end or the context's, as OpenAI's do)", async () => {
    const controller = new AbortController();
    const stream = await client.completions.create({ model: LLM, prompt: "Chapter 1. The lighthouse keeper counted the ships as they passed:", temperature: 0, stream: true }, { signal: controller.signal });
    let chunks = 0;
    let finish: string | null = null;
    for await (const c of stream) {
      if (c.choices[0]?.text) chunks++;
      finish = c.choices[0]?.finish_reason ?? finish;
      if (chunks > 300) break; // far enough: the old default stopped at 256
    }
    controller.abort();
    expect(finish === null || finish === "stop", `finish_reason ${finish} after ${chunks} chunks`).toBe(true);
    expect(chunks).toBeGreaterThan(256);
  });

  it("streams the same text it answers without streaming", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "List three primary colors." }];
    const whole = await client.chat.completions.create({ model: LLM, messages, temperature: 0, max_tokens: 24 });
    const stream = await client.chat.completions.create({ model: LLM, messages, temperature: 0, max_tokens: 24, stream: true, stream_options: { include_usage: true } });
    let text = "";
    let chunks = 0;
    let usage: OpenAI.CompletionUsage | null | undefined;
    for await (const ch of stream) {
      text += ch.choices[0]?.delta.content ?? "";
      if (ch.choices[0]?.delta.content) chunks++;
      usage = ch.usage ?? usage;
    }
    expect(text).toBe(whole.choices[0]!.message.content);
    expect(chunks).toBeGreaterThan(5); // token by token, not one blob
    expect(usage?.completion_tokens).toBe(24);
  });

  it("seeded sampling is reproducible; stop sequences end the text", async () => {
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "Write a haiku about the sea." }];
    const a = await client.chat.completions.create({ model: LLM, messages, temperature: 0.9, top_p: 0.95, seed: 42, max_tokens: 16 });
    const b = await client.chat.completions.create({ model: LLM, messages, temperature: 0.9, top_p: 0.95, seed: 42, max_tokens: 16 });
    expect(a.choices[0]!.message.content).toBe(b.choices[0]!.message.content);
    const ref = greedy.cases.find((c) => c.messages?.[0]?.content === "What is the capital of France?")!;
    const stopAt = ref.completion_text.slice(4, 8);
    const s = await client.chat.completions.create({ model: LLM, messages: ref.messages as OpenAI.ChatCompletionMessageParam[], temperature: 0, max_tokens: 16, stop: [stopAt] });
    expect(s.choices[0]!.finish_reason).toBe("stop");
    expect(s.choices[0]!.message.content).toBe(ref.completion_text.slice(0, ref.completion_text.indexOf(stopAt)));
  });

  it("answers a context-length violation with a 400, and keeps serving", async () => {
    const res = await fetch(`${fx.router.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: "word ".repeat(3000) }], max_tokens: 4 }),
    });
    expect(res.status).toBe(400);
    const ok = await client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "hi" }], max_tokens: 2, temperature: 0 });
    expect(ok.choices[0]!.message.content!.length).toBeGreaterThan(0);
  });
});

describe("MiniLM embeddings through the router", () => {
  it("match sentence-transformers reference vectors to cosine ≥ 0.999", async () => {
    const res = await client.embeddings.create({ model: "all-minilm-l6-v2", input: minilm.cases.map((c) => c.text), encoding_format: "float" });
    expect(res.data).toHaveLength(minilm.cases.length);
    res.data.forEach((d, i) => {
      expect(d.embedding).toHaveLength(384);
      expect(cosine(d.embedding, minilm.cases[i]!.embedding)).toBeGreaterThanOrEqual(0.999);
    });
  });

  it("rank similar sentences above dissimilar ones", async () => {
    const input = ["The cat sits on the mat.", "A cat is sitting on a rug.", "Stock markets fell sharply on Monday."];
    const res = await client.embeddings.create({ model: "all-minilm-l6-v2", input, encoding_format: "float" });
    const [a, b, c] = res.data.map((d) => d.embedding);
    expect(cosine(a!, b!)).toBeGreaterThan(cosine(a!, c!) + 0.2);
    const b64 = await client.embeddings.create({ model: "all-minilm-l6-v2", input: input[0]!, encoding_format: "base64" });
    // Asked for explicitly, base64 comes back as is: little-endian f32.
    const buf = Buffer.from(b64.data[0]!.embedding as unknown as string, "base64");
    const floats = Array.from(new Float32Array(buf.buffer, buf.byteOffset, buf.byteLength / 4));
    expect(floats).toHaveLength(384);
    expect(cosine(floats, a!)).toBeGreaterThan(0.99999);
  });

  it("through an alias, the same vectors", async () => {
    const input = "The cat sits on the mat.";
    const [direct, aliased] = await Promise.all(["all-minilm-l6-v2", "vectors"].map((model) => client.embeddings.create({ model, input, encoding_format: "float" })));
    expect(cosine(aliased!.data[0]!.embedding, direct!.data[0]!.embedding)).toBeGreaterThan(0.99999);
  });
});

describe("hidden states through the router", () => {
  const post = (body: unknown, accept?: string) =>
    fetch(`${fx.router.url}/v1/hidden_states`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", ...(accept ? { accept } : {}) },
      body: JSON.stringify(body),
    });

  it("returns every layer as safetensors, within 1% of the raw tensor bytes for 128 tokens", async () => {
    // Find a prompt of exactly 128 tokens.
    const words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau upsilon".split(" ");
    let prompt = "";
    let n = 0;
    for (let i = 0; n < 128; i++) {
      const next = prompt + (i ? " " : "") + words[i % words.length];
      const ev = await agent.supervisor.client!.once({ case: "tokenize", value: { $typeName: "switchyard.engine.v1.Tokenize", model: LLM, input: { case: "prompt", value: next } } });
      const count = ev.kind.case === "tokenIds" ? ev.kind.value.ids.length : 0;
      if (count > 128) break;
      prompt = next;
      n = count;
    }
    expect(n).toBeGreaterThanOrEqual(126);
    const res = await post({ model: LLM, input: prompt, layers: "all", pooling: "none", dtype: "f32" });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/octet-stream");
    const bytes = new Uint8Array(await res.arrayBuffer());
    const { tensors } = decodeSafetensors(bytes);
    const names = Object.keys(tensors);
    expect(names).toHaveLength(31); // embeddings + 30 blocks
    const rawBytes = Object.values(tensors).reduce((s, t) => s + t.data.byteLength, 0);
    const tokens = Number(res.headers.get("x-switchyard-tokens"));
    expect(tensors.layer_30!.shape).toEqual([tokens, 576]);
    expect(rawBytes).toBe(31 * tokens * 576 * 4);
    expect(bytes.byteLength / rawBytes).toBeLessThanOrEqual(1.01);
  });

  it("count toward the tenant's tokens per minute: the worker's token count is settled, not 0", async () => {
    const t = await createTenant(fx.db.db, "hidden-tpm");
    if (!t.ok) throw new Error("tenant");
    const { key } = await createKey(fx.db.db, t.tenant.id);
    await setRateLimit(fx.db.db, { tenantId: t.tenant.id, tokensPerMinute: 100_000 });
    const ask = (body: unknown) =>
      fetch(`${fx.router.url}/v1/hidden_states`, {
        method: "POST",
        headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
        body: JSON.stringify(body),
      });
    const body = { model: LLM, messages: [{ role: "user", content: "word ".repeat(300) }], layers: [30], pooling: "last" };
    const first = await ask(body);
    expect(first.status).toBe(200);
    await first.arrayBuffer();
    const used = Number(first.headers.get("x-switchyard-tokens"));
    expect(used).toBeGreaterThan(250);
    const reserved = 100_000 - Number(first.headers.get("x-ratelimit-remaining-tokens"));
    // The reservation bounds the messages, not 16 tokens for an input it did not read.
    expect(reserved).toBeGreaterThanOrEqual(used);
    await sleep(100);
    const second = await ask(body);
    await second.arrayBuffer();
    // The first request's reservation was corrected to its tokens, not to 0.
    expect(Number(second.headers.get("x-ratelimit-remaining-tokens"))).toBe(100_000 - used - reserved);
  });

  it("pools and converts: mean/last, f16, and JSON on request", async () => {
    const res = await post({ model: LLM, messages: [{ role: "user", content: "hello" }], layers: [0, 30], pooling: "last", dtype: "f16" });
    const { tensors } = decodeSafetensors(new Uint8Array(await res.arrayBuffer()));
    expect(tensors.layer_30).toMatchObject({ dtype: "F16", shape: [576] });
    const asJson = await post({ model: LLM, input: "hello world", layers: [30], pooling: "mean" }, "application/json");
    expect(asJson.headers.get("content-type")).toMatch(/application\/json/);
    const body = (await asJson.json()) as { layers: Record<string, { shape: number[]; data: number[] }> };
    expect(body.layers.layer_30!.shape).toEqual([576]);
    const f32 = await post({ model: LLM, input: "hello world", layers: [30], pooling: "mean" });
    const { tensors: t32 } = decodeSafetensors(new Uint8Array(await f32.arrayBuffer()));
    expect(tensorToFloats(t32.layer_30!).slice(0, 5)).toEqual(body.layers.layer_30!.data.slice(0, 5));
    const bad = await post({ model: LLM, input: "x", pooling: "max" });
    expect(bad.status).toBe(400);
    // A layer asked for 1024 times is one tensor, computed and sent once.
    const once = await post({ model: LLM, input: "hello world", layers: [30], pooling: "mean" });
    const repeated = await post({ model: LLM, input: "hello world", layers: Array(1024).fill(30), pooling: "mean" });
    expect(repeated.status).toBe(200);
    expect(Buffer.from(await repeated.arrayBuffer()).equals(Buffer.from(await once.arrayBuffer()))).toBe(true);
  });
});
