// Shard-to-shard frames: what one worker's agent sends the next over their
// persistent connection (docs: workers/engine/README.md, Split models). A
// small fixed header, then either raw activation rows (no JSON, no base64) or
// a binary protobuf message for the rare control frames.
//
//   u32 LE  length of everything after this field (header rest + body)
//   u8      kind
//   u8      dtype (STEP / ACTIVATIONS: 1 = f32, 2 = f16; else 0)
//   u16     0 (reserved)
//   u32 LE  tag: the request on this connection a reply belongs to
//   body    by kind:
//     OPEN, CLOSE   protobuf ShardOpen / ShardClose
//     STEP          u16 n_seqs, u32 hidden, per sequence (u8 id length, id
//                   UTF-8, u32 rows), then Σ rows × hidden raw little-endian
//                   rows, sequences in order — exactly that many bytes
//     SAMPLES       protobuf ShardOutput (the last shard's samples)
//     HIDDEN        protobuf HiddenStates: the layers still wanted and the
//                   previous shard's output rows (raw f32 bytes in a bytes field)
//     HIDDEN_STATES protobuf HiddenStatesResult (the reply: those layers)
//     OK            empty
//     ERROR         UTF-8 message
//     LOST          UTF-8 worker id, "\n", message: a shard down the
//                   pipeline is gone (its connection closed or refused, or
//                   it fell silent) — the head may rebuild the pipeline around it
//     REFUSED       UTF-8 "<status> <code>", "\n", message: a shard turned the
//                   frame down as a whole worker turns a request down (a
//                   stale lease fencing token: 409 stale_fencing_token); the
//                   head answers the client with that status and code
//     PING          empty, tag 0: the keepalive (link.ts), sent by each end
//                   every quarter of it, outside the order of the other
//                   frames; never answered

export const FrameKind = { OPEN: 1, STEP: 2, CLOSE: 3, HIDDEN: 4, PING: 5, OK: 16, SAMPLES: 18, HIDDEN_STATES: 19, ERROR: 31, LOST: 32, REFUSED: 33 } as const;
export type FrameKindValue = (typeof FrameKind)[keyof typeof FrameKind];

/** Header bytes after the length prefix. */
const HEADER = 8;
/** The largest frame accepted (a 4096-row f32 prefill of a 4096-wide model is 64 MiB). */
export const MAX_FRAME_BYTES = 80 << 20;

export interface Frame {
  kind: FrameKindValue;
  dtype: number;
  tag: number;
  body: Uint8Array;
}

export class FrameError extends Error {
  override name = "FrameError";
}

export function encodeFrame(f: Frame): Buffer {
  const out = Buffer.allocUnsafe(4 + HEADER + f.body.length);
  out.writeUInt32LE(HEADER + f.body.length, 0);
  out.writeUInt8(f.kind, 4);
  out.writeUInt8(f.dtype, 5);
  out.writeUInt16LE(0, 6);
  out.writeUInt32LE(f.tag >>> 0, 8);
  out.set(f.body, 12);
  return out;
}

/** Splits a byte stream into frames; refuses a frame longer than the bound before buffering it. */
export class FrameReader {
  private chunks: Buffer[] = [];
  private buffered = 0;

  push(data: Buffer): Frame[] {
    this.chunks.push(data);
    this.buffered += data.length;
    const frames: Frame[] = [];
    for (;;) {
      if (this.buffered < 4) break;
      const head = this.peek(4);
      const len = head.readUInt32LE(0);
      if (len < HEADER) throw new FrameError(`frame of ${len} bytes is shorter than its ${HEADER}-byte header`);
      if (len > MAX_FRAME_BYTES) throw new FrameError(`frame of ${len} bytes exceeds the ${MAX_FRAME_BYTES}-byte limit`);
      if (this.buffered < 4 + len) break;
      const all = this.take(4 + len);
      const kind = all.readUInt8(4);
      if (!Object.values(FrameKind).includes(kind as FrameKindValue)) throw new FrameError(`unknown frame kind ${kind}`);
      frames.push({ kind: kind as FrameKindValue, dtype: all.readUInt8(5), tag: all.readUInt32LE(8), body: all.subarray(12) });
    }
    return frames;
  }

  private peek(n: number): Buffer {
    if (this.chunks[0]!.length < n) this.chunks = [Buffer.concat(this.chunks)];
    return this.chunks[0]!.subarray(0, n);
  }

  private take(n: number): Buffer {
    const all = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks);
    const out = all.subarray(0, n);
    const rest = all.subarray(n);
    this.chunks = rest.length ? [rest] : [];
    this.buffered -= n;
    return out;
  }
}

export const DTYPE_F32 = 1;
export const DTYPE_F16 = 2;

export interface StepSeq {
  seqId: string;
  rows: number;
}

/** A STEP body: the sequences' row counts, then their rows as raw bytes. */
export function encodeStep(seqs: StepSeq[], hidden: number, rows: Uint8Array): Buffer {
  const ids = seqs.map((s) => Buffer.from(s.seqId, "utf8"));
  for (const id of ids) if (id.length === 0 || id.length > 255) throw new FrameError("a sequence id must be 1 to 255 bytes");
  const head = Buffer.allocUnsafe(6 + ids.reduce((n, id) => n + 1 + id.length + 4, 0));
  head.writeUInt16LE(seqs.length, 0);
  head.writeUInt32LE(hidden, 2);
  let o = 6;
  seqs.forEach((s, i) => {
    head.writeUInt8(ids[i]!.length, o);
    head.set(ids[i]!, o + 1);
    o += 1 + ids[i]!.length;
    head.writeUInt32LE(s.rows, o);
    o += 4;
  });
  return Buffer.concat([head, rows]);
}

/**
 * Parses a STEP body, refusing one whose rows are not exactly Σ rows ×
 * `hidden` × the element size — never a wrong answer from a short frame.
 */
export function decodeStep(body: Uint8Array, dtype: number, hidden: number): { seqs: StepSeq[]; rows: Uint8Array } {
  const b = Buffer.from(body.buffer, body.byteOffset, body.byteLength);
  if (dtype !== DTYPE_F32 && dtype !== DTYPE_F16) throw new FrameError(`step frame dtype ${dtype}: 1 (f32) or 2 (f16) expected`);
  if (b.length < 6) throw new FrameError("step frame too short for its header");
  const n = b.readUInt16LE(0);
  const h = b.readUInt32LE(2);
  if (h !== hidden) throw new FrameError(`step frame rows are ${h} wide; this model's hidden size is ${hidden}`);
  const seqs: StepSeq[] = [];
  let o = 6;
  for (let i = 0; i < n; i++) {
    if (o + 1 > b.length) throw new FrameError("step frame ends inside its sequence list");
    const len = b.readUInt8(o);
    if (len === 0 || o + 1 + len + 4 > b.length) throw new FrameError("step frame ends inside its sequence list");
    const seqId = b.toString("utf8", o + 1, o + 1 + len);
    const rows = b.readUInt32LE(o + 1 + len);
    if (rows === 0) throw new FrameError(`sequence ${seqId}: 0 rows`);
    seqs.push({ seqId, rows });
    o += 1 + len + 4;
  }
  if (n === 0) throw new FrameError("step frame has no sequences");
  const total = seqs.reduce((s, q) => s + q.rows, 0);
  const want = total * hidden * (dtype === DTYPE_F16 ? 2 : 4);
  const got = b.length - o;
  if (got !== want) throw new FrameError(`step frame carries ${got} bytes of rows; ${total} rows × ${hidden} × ${dtype === DTYPE_F16 ? "f16" : "f32"} need ${want}`);
  return { seqs, rows: b.subarray(o) };
}
