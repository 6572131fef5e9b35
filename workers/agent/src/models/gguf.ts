// Reads one thing from a GGUF file's metadata without loading it: the number
// of transformer blocks (`<arch>.block_count`), which `switchyard up --split
// N` needs to cut the model into N even ranges before any engine runs.
import { open } from "node:fs/promises";

const TYPE_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const STRING = 8;
const ARRAY = 9;

export async function ggufBlockCount(file: string): Promise<number> {
  const fh = await open(file, "r");
  try {
    let pos = 0;
    const read = async (n: number): Promise<Buffer> => {
      const b = Buffer.alloc(n);
      const { bytesRead } = await fh.read(b, 0, n, pos);
      if (bytesRead !== n) throw new Error(`${file}: GGUF metadata ends early`);
      pos += n;
      return b;
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
    await u64(); // tensor count
    const kvs = await u64();
    for (let i = 0; i < kvs; i++) {
      const key = await str();
      const type = await u32();
      if (key.endsWith(".block_count") && (type === 4 || type === 5 || type === 10)) return type === 10 ? await u64() : await u32();
      await skip(type);
    }
    throw new Error(`${file}: no block_count in its GGUF metadata`);
  } finally {
    await fh.close();
  }
}

/** Blocks [0, blocks) cut into `n` ranges as even as whole blocks allow. */
export function evenRanges(blocks: number, n: number): Array<{ start: number; end: number }> {
  return Array.from({ length: n }, (_, i) => ({ start: Math.round((i * blocks) / n), end: Math.round(((i + 1) * blocks) / n) }));
}
