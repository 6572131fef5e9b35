// Reads what `switchyard up --split N` (and `bench split`) need of a GGUF
// file before any engine runs, without loading its weights: the number of
// transformer blocks (`<arch>.block_count`) and, from the tensor table, each
// block's matmul weights and the output head's, so the blocks can be cut into
// N ranges of about equal compute (balancedRanges).
import { open } from "node:fs/promises";

const TYPE_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const STRING = 8;
const ARRAY = 9;

/** Per decoded row, the multiply-adds of a model's matmul weights (their element counts). */
export interface GgufLayout {
  blocks: number;
  /** Per block: Σ elements of its 2-D (matmul) weights. */
  blockParams: number[];
  /** The output head's (`output.weight`, or the token embeddings when tied); the last shard's. */
  headParams: number;
}

export async function ggufBlockCount(file: string): Promise<number> {
  return (await readGguf(file, false)).blocks;
}

/** The blocks and the matmul weights per block and of the output head (from the GGUF's tensor table). */
export async function ggufLayout(file: string): Promise<GgufLayout> {
  return readGguf(file, true);
}

async function readGguf(file: string, tensors: boolean): Promise<GgufLayout> {
  const fh = await open(file, "r");
  try {
    let pos = 0;
    // The file read 1 MiB at a time: the metadata is millions of small fields (a vocabulary's strings).
    let win = Buffer.alloc(0);
    let winAt = 0;
    const read = async (n: number): Promise<Buffer> => {
      if (pos < winAt || pos + n > winAt + win.length) {
        const b = Buffer.alloc(Math.max(n, 1 << 20));
        const { bytesRead } = await fh.read(b, 0, b.length, pos);
        win = b.subarray(0, bytesRead);
        winAt = pos;
        if (bytesRead < n) throw new Error(`${file}: GGUF metadata ends early`);
      }
      const out = win.subarray(pos - winAt, pos - winAt + n);
      pos += n;
      return out;
    };
    const u32 = async () => (await read(4)).readUInt32LE(0);
    const u64 = async () => Number((await read(8)).readBigUInt64LE(0));
    const str = async () => {
      const n = await u64();
      if (n > 1 << 20) throw new Error(`${file}: GGUF string of ${n} bytes`);
      return (await read(n)).toString("utf8");
    };
    const skip = async (type: number): Promise<void> => {
      // (`pos += await …` would add to the position read before the await.)
      if (type === STRING) {
        const n = await u64();
        pos += n;
      } else if (type === ARRAY) {
        const inner = await u32();
        const n = await u64();
        if (inner === STRING) {
          for (let i = 0; i < n; i++) {
            const len = await u64();
            pos += len;
          }
        }
        else if (TYPE_SIZE[inner] !== undefined) pos += n * TYPE_SIZE[inner]!;
        else throw new Error(`${file}: GGUF array of type ${inner}`);
      } else if (TYPE_SIZE[type] !== undefined) {
        pos += TYPE_SIZE[type]!;
      } else throw new Error(`${file}: GGUF value of type ${type}`);
    };
    if ((await read(4)).toString("latin1") !== "GGUF") throw new Error(`${file} is not a GGUF file`);
    const version = await u32();
    if (version < 2) throw new Error(`${file}: GGUF version ${version} is not supported`);
    const nTensors = await u64();
    const kvs = await u64();
    let blocks: number | undefined;
    for (let i = 0; i < kvs; i++) {
      const key = await str();
      const type = await u32();
      if (blocks === undefined && key.endsWith(".block_count") && (type === 4 || type === 5 || type === 10)) {
        blocks = type === 10 ? await u64() : await u32();
        if (!tensors) break;
        continue;
      }
      await skip(type);
    }
    if (blocks === undefined) throw new Error(`${file}: no block_count in its GGUF metadata`);
    const layout: GgufLayout = { blocks, blockParams: Array.from({ length: blocks }, () => 0), headParams: 0 };
    if (!tensors) return layout;
    let output = 0;
    let embd = 0;
    for (let i = 0; i < nTensors; i++) {
      const name = await str();
      const dims = await u32();
      if (dims > 8) throw new Error(`${file}: tensor ${name} has ${dims} dimensions`);
      let elems = 1;
      for (let d = 0; d < dims; d++) elems *= await u64();
      pos += 4 + 8; // type, offset
      if (dims < 2) continue; // norms and biases: no matmul
      const m = /^blk\.(\d+)\./.exec(name);
      if (m) {
        const b = Number(m[1]);
        if (b < blocks) layout.blockParams[b]! += elems;
      } else if (name === "output.weight") output = elems;
      else if (name === "token_embd.weight") embd = elems;
    }
    layout.headParams = output || embd;
    return layout;
  } finally {
    await fh.close();
  }
}

/** Blocks [0, blocks) cut into `n` ranges as even as whole blocks allow. */
export function evenRanges(blocks: number, n: number): Array<{ start: number; end: number }> {
  return Array.from({ length: n }, (_, i) => ({ start: Math.round((i * blocks) / n), end: Math.round(((i + 1) * blocks) / n) }));
}

/**
 * Blocks cut into `n` contiguous ranges of about equal compute per decoded
 * row: each block costs its matmul weights, and the last range also the
 * output head (which is 8 blocks' worth on SmolLM2-135M: cut evenly, its
 * last shard does ~1.4× the first's work and holds the whole pipeline to its
 * pace). The first shard's embedding lookup costs next to nothing. The cut
 * minimises the busiest range's cost (ties: the earliest cut).
 */
export function balancedRanges(layout: GgufLayout, n: number): Array<{ start: number; end: number }> {
  const b = layout.blocks;
  if (n < 1 || n > b) throw new Error(`cannot cut ${b} blocks into ${n} ranges`);
  const pre = [0];
  for (const c of layout.blockParams) pre.push(pre.at(-1)! + c);
  const cost = (s: number, e: number) => pre[e]! - pre[s]! + (e === b ? layout.headParams : 0);
  // best[k][e]: the least max cost of blocks [0, e) in k ranges; cut[k][e] the start of the last one.
  const best = Array.from({ length: n + 1 }, () => Array<number>(b + 1).fill(Infinity));
  const cut = Array.from({ length: n + 1 }, () => Array<number>(b + 1).fill(0));
  best[0]![0] = 0;
  for (let k = 1; k <= n; k++) {
    for (let e = k; e <= b; e++) {
      for (let s = k - 1; s < e; s++) {
        const v = Math.max(best[k - 1]![s]!, cost(s, e));
        if (v < best[k]![e]!) {
          best[k]![e] = v;
          cut[k]![e] = s;
        }
      }
    }
  }
  const out: Array<{ start: number; end: number }> = [];
  for (let k = n, e = b; k >= 1; k--) {
    const s = cut[k]![e]!;
    out.unshift({ start: s, end: e });
    e = s;
  }
  return out;
}
