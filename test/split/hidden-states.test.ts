// Hidden states of a split model (issue 11, item 7): `/v1/hidden_states` on
// the head of a 2- and a 3-shard pipeline of real engines returns the layers
// asked for — each from the shard that holds it, rows passed on down the
// pipeline as raw f32 — in the same safetensors response as an unsplit
// worker, bit for bit (same kernels, f32 between shards); pooled and f16
// answers too. Bad layers get the unsplit worker's 400.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { decodeSafetensors, startAgent, type AgentHandle } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";
import { engineBinary, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const agents: AgentHandle[] = [];
let whole: AgentHandle;
let head2: AgentHandle;
let head3: AgentHandle;
let tail2: AgentHandle;

function agent(id: string, extra: Partial<Parameters<typeof startAgent>[0]> = {}) {
  return startAgent({
    registry: new MemoryRegistryStore(),
    models: [LLM],
    token: WORKER_TOKEN,
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
  let t3: AgentHandle;
  [whole, tail2, t3] = await Promise.all([agent("hs-whole"), agent("hs-t2", { layers: { start: 15, end: 30 } }), agent("hs-t3", { layers: { start: 20, end: 30 } })]);
  const m3 = await agent("hs-m3", { layers: { start: 10, end: 20 }, next: { url: t3.url, token: WORKER_TOKEN } });
  [head2, head3] = await Promise.all([
    agent("hs-h2", { layers: { start: 0, end: 15 }, next: { url: tail2.url, token: WORKER_TOKEN } }),
    agent("hs-h3", { layers: { start: 0, end: 10 }, next: { url: m3.url, token: WORKER_TOKEN } }),
  ]);
  await Promise.all(agents.map((a) => a.supervisor.whenReady()));
}, 180_000);

afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
});

async function hidden(a: AgentHandle, body: Record<string, unknown>): Promise<{ status: number; bytes: Uint8Array; headers: Headers }> {
  const res = await fetch(`${a.url}/v1/hidden_states`, {
    method: "POST",
    headers: { authorization: `Bearer ${WORKER_TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ model: LLM, ...body }),
  });
  return { status: res.status, bytes: new Uint8Array(await res.arrayBuffer()), headers: res.headers };
}

describe("hidden states across shards (real engines)", () => {
  it("returns every asked layer from the shard that holds it, byte for byte what the unsplit worker returns", async () => {
    // Layers on every shard, at both ends of each range, out of order, one twice.
    const body = { input: "The lighthouse keeper climbed the stairs.", layers: [30, 0, 10, 11, 15, 16, 20, 21, 5, 15] };
    const ref = await hidden(whole, body);
    expect(ref.status).toBe(200);
    const refTensors = decodeSafetensors(ref.bytes).tensors;
    expect(Object.keys(refTensors).sort()).toEqual(["layer_0", "layer_10", "layer_11", "layer_15", "layer_16", "layer_20", "layer_21", "layer_30", "layer_5"]);
    for (const head of [head2, head3]) {
      const got = await hidden(head, body);
      expect(got.status).toBe(200);
      expect(got.headers.get("x-switchyard-layers")).toBe(ref.headers.get("x-switchyard-layers"));
      expect(got.headers.get("x-switchyard-tokens")).toBe(ref.headers.get("x-switchyard-tokens"));
      // The whole safetensors response, header and rows, is identical.
      expect(Buffer.from(got.bytes).equals(Buffer.from(ref.bytes))).toBe(true);
    }
  }, 120_000);

  it("'all' layers, pooled and as f16, and chat messages: the same answer as unsplit", async () => {
    for (const body of [
      { input: "Hello there", layers: "all", pooling: "mean" },
      { messages: [{ role: "user", content: "What is a GPU?" }], layers: [3, 12, 27], pooling: "last", dtype: "f16" },
    ]) {
      const ref = await hidden(whole, body);
      expect(ref.status).toBe(200);
      if (body.layers === "all") expect(Object.keys(decodeSafetensors(ref.bytes).tensors)).toHaveLength(31);
      for (const head of [head2, head3]) expect(Buffer.from((await hidden(head, body)).bytes).equals(Buffer.from(ref.bytes))).toBe(true);
    }
  }, 120_000);

  it("refuses a layer past the model like an unsplit worker, and a shard past block 0 asked directly says what it needs", async () => {
    const bad = { input: "hi", layers: [2, 31] };
    const ref = await hidden(whole, bad);
    expect(ref.status).toBe(400);
    for (const head of [head2, head3]) {
      const got = await hidden(head, bad);
      expect(got.status).toBe(400);
      expect(Buffer.from(got.bytes).toString()).toContain("layer 31 out of range 0..=30");
    }
    const direct = await hidden(tail2, { input: "hi", layers: [20] });
    expect(direct.status).toBe(400);
    expect(Buffer.from(direct.bytes).toString()).toContain("this shard starts at block 15: send the previous shard's rows");
  }, 60_000);
});
