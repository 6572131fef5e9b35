import { describe, expect, it } from "vitest";
import { decodeStep, DTYPE_F16, DTYPE_F32, encodeFrame, encodeStep, FrameKind, FrameReader, MAX_FRAME_BYTES } from "./frame.ts";

describe("shard frames", () => {
  it("round-trip a step byte for byte, however the stream is cut", () => {
    const rows = new Uint8Array(5 * 8 * 4).map((_, i) => i % 251);
    const body = encodeStep([{ seqId: "a", rows: 3 }, { seqId: "seq-β", rows: 2 }], 8, rows);
    const bytes = encodeFrame({ kind: FrameKind.STEP, dtype: DTYPE_F32, tag: 7, body });
    // Header: length, kind, dtype, reserved, tag — then the raw rows at the end, untouched.
    expect(bytes.readUInt32LE(0)).toBe(bytes.length - 4);
    expect(Buffer.compare(bytes.subarray(bytes.length - rows.length), Buffer.from(rows))).toBe(0);
    const reader = new FrameReader();
    const frames = [];
    for (let i = 0; i < bytes.length; i += 7) frames.push(...reader.push(bytes.subarray(i, i + 7)));
    expect(frames).toHaveLength(1);
    expect(frames[0]!.tag).toBe(7);
    const step = decodeStep(frames[0]!.body, frames[0]!.dtype, 8);
    expect(step.seqs).toEqual([{ seqId: "a", rows: 3 }, { seqId: "seq-β", rows: 2 }]);
    expect([...step.rows]).toEqual([...rows]);
    // Two frames in one chunk.
    expect(new FrameReader().push(Buffer.concat([bytes, bytes]))).toHaveLength(2);
  });

  it("refuses rows of the wrong size or width, and frames over the limit before buffering them", () => {
    const f16 = encodeStep([{ seqId: "a", rows: 2 }], 8, new Uint8Array(2 * 8 * 2));
    expect(decodeStep(f16, DTYPE_F16, 8).rows.length).toBe(32);
    expect(() => decodeStep(f16, DTYPE_F32, 8)).toThrow(/carries 32 bytes of rows; 2 rows × 8 × f32 need 64/);
    expect(() => decodeStep(f16, DTYPE_F16, 16)).toThrow(/8 wide; this model's hidden size is 16/);
    expect(() => decodeStep(f16, 9, 8)).toThrow(/dtype 9/);
    const huge = Buffer.alloc(12);
    huge.writeUInt32LE(MAX_FRAME_BYTES + 1, 0);
    expect(() => new FrameReader().push(huge)).toThrow(/exceeds/);
    const odd = encodeFrame({ kind: FrameKind.OK, dtype: 0, tag: 1, body: new Uint8Array() });
    odd.writeUInt8(99, 4);
    expect(() => new FrameReader().push(odd)).toThrow(/unknown frame kind 99/);
  });
});
