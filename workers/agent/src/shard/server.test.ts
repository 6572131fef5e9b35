// Lease fencing on the shards after a split model's head: a sequence opened
// with a fence naming this worker is admitted by this worker's own guard
// (the one its HTTP API uses; with a state file, the highest token survives
// a restart), a stale one is refused with a REFUSED frame carrying the whole
// worker's status and code, a fence for another shard passes through, and a
// middle shard passes the tail's refusal back up unchanged. Real shard
// connections on loopback; the engine is a stand-in (only OPEN/CLOSE run).
import { createServer, type Server } from "node:http";
import { mkdtempSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { create, toBinary } from "@bufbuild/protobuf";
import { HiddenStatesSchema, ShardFenceSchema, ShardOpenSchema, type Loaded } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { fencingPublicKey, FencingSigner } from "@switchyard/state";
import { afterEach, describe, expect, it } from "vitest";
import type { EngineClient } from "../engine/client.ts";
import { FencingGuard } from "../server/fencing.ts";
import { FrameKind } from "./frame.ts";
import { LazyShardLink, ShardLink, ShardRefusedError } from "./link.ts";
import { attachShardServer } from "./server.ts";

const TOKEN = "shard-secret";
const DIGEST = "d".repeat(64);
const closers: (() => void)[] = [];
afterEach(() => {
  for (const c of closers.splice(0)) c();
});

/** An engine that opens and closes sequences (and records them); nothing else is asked of it here. */
function standInEngine(calls: string[]): EngineClient {
  return {
    alive: true,
    once: async (kind: { case: string; value: { seqId?: string } }) => {
      calls.push(`${kind.case}:${kind.value.seqId ?? ""}`);
      return { kind: { case: "shardOutput", value: {} } };
    },
  } as unknown as EngineClient;
}

/** A shard worker's listener for blocks [start, end) of 30; its url. */
async function shard(id: string, start: number, end: number, fencing: FencingGuard, calls: string[], next?: LazyShardLink): Promise<string> {
  const loaded = { model: "m", layerStart: start, layerEnd: end, nLayers: 30, hiddenSize: 8 } as Loaded;
  const server: Server = createServer((_, res) => res.end());
  const attached = attachShardServer(server, { token: TOKEN, workerId: id, engine: () => standInEngine(calls), shard: () => loaded, digest: DIGEST, log: () => {}, fencing, ...(next ? { next } : {}) });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  closers.push(() => {
    attached.closeAll();
    server.close();
  });
  return `http://127.0.0.1:${(server.address() as { port: number }).port}`;
}

async function connect(url: string, layerStart: number): Promise<ShardLink> {
  const link = await ShardLink.connect({ url, token: TOKEN }, { model: "m", digest: DIGEST, layerStart }, { keepaliveMs: 0 });
  closers.push(() => link.close());
  return link;
}

const SECRET = "routers-secret-key-0123456789";
const signer = new FencingSigner(SECRET);
const fenced = (seqId: string, workerId: string, token: number, signature = signer.sign(workerId, token)) =>
  toBinary(ShardOpenSchema, create(ShardOpenSchema, { model: "m", seqId, capacity: 16, maxTokens: 4, fence: create(ShardFenceSchema, { workerId, token: BigInt(token), signature }) }));

async function refusal(p: Promise<unknown>): Promise<ShardRefusedError> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ShardRefusedError);
  return err as ShardRefusedError;
}

describe("a shard admits the fences that name it with its own fencing state", () => {
  it("a newer lease's token, then the superseded one: refused by the tail as a whole worker refuses it (409 stale_fencing_token), and never opened on its engine", async () => {
    const calls: string[] = [];
    const guard = new FencingGuard(undefined, { workerId: "tail", publicKey: fencingPublicKey(SECRET) });
    const link = await connect(await shard("tail", 15, 30, guard, calls), 15);
    expect((await link.request(FrameKind.OPEN, fenced("new", "tail", 8))).kind).toBe(FrameKind.OK);
    expect(guard.highest).toBe(8);
    const stale = await refusal(link.request(FrameKind.OPEN, fenced("old", "tail", 7)));
    expect(stale).toMatchObject({ status: 409, code: "stale_fencing_token" });
    expect(stale.message).toMatch(/fencing token 7 is older than 8/);
    expect(calls).not.toContain("shardOpen:old");
    // Unsigned (or signed for another worker) cannot move the tail's highest token.
    expect(await refusal(link.request(FrameKind.OPEN, fenced("forged", "tail", 99, signer.sign("head", 99))))).toMatchObject({ status: 403, code: "unsigned_fencing_token" });
    expect(guard.highest).toBe(8);
    // A fence for another shard of the pipeline is that shard's to judge; none at all passes.
    expect((await link.request(FrameKind.OPEN, fenced("other", "tail-2", 1))).kind).toBe(FrameKind.OK);
    expect((await link.request(FrameKind.OPEN, toBinary(ShardOpenSchema, create(ShardOpenSchema, { model: "m", seqId: "plain", capacity: 16, maxTokens: 4 })))).kind).toBe(FrameKind.OK);
    // Hidden states are fenced the same way.
    const hidden = toBinary(HiddenStatesSchema, create(HiddenStatesSchema, { model: "m", layers: [20], fence: create(ShardFenceSchema, { workerId: "tail", token: 7n, signature: signer.sign("tail", 7) }) }));
    expect(await refusal(link.request(FrameKind.HIDDEN, hidden))).toMatchObject({ status: 409, code: "stale_fencing_token" });
  });

  it("the highest token persists where the whole worker's does: a restarted tail still refuses the superseded holder", async () => {
    const file = path.join(mkdtempSync(path.join(os.tmpdir(), "sy-shard-fence-")), "tail.fence");
    const first = await connect(await shard("tail", 15, 30, new FencingGuard(file), []), 15);
    expect((await first.request(FrameKind.OPEN, fenced("new", "tail", 12, ""))).kind).toBe(FrameKind.OK);
    for (const c of closers.splice(0)) c();
    const again = await connect(await shard("tail", 15, 30, new FencingGuard(file), []), 15);
    expect(await refusal(again.request(FrameKind.OPEN, fenced("old", "tail", 11, "")))).toMatchObject({ status: 409, code: "stale_fencing_token" });
  });

  it("a middle shard passes the tail's refusal back up unchanged, and frees what it opened for the sequence", async () => {
    const tailCalls: string[] = [];
    const midCalls: string[] = [];
    const tailUrl = await shard("tail", 20, 30, new FencingGuard(), tailCalls);
    const next = new LazyShardLink({ url: tailUrl, token: TOKEN }, () => ({ model: "m", digest: DIGEST, layerStart: 20 }), 0);
    closers.push(() => void next.close());
    const link = await connect(await shard("mid", 15, 20, new FencingGuard(), midCalls, next), 15);
    expect((await link.request(FrameKind.OPEN, fenced("new", "tail", 5, ""))).kind).toBe(FrameKind.OK);
    const stale = await refusal(link.request(FrameKind.OPEN, fenced("old", "tail", 4, "")));
    expect(stale).toMatchObject({ status: 409, code: "stale_fencing_token" });
    expect(midCalls).toEqual(["shardOpen:new", "shardOpen:old", "shardClose:old"]);
    expect(tailCalls).toEqual(["shardOpen:new"]);
  });
});
