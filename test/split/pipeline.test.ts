// A model split across two workers (issue 11, items 2, 3 and 8): a head
// shard (blocks 0-15, embeddings) and a tail shard (15-30, norm + head), each
// a real agent with a real engine. The head answers chat completions like a
// whole worker; activations go head → tail over one persistent,
// authenticated connection as binary frames; the tail samples. Greedy output
// equals the unsplit worker's token for token, streamed and not, with
// several requests batched; a wrong credential and a frame of the wrong size
// are refused with a clear message. A stop sequence that ended an answer is
// named (the choice's stop_reason), as on a whole worker.
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { ShardOpenSchema } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { startAgent, type AgentHandle } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";
import { encodeStep, FrameKind } from "../../workers/agent/src/shard/frame.ts";
import { ShardLink } from "../../workers/agent/src/shard/link.ts";
import type { PipelineHead } from "../../workers/agent/src/shard/pipeline.ts";
import { engineBinary, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const TAIL_TOKEN = "tail-worker-secret-0123456789";
const agents: AgentHandle[] = [];
let whole: AgentHandle;
let head: AgentHandle;
let tail: AgentHandle;

function agent(id: string, token: string, extra: Partial<Parameters<typeof startAgent>[0]> = {}) {
  return startAgent({
    registry: new MemoryRegistryStore(),
    models: [LLM],
    token,
    device: "cpu",
    engineBinary: engineBinary(),
    workerId: id,
    maxBatch: 4,
    maxSeqLen: 512,
    drainGraceMs: 0,
    threads: 1,
    log: () => {},
    ...extra,
  }).then((a) => (agents.push(a), a));
}

beforeAll(async () => {
  [whole, tail] = await Promise.all([agent("whole", WORKER_TOKEN), agent("tail", TAIL_TOKEN, { layers: { start: 15, end: 30 } })]);
  head = await agent("head", WORKER_TOKEN, { layers: { start: 0, end: 15 }, next: { url: tail.url, token: TAIL_TOKEN } });
  await Promise.all(agents.map((a) => a.supervisor.whenReady()));
}, 120_000);

afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
});

async function activeSequences(a: AgentHandle): Promise<number> {
  const ev = await a.supervisor.client!.once({ case: "stats", value: { $typeName: "switchyard.engine.v1.StatsRequest" } });
  return ev.kind.case === "stats" ? ev.kind.value.activeSequences : -1;
}

const questions = ["What is the capital of France?", "Write a haiku about the sea.", "List three prime numbers."];

async function chat(a: AgentHandle, q: string, stream = false): Promise<{ text: string; completion: number; finish: string }> {
  const res = await fetch(`${a.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: q }], temperature: 0, max_tokens: 24, stream, ...(stream ? { stream_options: { include_usage: true } } : {}) }),
  });
  expect(res.status).toBe(200);
  if (!stream) {
    const b = (await res.json()) as { choices: { message: { content: string }; finish_reason: string }[]; usage: { completion_tokens: number } };
    return { text: b.choices[0]!.message.content, completion: b.usage.completion_tokens, finish: b.choices[0]!.finish_reason };
  }
  let text = "";
  let completion = -1;
  let finish = "";
  for (const line of (await res.text()).split("\n")) {
    if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
    const ev = JSON.parse(line.slice(6)) as { choices: { delta?: { content?: string }; finish_reason?: string | null }[]; usage?: { completion_tokens: number } };
    text += ev.choices[0]?.delta?.content ?? "";
    if (ev.choices[0]?.finish_reason) finish = ev.choices[0].finish_reason;
    if (ev.usage) completion = ev.usage.completion_tokens;
  }
  return { text, completion, finish };
}

describe("a 2-shard pipeline of real engines", () => {
  it("answers exactly what the unsplit worker answers, batched, streamed and not", async () => {
    const reference = await Promise.all(questions.map((q) => chat(whole, q)));
    expect(reference.every((r) => r.completion > 4)).toBe(true);
    // All three at once: the head batches them into shared steps.
    const split = await Promise.all(questions.map((q) => chat(head, q)));
    expect(split).toEqual(reference);
    const streamed = await chat(head, questions[1]!, true);
    expect(streamed).toEqual(reference[1]);
    // Nothing left open on either shard.
    const stats = await tail.supervisor.client!.once({ case: "stats", value: { $typeName: "switchyard.engine.v1.StatsRequest" } });
    expect(stats.kind.case === "stats" && stats.kind.value.activeSequences).toBe(0);
    // Rows on the wire as raw f32: frames carry them plus a few bytes of header per step.
    const wire = (head.ctx.pipeline as PipelineHead).wire;
    expect(wire.rowBytes).toBeGreaterThan(0);
    expect(wire.frameBytes / wire.rowBytes).toBeLessThan(1.05);
    // Micro-batches: two groups of sequences were on the pipeline at once (one per shard).
    expect((head.ctx.pipeline as PipelineHead).depth).toBe(2);
    expect(wire.maxStepsInFlight).toBe(2);
  }, 120_000);

  it("carries logprobs, stop sequences and legacy completions like a whole worker; a client that goes away frees every shard", async () => {
    const ask = async (a: AgentHandle, path: string, body: Record<string, unknown>) => {
      const res = await fetch(`${a.url}${path}`, {
        method: "POST",
        headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
        body: JSON.stringify({ model: LLM, temperature: 0, max_tokens: 16, ...body }),
      });
      expect(res.status).toBe(200);
      const j = (await res.json()) as { id: string; created: number; usage: { prompt_tokens_details?: unknown }; [k: string]: unknown };
      // The whole worker may have this prompt in its prefix cache (shards keep none yet): compare all but cached_tokens.
      delete j.usage.prompt_tokens_details;
      return { ...j, id: "", created: 0 };
    };
    const firstChoice = (r: object) => (r as { choices: { message: { content: string }; finish_reason: string; stop_reason?: string }[] }).choices[0]!;
    const messages = [{ role: "user", content: questions[0] }];
    // A stop sequence the model says: the second word of its greedy answer.
    const said = firstChoice(await ask(whole, "/v1/chat/completions", { messages })).message.content;
    const stop = ` ${said.split(" ")[1]}`;
    const chatBody = { messages, logprobs: true, top_logprobs: 3, stop: [stop] };
    const viaHead = await ask(head, "/v1/chat/completions", chatBody);
    expect(viaHead).toEqual(await ask(whole, "/v1/chat/completions", chatBody));
    expect(JSON.stringify(viaHead)).toContain("top_logprobs");
    // The last shard says which stop sequence ended it, as the whole engine does.
    expect(firstChoice(viaHead)).toMatchObject({ message: { content: said.slice(0, said.indexOf(stop)) }, finish_reason: "stop", stop_reason: stop });
    const cmpl = { prompt: "The three primary colours are", logprobs: 2 };
    expect(await ask(head, "/v1/completions", cmpl)).toEqual(await ask(whole, "/v1/completions", cmpl));

    // A stream abandoned after its first chunk: the sequence is closed on both shards.
    const ctl = new AbortController();
    const res = await fetch(`${head.url}/v1/chat/completions`, {
      method: "POST",
      signal: ctl.signal,
      headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: "Tell me a long story." }], temperature: 0, max_tokens: 400, stream: true }),
    });
    await res.body!.getReader().read();
    ctl.abort();
    const open = async (a: AgentHandle) => {
      const ev = await a.supervisor.client!.once({ case: "stats", value: { $typeName: "switchyard.engine.v1.StatsRequest" } });
      return ev.kind.case === "stats" ? ev.kind.value.activeSequences : -1;
    };
    const deadline = Date.now() + 10_000;
    while ((await open(head)) + (await open(tail)) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect([await open(head), await open(tail)]).toEqual([0, 0]);
  }, 120_000);

  it("runs three shards too: the middle one forwards its rows to the last itself", async () => {
    const t3 = await agent("t3", TAIL_TOKEN, { layers: { start: 20, end: 30 } });
    const m3 = await agent("m3", TAIL_TOKEN, { layers: { start: 10, end: 20 }, next: { url: t3.url, token: TAIL_TOKEN } });
    const h3 = await agent("h3", WORKER_TOKEN, { layers: { start: 0, end: 10 }, next: { url: m3.url, token: TAIL_TOKEN } });
    await Promise.all([t3, m3, h3].map((a) => a.supervisor.whenReady()));
    const reference = await chat(whole, questions[2]!);
    expect(await chat(h3, questions[2]!)).toEqual(reference);
    expect(await chat(h3, questions[0]!, true)).toEqual(await chat(whole, questions[0]!));
    // Several streams at once: one micro-batch per shard in flight, so all three shards work at once.
    const all = await Promise.all(questions.map((q) => chat(whole, q)));
    expect(await Promise.all(questions.map((q) => chat(h3, q)))).toEqual(all);
    const pipe = h3.ctx.pipeline as PipelineHead;
    expect(pipe.depth).toBe(3);
    expect(pipe.wire.maxStepsInFlight).toBe(3);
    // The middle shard forwarded rows too: every hop carries raw rows plus a small header.
    const mid = m3.shardWire();
    expect(mid.rowBytes).toBeGreaterThan(0);
    expect(mid.stepFrameBytes / mid.rowBytes).toBeLessThan(1.05);
  }, 120_000);

  it("a tail shard that drains (SIGTERM's stop) lets the stream through it finish, and shows it as in flight meanwhile", async () => {
    const t5 = await agent("t5", TAIL_TOKEN, { layers: { start: 15, end: 30 }, drainGraceMs: 60_000 });
    const h5 = await agent("h5", WORKER_TOKEN, { layers: { start: 0, end: 15 }, next: { url: t5.url, token: TAIL_TOKEN } });
    await Promise.all([t5, h5].map((a) => a.supervisor.whenReady()));
    const res = await fetch(`${h5.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: "Tell me a long story about a lighthouse." }], temperature: 0, max_tokens: 40, stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let text = new TextDecoder().decode((await reader.read()).value);
    // The tail's heartbeat counts the sequence it serves (routers place by it).
    expect((await t5.record()).inFlight).toBe(1);
    const stopped = t5.stop();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const ended = performance.now();
    expect(text).not.toContain('"error"');
    expect(text).toContain("[DONE]");
    // The drain ends when the head closes the sequence, not at its 60 s grace.
    await stopped;
    expect(performance.now() - ended).toBeLessThan(5_000);
    expect(t5.ctx.inFlight).toBe(0);
  }, 120_000);

  it("a shard lost mid-stream ends the stream with one SSE error event; the next request is refused clearly", async () => {
    const t4 = await agent("t4", TAIL_TOKEN, { layers: { start: 15, end: 30 } });
    const h4 = await agent("h4", WORKER_TOKEN, { layers: { start: 0, end: 15 }, next: { url: t4.url, token: TAIL_TOKEN } });
    await Promise.all([t4, h4].map((a) => a.supervisor.whenReady()));
    const res = await fetch(`${h4.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: "Tell me a long story about a lighthouse." }], temperature: 0, max_tokens: 400, stream: true }),
    });
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    let text = new TextDecoder().decode((await reader.read()).value);
    await t4.stop();
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += new TextDecoder().decode(value);
    }
    const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
    expect(events.filter((e) => e.includes('"error"'))).toHaveLength(1);
    expect(events.at(-1)).toContain('"error"');
    expect(text).not.toContain("[DONE]");
    // Nothing left open on the head, and the next request gets a clear 503.
    const stats = await h4.supervisor.client!.once({ case: "stats", value: { $typeName: "switchyard.engine.v1.StatsRequest" } });
    expect(stats.kind.case === "stats" && stats.kind.value.activeSequences).toBe(0);
    const again = await fetch(`${h4.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
      body: JSON.stringify({ model: LLM, messages: [{ role: "user", content: "Hi" }], max_tokens: 4 }),
    });
    expect(again.status).toBe(503);
    expect(((await again.json()) as { error: { message: string } }).error.message).toMatch(/opening the sequence down the pipeline/);
    // And the head stops advertising the model as a whole (routers stop sending it there).
    expect((await h4.record()).models).toEqual([]);
  }, 120_000);

  it("advertises the head as the model and the tail as a layer range only, each with the model's blocks and its GGUF digest", async () => {
    const digest = createHash("sha256").update(readFileSync(tail.models[0]!.path)).digest("hex");
    expect((await head.record()).models).toEqual([LLM]);
    expect((await head.record()).layerRanges).toEqual([{ model: LLM, start: 0, end: 15, blocks: 30, digest }]);
    expect((await tail.record()).models).toEqual([]);
    expect((await tail.record()).layerRanges).toEqual([{ model: LLM, start: 15, end: 30, blocks: 30, digest }]);
  });

  it("refuses a connection without the shard's credential, for another model file or non-contiguous blocks, and a frame of the wrong size", async () => {
    const peer = { url: tail.url, token: TAIL_TOKEN };
    const digest = createHash("sha256").update(readFileSync(tail.models[0]!.path)).digest("hex");
    const expectOk = { model: LLM, digest, layerStart: 15 };
    await expect(ShardLink.connect({ url: tail.url, token: WORKER_TOKEN }, expectOk)).rejects.toThrow(/401 missing or wrong worker credential/);
    // A pipeline that would mix model files or skip/repeat blocks is refused before any frame.
    await expect(ShardLink.connect(peer)).rejects.toThrow(/409 a shard connection must say the model/);
    await expect(ShardLink.connect(peer, { ...expectOk, digest: "0".repeat(64) })).rejects.toThrow(/409 model file differs/);
    await expect(ShardLink.connect(peer, { ...expectOk, layerStart: 10 })).rejects.toThrow(/409 this shard holds blocks 15-30; the sender's end at block 10/);
    await expect(ShardLink.connect(peer, { ...expectOk, model: "other" })).rejects.toThrow(/409 this shard serves 'smollm2-135m-instruct', not 'other'/);
    const link = await ShardLink.connect(peer, expectOk);
    try {
      // Three rows announced, two rows of f32 sent.
      const short = encodeStep([{ seqId: "x", rows: 3 }], 576, new Uint8Array(2 * 576 * 4));
      await expect(link.request(FrameKind.STEP, short, 1)).rejects.toThrow(/carries 4608 bytes of rows; 3 rows × 576 × f32 need 6912/);
      const narrow = encodeStep([{ seqId: "x", rows: 1 }], 512, new Uint8Array(512 * 4));
      await expect(link.request(FrameKind.STEP, narrow, 1)).rejects.toThrow(/512 wide; this model's hidden size is 576/);
      // A sequence never opened: the engine says so; the connection stays usable.
      const unknown = encodeStep([{ seqId: "never-opened", rows: 1 }], 576, new Uint8Array(576 * 4));
      await expect(link.request(FrameKind.STEP, unknown, 1)).rejects.toThrow(/not open on this shard/);
      expect(link.alive).toBe(true);
      // A sequence opened and then abandoned with the connection is freed by the shard itself.
      const open = create(ShardOpenSchema, { model: LLM, seqId: "abandoned", capacity: 64, maxTokens: 8 });
      await link.request(FrameKind.OPEN, toBinary(ShardOpenSchema, open));
      expect(await activeSequences(tail)).toBe(1);
      // Its KV cache (64 positions × 15 blocks × keys and values) shows in the heartbeat.
      expect((await tail.record()).kvCacheBytes).toBeGreaterThanOrEqual(64 * 15 * 2 * 192 * 2);
    } finally {
      link.close();
    }
    const deadline = Date.now() + 5000;
    while ((await activeSequences(tail)) > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    expect(await activeSequences(tail)).toBe(0);
  });
});
