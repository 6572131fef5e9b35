// Several streams over one path of three shards (head 0-10 > mid 10-20 >
// tail 20-30, two tails), and the tail they use is killed. Every stream must
// be rebuilt around it — none ends with an error, none repeats or skips a
// token — and the healthy middle shard is never taken for lost. Real shard
// connections on loopback (ShardPaths, ShardLink, the shard server, with its
// routed tickets); each shard's engine is a stand-in that keeps sequences
// open by id, as the real one does, and "samples" the token its position
// gives, so a stream's tokens show exactly what each shard saw.
//
// The two races the audit found, each made certain here:
//  - a sequence idle at the loss (its step not sent yet) used to step over a
//    new connection where it was never opened (the middle shard had freed it
//    with the retired connection): an error event;
//  - a sequence rebuilt while the retired connection still had a step in
//    flight reopened under its old id on the middle shard, which still held
//    it: "already open", an error event.
import { createServer, type Server } from "node:http";
import { create } from "@bufbuild/protobuf";
import { FinishReason, GenerateSchema, ShardOutputSchema, type Event, type Loaded } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { signShardRoute, type ShardRoute } from "@switchyard/state";
import { afterEach, describe, expect, it, vi } from "vitest";
import type { EngineClient } from "../engine/client.ts";
import { ShardPaths } from "./paths.ts";
import { PipelineHead } from "./pipeline.ts";
import { attachShardServer } from "./server.ts";

const TOKEN = "shard-secret";
const DIGEST = "e".repeat(64);
const HIDDEN = 4;
const PROMPT = [1, 2, 3];
const closers: (() => unknown)[] = [];
afterEach(async () => {
  for (const c of closers.splice(0).reverse()) await c();
});

/** A gate a stand-in engine waits at; `hit` resolves when something reached it. */
function gate(): { wait: () => Promise<void>; hit: Promise<void>; open: () => void } {
  let open!: () => void;
  let hit!: () => void;
  const opened = new Promise<void>((r) => (open = r));
  const reached = new Promise<void>((r) => (hit = r));
  return {
    wait: () => {
      hit();
      return opened;
    },
    hit: reached,
    open,
  };
}

interface StandIn {
  engine: EngineClient;
  /** Sequence ids open on it now. */
  open: Set<string>;
  /** Runs before each step this engine takes (a test holds a step here). */
  beforeStep?: (seqIds: string[]) => Promise<void>;
  /** Runs before each sequence this engine opens. */
  beforeOpen?: (seqId: string) => Promise<void>;
}

/**
 * A shard's engine: opens and closes sequences by id (a second open of one
 * still open is refused, as the real engine refuses it), and steps only
 * sequences open on it. Not the last shard: passes rows on. The last: the
 * next token is 1000 + the rows this sequence has been fed since it opened
 * (a rebuild re-feeds prompt + generated), finishing at max_tokens.
 */
function standIn(loaded: Loaded): StandIn {
  const seqs = new Map<string, { pos: number; produced: number; max: number }>();
  const self: StandIn = {
    open: new Set(),
    engine: {
      alive: true,
      once: async (kind: { case: string; value: any }) => {
        const v = kind.value;
        switch (kind.case) {
          case "tokenize":
            return { kind: { case: "tokenIds", value: { ids: PROMPT } } };
          case "shardOpen":
            await self.beforeOpen?.(v.seqId);
            if (seqs.has(v.seqId)) throw new Error(`sequence "${v.seqId}" is already open on this shard`);
            seqs.set(v.seqId, { pos: 0, produced: v.generated?.length ?? 0, max: v.maxTokens });
            self.open.add(v.seqId);
            return { kind: { case: "shardOpened", value: {} } };
          case "shardClose":
            seqs.delete(v.seqId);
            self.open.delete(v.seqId);
            return { kind: { case: "shardClosed", value: {} } };
          case "shardStep": {
            const ids = (v.seqs as { seqId: string; rows: number }[]).map((s) => s.seqId);
            await self.beforeStep?.(ids);
            let total = 0;
            const samples = [];
            for (const s of v.seqs as { seqId: string; rows: number }[]) {
              const q = seqs.get(s.seqId);
              if (!q) throw new Error(`sequence "${s.seqId}" is not open on this shard`);
              q.pos += s.rows;
              total += s.rows;
              if (loaded.layerEnd === loaded.nLayers) {
                q.produced++;
                const finishReason = q.produced >= q.max ? FinishReason.LENGTH : FinishReason.UNSPECIFIED;
                // The last shard frees a sequence that finished (as the real one does).
                if (finishReason !== FinishReason.UNSPECIFIED) {
                  seqs.delete(s.seqId);
                  self.open.delete(s.seqId);
                }
                samples.push({ seqId: s.seqId, tokens: { ids: [1000 + q.pos], text: ` ${1000 + q.pos}` }, finishReason });
              }
            }
            if (loaded.layerEnd === loaded.nLayers) return { kind: { case: "shardOutput", value: create(ShardOutputSchema, { samples }) } };
            return { kind: { case: "shardOutput", value: { activations: { dtype: 1, shape: [BigInt(total), BigInt(HIDDEN)], data: new Uint8Array(total * HIDDEN * 4) } } } };
          }
          default:
            throw new Error(`unexpected ${kind.case}`);
        }
      },
    } as unknown as EngineClient,
  };
  return self;
}

const blocks = (layerStart: number, layerEnd: number) => ({ model: "m", layerStart, layerEnd, nLayers: 30, hiddenSize: HIDDEN, maxSeqLen: 256 }) as Loaded;

/** A shard worker's listener; `kill` drops its connections and stops listening (a SIGKILLed host). */
async function shard(id: string, start: number, end: number): Promise<StandIn & { url: string; kill: () => void }> {
  const loaded = blocks(start, end);
  const s = standIn(loaded);
  const server: Server = createServer((_, res) => res.end());
  const attached = attachShardServer(server, { token: TOKEN, workerId: id, engine: () => s.engine, shard: () => loaded, digest: DIGEST, log: () => {}, keepaliveMs: 0 });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  const kill = () => {
    attached.closeAll();
    server.close();
  };
  closers.push(kill);
  return Object.assign(s, { url: `http://127.0.0.1:${(server.address() as { port: number }).port}`, kill });
}

async function pipeline(depth: number) {
  const [mid, tailA, tailB] = await Promise.all([shard("mid", 10, 20), shard("tail-a", 20, 30), shard("tail-b", 20, 30)]);
  const route: ShardRoute = signShardRoute(
    {
      model: "m",
      digest: DIGEST,
      stages: [
        { start: 10, end: 20, hops: [{ id: "mid", url: mid.url }] },
        { start: 20, end: 30, hops: [{ id: "tail-a", url: tailA.url }, { id: "tail-b", url: tailB.url }] },
      ],
    },
    () => TOKEN,
    Date.now() + 60_000,
  )!;
  const own = blocks(0, 10);
  const headEngine = standIn(own);
  const paths = new ShardPaths(() => ({ model: "m", digest: DIGEST, layerStart: 10 }), 0);
  closers.push(() => paths.close());
  const head = new PipelineHead(() => headEngine.engine, () => own, undefined, { depth, paths, log: () => {} });
  return { head, routed: head.routed(route), mid, tailA, tailB, headEngine, paths };
}

/** A generation's token ids, or the error it ended with. */
async function collect(events: AsyncGenerator<Event>): Promise<{ ids: number[]; error?: string; finish?: FinishReason }> {
  const ids: number[] = [];
  try {
    for await (const ev of events) {
      if (ev.kind.case === "tokens") ids.push(...ev.kind.value.ids);
      if (ev.kind.case === "done") return { ids, finish: ev.kind.value.finishReason };
    }
    return { ids, error: "ended without Done" };
  } catch (err) {
    return { ids, error: (err as Error).message };
  }
}

const generate = (maxTokens: number) => ({ case: "generate" as const, value: create(GenerateSchema, { model: "m", input: { case: "prompt", value: "hi" }, maxTokens, temperature: 0, topP: 1, n: 1 }) });
/** What a stream of `max` tokens must read, rebuilt or not: the last shard's token after prompt + each token before it. */
const expected = (max: number) => Array.from({ length: max }, (_, i) => 1000 + PROMPT.length + i);

async function until(pred: () => boolean, what: string): Promise<void> {
  const end = Date.now() + 10_000;
  while (!pred()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Two streams, two steps in flight (one each): the first reaches tail-a and
 * is held there, the second is held in the middle shard (`atMid`), so the
 * connection they share keeps a reply pending. `more` adds holds before
 * the streams start.
 */
async function twoStepsHeld(more?: (p: Awaited<ReturnType<typeof pipeline>>) => void) {
  const p = await pipeline(2);
  const atTail = gate();
  const atMid = gate();
  let first: string | undefined;
  p.tailA.beforeStep = () => atTail.wait();
  p.mid.beforeStep = async (ids) => {
    first ??= ids[0];
    if (ids[0] !== first) await atMid.wait();
  };
  more?.(p);
  const a = collect(p.routed.call(generate(5), "a"));
  const b = collect(p.routed.call(generate(5), "b"));
  await Promise.all([atTail.hit, atMid.hit]);
  return { p, atMid, a, b };
}

describe("a head shard's streams over one path, when a shard after the middle one is lost", () => {
  it("a stream waiting for its next step is rebuilt too, not stepped over a connection where it was never opened", async () => {
    // One step in flight at a time: while the first stream's step is held at
    // the tail, the second (open everywhere) waits for its turn.
    const p = await pipeline(1);
    const held = gate();
    p.tailA.beforeStep = () => held.wait();
    const a = collect(p.routed.call(generate(5), "a"));
    const b = collect(p.routed.call(generate(5), "b"));
    await held.hit;
    await until(() => p.head.sequences === 2 && p.tailA.open.size === 2, "both streams open on tail-a");
    p.tailA.kill();
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra).toEqual({ ids: expected(5), finish: FinishReason.LENGTH });
    expect(rb).toEqual({ ids: expected(5), finish: FinishReason.LENGTH });
    expect(p.head.rebuilt.sequences).toBe(2);
    // Nothing left open anywhere once both finished (the rebuilt ones under their new ids).
    await until(() => p.mid.open.size === 0 && p.tailB.open.size === 0 && p.headEngine.open.size === 0, "every shard to free the sequences");
  });

  it("a stream rebuilt while the retired connection still has another's step in flight reopens under a fresh id on the middle shard, which still holds the old one", async () => {
    // Two steps in flight, one stream each. The first reaches the tail and is
    // held there; the second is held in the middle shard, so the retired
    // connection stays open (a reply pending) while the first is rebuilt.
    const { p, atMid, a, b } = await twoStepsHeld();
    const heldOnMid = [...p.mid.open];
    p.tailA.kill();
    // The first stream is rebuilt through tail-b while the middle shard still holds both old ids.
    await until(() => p.head.rebuilt.sequences >= 1 || p.head.sequences < 2, "the first stream's rebuild");
    expect(heldOnMid.every((id) => p.mid.open.has(id))).toBe(true);
    atMid.open();
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra).toEqual({ ids: expected(5), finish: FinishReason.LENGTH });
    expect(rb).toEqual({ ids: expected(5), finish: FinishReason.LENGTH });
    expect(p.head.rebuilt.sequences).toBe(2);
    await until(() => p.mid.open.size === 0 && p.tailB.open.size === 0 && p.headEngine.open.size === 0, "every shard to free the sequences");
  });

  it("a loss reported again while a stream is being rebuilt (another step over the old connection) does not rebuild it twice", async () => {
    // As above, and the first stream's reopening is held at tail-b until the
    // second stream's step, released at the middle shard, has come back LOST
    // over the old connection too.
    const reopening = gate();
    let reopens = 0; // reopenings that reached tail-b
    const { p, atMid, a, b } = await twoStepsHeld((p) => {
      p.tailB.beforeOpen = () => {
        reopens++;
        return reopening.wait();
      };
    });
    const old = [...p.mid.open];
    p.tailA.kill();
    await reopening.hit;
    atMid.open();
    // The second stream's step came back LOST: the retired connection had
    // nothing more in flight and closed, and the middle shard freed both old ids.
    await until(() => old.every((id) => !p.mid.open.has(id)), "the old connection to close");
    expect(reopens).toBe(1);
    expect(p.head.rebuilt.sequences).toBe(0);
    reopening.open();
    const [ra, rb] = await Promise.all([a, b]);
    expect(ra).toEqual({ ids: expected(5), finish: FinishReason.LENGTH });
    expect(rb).toEqual({ ids: expected(5), finish: FinishReason.LENGTH });
    expect(p.head.rebuilt.sequences).toBe(2);
  });

  it("a connection carrying a stream's steps is not swept as idle a minute after it was opened", async () => {
    const p = await pipeline(1);
    let steps = 0;
    p.tailA.beforeStep = async () => void steps++;
    const a = collect(p.routed.call(generate(200), "a"));
    await until(() => steps >= 3, "the stream's first steps");
    // A minute on, as the path's sweep sees it, with the stream still stepping.
    const later = Date.now() + 61_000;
    const now = vi.spyOn(Date, "now").mockImplementation(() => later);
    try {
      const seen = steps;
      await until(() => steps >= seen + 2, "more steps");
      (p.paths as unknown as { sweep(): void }).sweep();
    } finally {
      now.mockRestore();
    }
    expect(await a).toEqual({ ids: expected(200), finish: FinishReason.LENGTH });
    expect(p.head.rebuilt.sequences).toBe(0);
  });
});
