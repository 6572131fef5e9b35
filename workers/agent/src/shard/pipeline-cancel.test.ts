// A cancel that arrives while a head shard is still opening its sequence
// down the pipeline (connection tries can take seconds) must still stop it:
// before, cancel() looked only at sequences already open, and a request
// whose client left meanwhile decoded on every shard to its max_tokens.
import { create } from "@bufbuild/protobuf";
import { describe, expect, it } from "vitest";
import { FinishReason, GenerateSchema, LoadedSchema, ModelKind, type Event } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { EngineClient } from "../engine/client.ts";
import { FrameKind } from "./frame.ts";
import type { LazyShardLink } from "./link.ts";
import { PipelineHead } from "./pipeline.ts";

describe("a head shard's cancel while its sequence is opening", () => {
  it("applies when the sequence joins: it ends CANCELLED, is closed everywhere, and no step is taken", async () => {
    const asked: string[] = [];
    const engine = {
      alive: true,
      async once(kind: { case: string }) {
        asked.push(kind.case);
        if (kind.case === "tokenize") return { kind: { case: "tokenIds", value: { ids: [1, 2, 3] } } };
        return { kind: { case: kind.case, value: {} } };
      },
    } as unknown as EngineClient;
    const loaded = create(LoadedSchema, { model: "m", kind: ModelKind.LLAMA_GGUF, maxSeqLen: 64, nLayers: 4, layerStart: 0, layerEnd: 2, hiddenSize: 8 });
    const frames: number[] = [];
    let openSent!: () => void;
    const opened = new Promise<void>((r) => (openSent = r));
    let answerOpen!: () => void;
    const link = {
      request(kind: number) {
        frames.push(kind);
        if (kind !== FrameKind.OPEN) return Promise.resolve(new Uint8Array());
        openSent();
        return new Promise<Uint8Array>((r) => (answerOpen = () => r(new Uint8Array())));
      },
    };
    const next = { peer: { url: "http://next.invalid" }, get: async () => link, existing: async () => link } as unknown as LazyShardLink;
    const head = new PipelineHead(() => engine, () => loaded, next, { log: () => {} });
    const g = create(GenerateSchema, { model: "m", input: { case: "prompt", value: "hi" }, maxTokens: 50, temperature: 0, topP: 1, n: 1 });
    const events = head.call({ case: "generate", value: g }, "req-1");
    const first = events.next();
    await opened;
    // The client leaves while the next shard has not answered OPEN yet.
    head.cancel("req-1");
    answerOpen();
    const ev = (await first).value as Event;
    expect(ev.kind.case).toBe("done");
    expect(ev.kind.case === "done" && ev.kind.value.finishReason).toBe(FinishReason.CANCELLED);
    expect((await events.next()).done).toBe(true);
    await new Promise((r) => setTimeout(r, 20));
    expect(asked).not.toContain("shardStep");
    expect(frames).toEqual([FrameKind.OPEN, FrameKind.CLOSE]);
    expect(asked.filter((k) => k === "shardClose")).toHaveLength(1);
  });

  it("a cancel for a request that is not running leaves nothing behind", async () => {
    const head = new PipelineHead(() => undefined, () => undefined, undefined, { log: () => {} });
    head.cancel("never-started");
    // Nothing remembered: a later request with that id would run.
    expect((head as unknown as { starting: Map<string, boolean> }).starting.size).toBe(0);
  });
});
