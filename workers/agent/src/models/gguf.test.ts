import { describe, expect, it } from "vitest";
import { resolveModel } from "./fetch.ts";
import { balancedRanges, evenRanges, ggufBlockCount, ggufLayout, type GgufLayout } from "./gguf.ts";

const flat = (blocks: number, head: number): GgufLayout => ({ blocks, blockParams: Array.from({ length: blocks }, () => 1), headParams: head });

describe("balancedRanges", () => {
  it("cuts evenly when the head costs nothing, and gives the last shard fewer blocks the more its head costs", () => {
    expect(balancedRanges(flat(30, 0), 2)).toEqual(evenRanges(30, 2));
    expect(balancedRanges(flat(30, 0), 3)).toEqual(evenRanges(30, 3));
    // Head worth 8 blocks: 19 | 11 + 8.
    expect(balancedRanges(flat(30, 8), 2)).toEqual([
      { start: 0, end: 19 },
      { start: 19, end: 30 },
    ]);
    // A head heavier than the rest of the model: the last shard gets one block.
    expect(balancedRanges(flat(4, 100), 2)).toEqual([
      { start: 0, end: 3 },
      { start: 3, end: 4 },
    ]);
  });

  it("covers every block once, contiguous, each range non-empty", () => {
    for (const [blocks, head, n] of [
      [30, 8, 3],
      [18, 30, 3],
      [5, 0, 5],
      [7, 2.5, 4],
    ] as const) {
      const r = balancedRanges(flat(blocks, head), n);
      expect(r).toHaveLength(n);
      expect(r[0]!.start).toBe(0);
      expect(r.at(-1)!.end).toBe(blocks);
      for (let i = 0; i < n; i++) expect(r[i]!.end).toBeGreaterThan(r[i]!.start);
      for (let i = 1; i < n; i++) expect(r[i]!.start).toBe(r[i - 1]!.end);
    }
    expect(() => balancedRanges(flat(3, 0), 4)).toThrow(/cannot cut 3 blocks into 4/);
  });
});

describe("ggufLayout on the real SmolLM2", () => {
  it("reads its 30 blocks, their matmul weights and the tied output head; cuts 2 shards at block 19", async () => {
    const m = await resolveModel("smollm2-135m-instruct");
    const l = await ggufLayout(m.path);
    expect(l.blocks).toBe(await ggufBlockCount(m.path));
    expect(l.blocks).toBe(30);
    // q, k, v, o (576², 192×576 twice, 576²) and the FFN (3 × 1536×576) per block; the head is the tied 49152×576 embedding.
    expect(new Set(l.blockParams)).toEqual(new Set([576 * 576 * 2 + 192 * 576 * 2 + 3 * 1536 * 576]));
    expect(l.headParams).toBe(49152 * 576);
    expect(balancedRanges(l, 2)).toEqual([
      { start: 0, end: 19 },
      { start: 19, end: 30 },
    ]);
    expect(balancedRanges(l, 3)).toEqual([
      { start: 0, end: 12 },
      { start: 12, end: 25 },
      { start: 25, end: 30 },
    ]);
  });
});
