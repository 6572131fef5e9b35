// Every sampling field through the router to the real worker and SmolLM2
// (and MiniLM), each observed changing the answer: logit_bias forcing a
// token, penalties cutting repeats on a greedy run, n choices sharing one
// prompt, best_of, echo with the prompt's logprobs, token-id prompts and
// inputs; what a worker cannot honour answers 400 naming the field, as the
// field table (apps/router/src/backends/fields.ts) declares for workers; and
// the official SDK's models.retrieve().
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentHandle } from "@switchyard/agent";
import { fieldSupport, inert, requestFields, sampleOf, type FieldName } from "../../apps/router/src/backends/fields.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const EMB = "all-minilm-l6-v2";
let fx: RouterFixture;
let agent: AgentHandle;
let client: OpenAI;

beforeAll(async () => {
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN });
  agent = await startTestWorker(fx, { id: "e2e-sampling" });
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

type Json = Record<string, any>;
async function post(route: string, body: Json): Promise<{ status: number; json: Json; text: string }> {
  const r = await fetch(`${fx.router.url}/v1/${route}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });
  const text = await r.text();
  let json: Json = {};
  try {
    json = JSON.parse(text) as Json;
  } catch {
    // SSE
  }
  return { status: r.status, json, text };
}
const completion = (body: Json) => post("completions", { model: LLM, temperature: 0, ...body });

/** SmolLM2's token ids for a text, from the worker's own engine. */
async function tokenize(text: string): Promise<number[]> {
  const ev = await agent.supervisor.client!.once({ case: "tokenize", value: { $typeName: "switchyard.engine.v1.Tokenize", model: LLM, input: { case: "prompt", value: text } } });
  if (ev.kind.case !== "tokenIds") throw new Error("no token ids");
  return ev.kind.value.ids;
}

const maxRepeats = (tokens: string[]) => Math.max(...[...tokens.reduce((m, t) => m.set(t, (m.get(t) ?? 0) + 1), new Map<string, number>()).values()]);

/** The SSE payloads of a stream, parsed. */
const chunks = (sse: string) =>
  sse
    .split("\n\n")
    .map((e) => e.replace(/^data: /, ""))
    .filter((d) => d && d !== "[DONE]")
    .map((d) => JSON.parse(d) as Json);

describe("sampling fields on the real worker", () => {
  it("models.retrieve() finds a served model and 404s one nothing serves", async () => {
    const m = await client.models.retrieve(LLM);
    expect(m).toMatchObject({ id: LLM, object: "model", owned_by: "switchyard" });
    expect(m.created).toBeGreaterThan(0);
    const err = await client.models.retrieve("no-such-model").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.NotFoundError);
    expect((err as InstanceType<typeof OpenAI.NotFoundError>).code).toBe("model_not_found");
  });

  it("logit_bias +100 forces a token; -100 bans the greedy one", async () => {
    const banana = (await tokenize(" banana")).at(-1)!;
    const forced = await completion({ prompt: "The capital of France is", max_tokens: 5, logit_bias: { [banana]: 100 } });
    expect(forced.status, forced.text).toBe(200);
    expect(forced.json.choices[0].text).toBe(" banana".repeat(5));
    const plain = await completion({ prompt: "The capital of France is", max_tokens: 1, logprobs: 0 });
    const first = (await tokenize(plain.json.choices[0].logprobs.tokens[0])).at(-1)!;
    const banned = await completion({ prompt: "The capital of France is", max_tokens: 1, logit_bias: { [first]: -100 } });
    expect(banned.json.choices[0].text).not.toBe(plain.json.choices[0].text);
  });

  it("frequency, presence and repetition penalties reduce repeats on a greedy run", async () => {
    const prompt = "one two one two one two one two one two";
    const tokens = async (extra: Json) => {
      const r = await completion({ prompt, max_tokens: 48, logprobs: 0, ...extra });
      expect(r.status, r.text).toBe(200);
      return r.json.choices[0].logprobs.tokens as string[];
    };
    const base = maxRepeats(await tokens({}));
    expect(base).toBeGreaterThanOrEqual(12);
    for (const extra of [{ frequency_penalty: 1.5 }, { presence_penalty: 2 }, { repetition_penalty: 1.8 }]) {
      expect(maxRepeats(await tokens(extra)) * 2, JSON.stringify(extra)).toBeLessThanOrEqual(base);
    }
  });

  it("top_p 0 keeps only the likeliest token: hot sampling with any seed answers what greedy does", async () => {
    const greedy = await completion({ prompt: "Once upon a time", max_tokens: 12 });
    expect(greedy.status).toBe(200);
    for (const seed of [1, 2, 3]) {
      const r = await completion({ prompt: "Once upon a time", max_tokens: 12, temperature: 2, top_p: 0, seed });
      expect(r.status).toBe(200);
      expect(r.json.choices[0].text).toBe(greedy.json.choices[0].text);
    }
    // Without it the same seeds wander off (else the assertion above proves nothing).
    const hot = await Promise.all([1, 2, 3].map((seed) => completion({ prompt: "Once upon a time", max_tokens: 12, temperature: 2, seed })));
    expect(hot.some((r) => r.json.choices[0].text !== greedy.json.choices[0].text)).toBe(true);
  });

  it("n=3 with temperature gives 3 choices; usage counts every choice's tokens", async () => {
    const r = await client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "Name an animal." }], n: 3, temperature: 1, seed: 3, max_tokens: 12, logprobs: true });
    expect(r.choices.map((c) => c.index)).toEqual([0, 1, 2]);
    const counted = r.choices.reduce((s, c) => s + c.logprobs!.content!.length, 0);
    expect(r.usage!.completion_tokens).toBe(counted);
    expect(new Set(r.choices.map((c) => c.message.content)).size).toBeGreaterThanOrEqual(2);
    // Streamed: each choice by its index, each with its finish_reason, the same texts.
    const s = await post("chat/completions", { model: LLM, messages: [{ role: "user", content: "Name an animal." }], n: 3, temperature: 1, seed: 3, max_tokens: 12, stream: true, stream_options: { include_usage: true } });
    const texts = ["", "", ""];
    const finishes: Array<string | null> = [null, null, null];
    let usage: Json | undefined;
    // Each choice first appears with its role, in index order (the openai Python SDK's stream helper needs it).
    const opened: number[] = [];
    for (const c of chunks(s.text)) {
      if (c.usage) usage = c.usage;
      for (const ch of c.choices) {
        if (!opened.includes(ch.index)) {
          opened.push(ch.index);
          expect(ch.delta.role).toBe("assistant");
        }
        texts[ch.index] += ch.delta.content ?? "";
        if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
      }
    }
    expect(opened).toEqual([0, 1, 2]);
    expect(texts).toEqual(r.choices.map((c) => c.message.content));
    expect(finishes.every((f) => f === "stop" || f === "length")).toBe(true);
    expect(usage?.completion_tokens).toBe(r.usage!.completion_tokens);
  }, 120_000);

  it("best_of returns the choice with the highest mean logprob of the same draws", async () => {
    const ask = { prompt: "My favourite food is", max_tokens: 8, temperature: 1, seed: 21, logprobs: 0 };
    const all = await completion({ ...ask, n: 3 });
    const best = await completion({ ...ask, best_of: 3 });
    expect(best.status, best.text).toBe(200);
    expect(best.json.choices).toHaveLength(1);
    const mean = (c: Json) => (c.logprobs.token_logprobs as number[]).reduce((a, b) => a + b, 0) / c.logprobs.token_logprobs.length;
    const top = [...all.json.choices].sort((a, b) => mean(b) - mean(a))[0];
    expect(best.json.choices[0].text).toBe(top.text);
    expect(best.json.usage.completion_tokens).toBe(all.json.usage.completion_tokens);
  }, 60_000);

  it("echo returns the prompt with its logprobs before the completion", async () => {
    const prompt = "The quick brown fox jumps over the lazy";
    const r = await completion({ prompt, max_tokens: 3, echo: true, logprobs: 1 });
    expect(r.status, r.text).toBe(200);
    const c = r.json.choices[0];
    expect(c.text.startsWith(prompt)).toBe(true);
    const promptTokens = await tokenize(prompt);
    expect(c.logprobs.tokens.length).toBe(promptTokens.length + r.json.usage.completion_tokens);
    expect(c.logprobs.token_logprobs[0]).toBeNull();
    expect(c.logprobs.token_logprobs.slice(1).every((v: number) => v <= 0)).toBe(true);
    expect(c.logprobs.tokens.slice(0, promptTokens.length).join("")).toBe(prompt);
    expect(c.logprobs.text_offset[0]).toBe(0);
    expect(c.logprobs.text_offset[promptTokens.length]).toBe(prompt.length);
    // Without logprobs, and streamed: the prompt opens the text.
    const plain = await completion({ prompt, max_tokens: 3, echo: true });
    expect(plain.json.choices[0].text).toBe(c.text);
    const s = await completion({ prompt, max_tokens: 3, echo: true, stream: true });
    expect(chunks(s.text).map((ch) => ch.choices[0]?.text ?? "").join("")).toBe(c.text);
  });

  it("prompts as token ids or a list generate what their text does", async () => {
    const text = "List three colours:";
    const fromText = await completion({ prompt: text, max_tokens: 8 });
    const fromIds = await completion({ prompt: await tokenize(text), max_tokens: 8 });
    expect(fromIds.status, fromIds.text).toBe(200);
    expect(fromIds.json.choices[0].text).toBe(fromText.json.choices[0].text);
    const other = await completion({ prompt: "Count to five:", max_tokens: 8 });
    const list = await completion({ prompt: [text, "Count to five:"], n: 2, max_tokens: 8 });
    expect(list.json.choices.map((c: Json) => c.index)).toEqual([0, 1, 2, 3]);
    expect(list.json.choices.map((c: Json) => c.text)).toEqual([fromText, fromText, other, other].map((r) => r.json.choices[0].text));
    expect(list.json.usage.prompt_tokens).toBe(fromText.json.usage.prompt_tokens + other.json.usage.prompt_tokens);
  }, 60_000);

  it("embeddings of the model's own token ids equal their text's", async () => {
    const text = (await client.embeddings.create({ model: EMB, input: "hello world" })).data[0]!.embedding;
    // bert-base-uncased ids: hello 7592, world 2088 ([CLS]/[SEP] added as for text).
    const ids = (await client.embeddings.create({ model: EMB, input: [[7592, 2088]] })).data[0]!.embedding;
    let dot = 0;
    for (let i = 0; i < text.length; i++) dot += text[i]! * ids[i]!;
    expect(dot).toBeGreaterThan(0.9999);
    const bad = await post("embeddings", { model: EMB, input: [[7592, 10_000_000]] });
    expect([bad.status, bad.json.error?.param]).toEqual([400, "input"]);
  });

  it("refuses what it cannot honour, naming the field", async () => {
    const cases: Array<[string, Json, string]> = [
      ["completions", { model: LLM, prompt: "x", logit_bias: { "49152": 5 } }, "logit_bias"],
      ["completions", { model: LLM, prompt: [1, 49152] }, "prompt"],
      ["completions", { model: LLM, prompt: "x", n: 9 }, "n"],
      ["completions", { model: LLM, prompt: "x", n: 3, best_of: 2 }, "best_of"],
      ["completions", { model: LLM, prompt: "x", best_of: 2, stream: true }, "best_of"],
      ["chat/completions", { model: LLM, messages: [{ role: "user", content: "x" }], echo: true }, "echo"],
      ["chat/completions", { model: LLM, messages: [{ role: "user", content: "x" }], frequency_penalty: 3 }, "frequency_penalty"],
    ];
    for (const [route, body, param] of cases) {
      const r = await post(route, body);
      expect([r.status, r.json.error?.param], `${route} ${JSON.stringify(body)}: ${r.text}`).toEqual([400, param]);
    }
  });
});

describe("what reaches the engine", () => {
  /** Sequences the engine is decoding now. */
  const active = async () => {
    const ev = await agent.supervisor.client!.once({ case: "stats", value: { $typeName: "switchyard.engine.v1.StatsRequest" } });
    if (ev.kind.case !== "stats") throw new Error("no stats");
    return ev.kind.value.activeSequences;
  };

  it("one prompt of a list failing stops the others: nothing decodes on for an answer nobody gets", async () => {
    // No max_tokens: the short prompt would run to the end of the context.
    // (greedy, this prompt runs past 700 tokens: tests/model.rs a_growing_cache_…)
    const r = await completion({ prompt: ["Chapter 1. The lighthouse keeper counted the ships as they passed:", "word ".repeat(2000)] });
    expect(r.status).toBe(400);
    let left = await active();
    for (let i = 0; i < 20 && left > 0; i++) {
      await new Promise((done) => setTimeout(done, 50));
      left = await active();
    }
    expect(left).toBe(0);
  });

  it("developer (and function) messages reach the template as system (and tool) messages", async () => {
    const messages = (role: string) => [{ role, content: "Answer in one word." }, { role: "user", content: "Name a colour." }];
    const [dev, sys] = await Promise.all(["developer", "system"].map((role) => post("chat/completions", { model: LLM, messages: messages(role), temperature: 0, max_tokens: 4 })));
    expect([dev!.status, sys!.status]).toEqual([200, 200]);
    expect(dev!.json.usage.prompt_tokens).toBe(sys!.json.usage.prompt_tokens);
    expect(dev!.json.choices[0].message.content).toBe(sys!.json.choices[0].message.content);
  });
});

describe("the worker does what the field table declares", () => {
  const base: Record<string, Json> = {
    chat: { model: LLM, messages: [{ role: "user", content: "hello" }], max_tokens: 3 },
    completions: { model: LLM, prompt: "hello", max_tokens: 3 },
    embeddings: { model: EMB, input: "hello" },
  };
  const route = { chat: "chat/completions", completions: "completions", embeddings: "embeddings" } as const;
  const rows = (Object.entries(requestFields) as Array<[FieldName, (typeof requestFields)[FieldName]]>).flatMap(([name, f]) =>
    f.routes.map((r) => [name, r as keyof typeof route, fieldSupport.worker[name]] as const),
  );
  it.each(Object.keys(route) as Array<keyof typeof route>)("the fields the table counts as not changing the answer are taken on %s", async (r) => {
    const asIs = { user: "u-1", metadata: { team: "a" }, store: false, service_tier: "auto", prompt_cache_key: "k", safety_identifier: "s" };
    expect(Object.keys(asIs).sort()).toEqual(inert.filter((k) => k !== "model").sort());
    const res = await post(route[r], { ...base[r], ...asIs });
    expect(res.status, res.text).toBe(200);
  }, 60_000);

  it.each(rows)("%s on %s: %s", async (name, r, support) => {
    const f = requestFields[name];
    const body = { ...base[r], ...sampleOf(f, r) };
    const res = await post(route[r], body);
    if (support === "refused" || support === "per model") {
      // "per model": none of the engine's models can (no FIM tokens, no
      // truncation training, text only), so the worker refuses it too.
      expect([res.status, res.json.error?.param], res.text).toEqual([400, f.asks(body, r)]);
    } else {
      expect(res.status, res.text).toBe(200);
    }
  }, 60_000);
});
