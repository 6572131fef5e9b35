// A worker that serves a layer range (issue 11, item 1): the engine loads
// only those blocks, warms them up, and the heartbeat advertises the range
// (not the model as a whole, so routers never send it whole requests) and the
// memory measured. A range outside the model is refused with a clear message
// instead of restarting forever.
import { afterAll, describe, expect, it } from "vitest";
import { catalog, planModel, resolveModel, startAgent, type AgentHandle } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";
import { parseLayers } from "../../apps/cli/src/commands/worker.ts";
import { engineBinary, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const agents: AgentHandle[] = [];

afterAll(async () => {
  await Promise.all(agents.map((a) => a.stop()));
});

async function agent(id: string, layers?: { start: number; end: number }, memoryBudget?: number, registry = new MemoryRegistryStore()) {
  const a = await startAgent({
    registry,
    models: [LLM],
    token: WORKER_TOKEN,
    device: "cpu",
    engineBinary: engineBinary(),
    workerId: id,
    maxBatch: 4,
    maxSeqLen: 512,
    drainGraceMs: 0,
    log: () => {},
    ...(layers ? { layers } : {}),
    ...(memoryBudget ? { memoryBudget } : {}),
  });
  agents.push(a);
  return a;
}

describe("a worker serving a layer range (real engine)", () => {
  it("loads only its blocks and advertises the range and its memory (weights of its range, KV caches)", async () => {
    const [whole, tail] = await Promise.all([agent("whole-1"), agent("shard-15-30", { start: 15, end: 30 })]);
    await Promise.all([whole.supervisor.whenReady(), tail.supervisor.whenReady()]);
    expect(tail.supervisor.state).toBe("ready");
    const rec = await tail.record();
    expect(rec.layerRanges).toEqual([{ model: LLM, start: 15, end: 30, blocks: 30, digest: catalog[LLM]!.mainFileSha256 }]);
    // Routable only once warm: start → ready is reported in the heartbeat.
    expect(rec.readyMs).toBeGreaterThan(0);
    // Not a whole model: never a candidate for whole requests.
    expect(rec.models).toEqual([]);
    expect(rec.memoryBytes).toBeGreaterThan(0);
    const wholeRec = await whole.record();
    expect(wholeRec.layerRanges).toEqual([{ model: LLM, start: 0, end: 30, blocks: 30 }]);
    expect(wholeRec.models).toEqual([LLM]);
    // Half the blocks (plus the tied head): well under the whole model's weights.
    const shardBytes = Number(tail.supervisor.loaded.get(LLM)!.weightBytes);
    const wholeBytes = Number(whole.supervisor.loaded.get(LLM)!.weightBytes);
    expect(shardBytes).toBeLessThan(wholeBytes * 0.8);
    expect(shardBytes).toBeGreaterThan(wholeBytes * 0.3);
    // The heartbeat carries the engine's measured weights and KV caches (none open yet).
    expect(rec.weightBytes).toBe(shardBytes);
    expect(wholeRec.weightBytes).toBe(wholeBytes);
    expect(rec.kvCacheBytes).toBe(0);
  }, 120_000);

  it("claims no whole model while warming: its first heartbeat, before the engine has loaded, lists the model in no `models`", async () => {
    const registry = new MemoryRegistryStore();
    // startAgent publishes before the engine starts loading: this is the warming record routers see first.
    const shard = await agent("shard-warming", { start: 0, end: 15 }, undefined, registry);
    const [first] = await registry.list();
    expect(first?.state).toBe("warming");
    // A router would list a model it cannot route (GET /v1/models, then 503) from such a record.
    expect(first?.models).toEqual([]);
    await shard.supervisor.whenReady();
    expect((await shard.record()).models).toEqual([]);
  }, 120_000);

  it("refuses a range outside the model with a clear message, before loading anything", async () => {
    await expect(agent("shard-bad", { start: 0, end: 31 })).rejects.toThrow(/--layers 0-31: .*not within the model's 30 blocks/);
    expect(() => parseLayers("15")).toThrow(/START-END/);
    expect(() => parseLayers("20-10")).toThrow(/START must be below END/);
    expect(parseLayers("0-15")).toEqual({ start: 0, end: 15 });
  }, 60_000);

  it("plans a shard's memory by its blocks: a budget the shard fits starts it, the same budget refuses the whole model", async () => {
    const file = (await resolveModel(LLM)).path;
    const [whole, tail] = await Promise.all([planModel(engineBinary(), file), planModel(engineBinary(), file, { start: 15, end: 30 })]);
    expect(tail.kvBytesPerToken * 2).toBe(whole.kvBytesPerToken);
    expect(tail.weightBytes).toBeLessThan(whole.weightBytes * 0.8);
    const need = (p: typeof whole) => p.weightBytes + p.overheadBytes + p.kvBytesPerToken * 4 * 512;
    const budget = Math.round((need(whole) + need(tail)) / 2);
    const shard = await agent("shard-budget", { start: 15, end: 30 }, budget);
    await shard.supervisor.whenReady();
    await expect(agent("whole-budget", undefined, budget)).rejects.toThrow(/the models need \d+ MiB but the memory budget is \d+ MiB/);
  }, 120_000);
});
