// End to end: a stop sequence that ends a self-hosted answer is named, through
// a real router to a real worker with the real SmolLM2. Chat and completions
// carry vLLM's `stop_reason` (the matched string) on the choice, whole and on
// the choice's last streamed chunk, each of n choices its own; /v1/messages
// answers Anthropic's stop_reason "stop_sequence" with `stop_sequence`, from
// the official SDK. An answer that ended on EOS (or its length) names none.
// Each stop sequence is a piece of what the model says greedily without it.
import Anthropic from "@anthropic-ai/sdk";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { AgentHandle } from "@switchyard/agent";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
let fx: RouterFixture;
let agent: AgentHandle;
let anthropic: Anthropic;

beforeAll(async () => {
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN });
  agent = await startTestWorker(fx, { id: "e2e-stop", models: [LLM] });
  anthropic = new Anthropic({ apiKey: fx.key, baseURL: fx.router.url, maxRetries: 0 });
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

type Json = Record<string, any>;

async function post(route: string, body: Json): Promise<Response> {
  return fetch(`${fx.router.url}/v1/${route}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: LLM, ...body }),
  });
}

async function whole(route: string, body: Json): Promise<Json> {
  const r = await post(route, body);
  const json = (await r.json()) as Json;
  expect(r.status, JSON.stringify(json)).toBe(200);
  return json;
}

/** A streamed answer, per choice: its text and its last chunk's choice object (the one with finish_reason). */
async function streamed(route: string, body: Json): Promise<Map<number, { text: string; end: Json }>> {
  const r = await post(route, { ...body, stream: true });
  const sse = await r.text();
  expect(r.status, sse).toBe(200);
  const out = new Map<number, { text: string; end: Json }>();
  for (const frame of sse.split("\n\n")) {
    const data = frame.replace(/^data: /, "");
    if (!data || data === "[DONE]") continue;
    const chunk = JSON.parse(data) as Json;
    expect(chunk.error, data).toBeUndefined();
    for (const c of chunk.choices as Json[]) {
      const seen = out.get(c.index) ?? { text: "", end: {} };
      expect(Object.keys(seen.end), `choice ${c.index} spoke after its last chunk`).toEqual([]);
      seen.text += c.text ?? c.delta?.content ?? "";
      if (c.finish_reason != null) seen.end = c;
      else expect(c).not.toHaveProperty("stop_reason");
      out.set(c.index, seen);
    }
  }
  return out;
}

/** A stop sequence the model says: the third word of `text` with its leading space, and what comes before it. */
function stopIn(text: string): { stop: string; before: string } {
  const words = text.split(" ").filter((w) => w !== "");
  expect(words.length, `too short to pick a stop sequence from: ${JSON.stringify(text)}`).toBeGreaterThan(3);
  const stop = ` ${words[2]}`;
  return { stop, before: text.slice(0, text.indexOf(stop)) };
}

const question = [{ role: "user", content: "Write a short story about a fox who finds a lantern in the woods." }];

describe("a stop sequence that ended a worker's answer is named", () => {
  it("chat: stop_reason on the choice, whole and on its last streamed chunk; absent when EOS ended it", async () => {
    const greedy = await whole("chat/completions", { messages: question, temperature: 0, max_tokens: 24 });
    const { stop, before } = stopIn(greedy.choices[0].message.content as string);
    const body = { messages: question, temperature: 0, max_tokens: 24, stop: ["never said by a fox", stop] };

    const w = await whole("chat/completions", body);
    expect(w.choices[0]).toMatchObject({ message: { content: before }, finish_reason: "stop", stop_reason: stop });
    const s = (await streamed("chat/completions", body)).get(0)!;
    expect(s.text).toBe(before);
    expect(s.end).toMatchObject({ finish_reason: "stop", stop_reason: stop });

    // A short answer that ends on EOS, with stop sequences it never says: nothing named.
    const hi = { messages: [{ role: "user", content: "Say hi." }], temperature: 0, max_tokens: 64, stop: ["never said by a fox"] };
    const eos = await whole("chat/completions", hi);
    expect(eos.choices[0].finish_reason).toBe("stop");
    expect(eos.usage.completion_tokens).toBeLessThan(64);
    expect(eos.choices[0]).not.toHaveProperty("stop_reason");
    const eosStream = (await streamed("chat/completions", hi)).get(0)!;
    expect(eosStream.end.finish_reason).toBe("stop");
    expect(eosStream.end).not.toHaveProperty("stop_reason");
    // Cut by max_tokens before the stop sequence: length, nothing named.
    const cut = await whole("chat/completions", { ...body, max_tokens: 2 });
    expect(cut.choices[0].finish_reason).toBe("length");
    expect(cut.choices[0]).not.toHaveProperty("stop_reason");
  }, 120_000);

  it("chat with n: each choice names the stop sequence that ended it, and only it", async () => {
    // Sampled with a seed: choice i samples with seed + i, so the two differ and repeat.
    const sampled = { messages: question, temperature: 1, seed: 11, max_tokens: 24, n: 2 };
    const free = await whole("chat/completions", sampled);
    const texts = [0, 1].map((i) => (free.choices as Json[]).find((c) => c.index === i)!.message.content as string);
    // For each choice, a word of its own the other choice never says.
    const own = texts.map((t, i) => {
      const other = texts[1 - i]!;
      const word = t.split(" ").slice(1).find((w) => w.length > 2 && !other.includes(` ${w}`));
      expect(word, `no word of choice ${i} missing from the other: ${JSON.stringify(texts)}`).toBeDefined();
      const stop = ` ${word}`;
      return { stop, before: t.slice(0, t.indexOf(stop)) };
    });
    const body = { ...sampled, stop: own.map((o) => o.stop) };
    const w = await whole("chat/completions", body);
    for (const i of [0, 1]) {
      expect((w.choices as Json[]).find((c) => c.index === i)).toMatchObject({ message: { content: own[i]!.before }, finish_reason: "stop", stop_reason: own[i]!.stop });
    }
    const s = await streamed("chat/completions", body);
    for (const i of [0, 1]) {
      expect(s.get(i)!.text).toBe(own[i]!.before);
      expect(s.get(i)!.end).toMatchObject({ finish_reason: "stop", stop_reason: own[i]!.stop });
    }
  }, 120_000);

  it("completions: stop_reason on the choice, whole and streamed", async () => {
    const prompt = "Once upon a time, in a small village by the sea,";
    const greedy = await whole("completions", { prompt, temperature: 0, max_tokens: 24 });
    const { stop, before } = stopIn(greedy.choices[0].text as string);
    const body = { prompt, temperature: 0, max_tokens: 24, stop: [stop] };
    const w = await whole("completions", body);
    expect(w.choices[0]).toMatchObject({ text: before, finish_reason: "stop", stop_reason: stop });
    const s = (await streamed("completions", body)).get(0)!;
    expect(s.text).toBe(before);
    expect(s.end).toMatchObject({ finish_reason: "stop", stop_reason: stop });
    // Its length ended it: nothing named.
    const cut = await whole("completions", { ...body, max_tokens: 1 });
    expect(cut.choices[0].finish_reason).toBe("length");
    expect(cut.choices[0]).not.toHaveProperty("stop_reason");
  }, 120_000);

  it("/v1/messages from @anthropic-ai/sdk: stop_reason stop_sequence naming it, whole and streamed; end_turn on EOS", async () => {
    const ask = { model: LLM, max_tokens: 24, temperature: 0, messages: [{ role: "user" as const, content: question[0]!.content }] };
    const greedy = await anthropic.messages.create(ask);
    const { stop, before } = stopIn((greedy.content[0] as Anthropic.TextBlock).text);
    const withStop = { ...ask, stop_sequences: ["never said by a fox", stop] };

    const msg = await anthropic.messages.create(withStop);
    expect(msg.stop_reason).toBe("stop_sequence");
    expect(msg.stop_sequence).toBe(stop);
    expect(msg.content).toEqual([{ type: "text", text: before }]);

    const stream = anthropic.messages.stream(withStop);
    let deltaStop: Anthropic.MessageDeltaEvent["delta"] | undefined;
    stream.on("streamEvent", (ev) => {
      if (ev.type === "message_delta") deltaStop = ev.delta;
    });
    const final = await stream.finalMessage();
    expect(deltaStop).toMatchObject({ stop_reason: "stop_sequence", stop_sequence: stop });
    expect(final.stop_reason).toBe("stop_sequence");
    expect(final.stop_sequence).toBe(stop);
    expect(final.content).toEqual([{ type: "text", text: before }]);

    // EOS with stop sequences it never says: end_turn, none named.
    const hi = { model: LLM, max_tokens: 64, temperature: 0, messages: [{ role: "user" as const, content: "Say hi." }], stop_sequences: ["never said by a fox"] };
    const eos = await anthropic.messages.create(hi);
    expect(eos.stop_reason).toBe("end_turn");
    expect(eos.stop_sequence).toBeNull();
    const eosStream = await anthropic.messages.stream(hi).finalMessage();
    expect(eosStream.stop_reason).toBe("end_turn");
    expect(eosStream.stop_sequence).toBeNull();
  }, 120_000);
});
