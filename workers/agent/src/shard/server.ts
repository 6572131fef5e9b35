// The receiving end of shard connections on a worker's listener: an upgrade
// to `switchyard-shard/1` with this worker's credential (a static `--next`)
// or a router's shard ticket for this worker with its leg of the route, then
// frames — OPEN / CLOSE applied here and passed on down the pipeline, STEP run
// through this shard's blocks and its output rows sent straight to the next
// shard (the static one, or the replica the leg chose), whose reply (the last
// shard's samples) comes back the same way. A next shard that is gone (or
// silent past the keepalive) is reported LOST, by name, so the head can
// rebuild around it; a connecting shard that falls silent is dropped, which
// frees what it opened here. A sequence (or hidden-states request) that
// carries a lease's fencing token for this worker is checked here, against
// this worker's own fencing state (the same guard its HTTP API uses), and
// refused as a whole worker refuses a stale token.
import { timingSafeEqual } from "node:crypto";
import type { IncomingMessage, Server } from "node:http";
import type { Socket } from "node:net";
import type { Duplex } from "node:stream";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { HiddenStatesResultSchema, HiddenStatesSchema, ShardCloseSchema, ShardOpenSchema, ShardOutputSchema, type Loaded, type ShardFence } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { EngineClient } from "../engine/client.ts";
import type { FencingGuard } from "../server/fencing.ts";
import { decodeShardLeg, verifyShardTicket, type ShardLeg } from "@switchyard/state";
import { decodeStep, encodeFrame, encodeStep, FrameKind, FrameReader, type Frame } from "./frame.ts";
import { shardHiddenStates } from "./hidden.ts";
import { DEFAULT_KEEPALIVE_MS, EXPECT_HEADERS, KEEPALIVE_HEADER, KEEPALIVE_RANGE, LazyShardLink, lostBody, PING_FRAME, refusedBody, ROUTE_HEADERS, SHARD_PATH, SHARD_PROTOCOL, ShardLostError, ShardRefusedError, watchSilence } from "./link.ts";

export interface ShardServerOptions {
  token: string;
  /** This worker's id: tickets are signed for it. */
  workerId: string;
  engine: () => EngineClient | undefined;
  /** The shard model this worker holds, once loaded. */
  shard: () => Loaded | undefined;
  /** The next shard (none on the last). */
  next?: LazyShardLink;
  /** SHA-256 of this shard's GGUF file (hex). */
  digest?: string;
  log: (msg: string, fields?: Record<string, unknown>) => void;
  /** Counts what this shard forwards: STEP frame bytes and the raw rows in them. */
  wire?: { frameBytes: number; rowBytes: number };
  /** The keepalive this shard asks of the shards it connects onward to along a route (ms; 0: none). */
  keepaliveMs?: number;
  /** This worker's lease fencing (the one its HTTP API checks): fences naming this worker are admitted by it. */
  fencing?: FencingGuard;
  /**
   * Counts one open sequence in the worker's work (its drain waits for it,
   * its heartbeat's inFlight shows it); the release when it is closed.
   */
  hold?: () => () => void;
}

/**
 * The sequences opened over one connection and not closed yet, each held in
 * the worker's count: a shard draining for a restart lets the streams
 * through it finish (it cut them before: its sequences come over shard
 * connections, which no HTTP request counted).
 */
class OpenedSeqs {
  private readonly seqs = new Map<string, { model: string; release: () => void }>();
  constructor(private readonly hold: (() => () => void) | undefined) {}

  add(seqId: string, model: string): void {
    if (!this.seqs.has(seqId)) this.seqs.set(seqId, { model, release: this.hold?.() ?? (() => {}) });
  }

  delete(seqId: string): void {
    const s = this.seqs.get(seqId);
    if (!s) return;
    this.seqs.delete(seqId);
    s.release();
  }

  /** seq id → model, of every sequence still open. */
  entries(): Array<[string, string]> {
    return [...this.seqs].map(([id, s]) => [id, s.model]);
  }
}

/**
 * A lease's fencing token for this worker, checked as its HTTP API checks
 * x-switchyard-fencing-token (signature for its id, older than the highest
 * seen: refused); a fence for another shard of the pipeline is that shard's.
 */
function admitFence(fence: ShardFence | undefined, opts: ShardServerOptions): void {
  if (!fence || fence.workerId !== opts.workerId || !opts.fencing) return;
  const verdict = opts.fencing.admit(fence.token.toString(), fence.signature || undefined);
  if (!verdict.ok) {
    opts.log("lease fencing token refused", { token: fence.token.toString(), code: verdict.code });
    throw new ShardRefusedError(verdict.status, verdict.code, verdict.message);
  }
}

function credentialOk(header: string | undefined, token: string): boolean {
  const a = Buffer.from(header ?? "");
  const b = Buffer.from(`Bearer ${token}`);
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Serves shard connections on `server`; `closeAll` ends them (an upgraded socket would keep server.close waiting). */
export function attachShardServer(server: Server, opts: ShardServerOptions): { closeAll(): void } {
  const open = new Set<Duplex>();
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    if (new URL(req.url ?? "/", "http://x").pathname !== SHARD_PATH || req.headers.upgrade !== SHARD_PROTOCOL) {
      socket.end("HTTP/1.1 404 Not Found\r\nconnection: close\r\ncontent-length: 0\r\n\r\n");
      return;
    }
    const refuse = (status: string, msg: string) =>
      socket.end(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-type: text/plain\r\ncontent-length: ${Buffer.byteLength(msg)}\r\n\r\n${msg}`);
    const routed = req.headers[ROUTE_HEADERS.leg] !== undefined;
    let next: LazyShardLink | undefined = opts.next;
    if (routed) {
      const r = routedNext(req, opts);
      if (!r.ok) return refuse(r.status, r.message);
      next = r.next;
    } else if (!credentialOk(req.headers.authorization, opts.token)) {
      return refuse("401 Unauthorized", "missing or wrong worker credential");
    }
    const mismatch = expectationMismatch(req, opts);
    if (mismatch) return refuse("409 Conflict", mismatch);
    // The sender's keepalive: both ends ping every quarter of it, so silence that long means it is gone.
    const keepalive = Number(req.headers[KEEPALIVE_HEADER]);
    const watched = Number.isInteger(keepalive) && keepalive >= KEEPALIVE_RANGE.min && keepalive <= KEEPALIVE_RANGE.max;
    socket.write(`HTTP/1.1 101 Switching Protocols\r\nupgrade: ${SHARD_PROTOCOL}\r\nconnection: Upgrade\r\n${watched ? `${KEEPALIVE_HEADER}: ${keepalive}\r\n` : ""}\r\n`);
    if (watched) {
      watchSilence(
        socket as Socket,
        keepalive,
        (silent) => {
          opts.log("shard connection silent: dropped", { silentMs: silent, keepaliveMs: keepalive });
          socket.destroy();
        },
        () => socket.write(PING_FRAME),
      );
    }
    open.add(socket);
    socket.on("close", () => open.delete(socket));
    // A routed connection's onward link is its own: it goes with it, once the sequences opened over it are freed.
    serveConnection(socket, head, { ...opts, ...(next ? { next } : {}) }, routed && next ? () => void next.close() : undefined);
  });
  return {
    closeAll() {
      for (const s of open) s.destroy();
    },
  };
}

/**
 * A routed connection: its ticket must be this worker's, under its own
 * credential, for this shard's blocks and model file, unexpired; the leg's
 * next stage (if any) is reached through the replica the sender chose, which
 * must be one the route names.
 */
function routedNext(req: IncomingMessage, opts: ShardServerOptions): { ok: true; next?: LazyShardLink } | { ok: false; status: string; message: string } {
  const h = (name: string) => (typeof req.headers[name] === "string" ? (req.headers[name] as string) : undefined);
  const decoded = decodeShardLeg(h(ROUTE_HEADERS.leg));
  if (!decoded.ok) return { ok: false, status: "400 Bad Request", message: `shard route: ${decoded.reason}` };
  const leg: ShardLeg = decoded.leg;
  const verdict = verifyShardTicket(opts.token, opts.workerId, leg, h(ROUTE_HEADERS.ticket));
  if (!verdict.ok) return { ok: false, status: "401 Unauthorized", message: verdict.reason };
  const shard = opts.shard();
  if (!shard) return { ok: false, status: "409 Conflict", message: "this worker holds no shard (warming, or a whole model)" };
  if (leg.model !== shard.model) return { ok: false, status: "409 Conflict", message: `this shard serves '${shard.model}', not '${leg.model}'` };
  if (opts.digest && leg.digest !== opts.digest) {
    return { ok: false, status: "409 Conflict", message: `model file differs: this shard's GGUF is sha256 ${opts.digest.slice(0, 16)}…, the route's ${leg.digest.slice(0, 16)}…` };
  }
  if (leg.start !== shard.layerStart || leg.end !== shard.layerEnd) {
    return { ok: false, status: "409 Conflict", message: `this shard holds blocks ${shard.layerStart}-${shard.layerEnd}, not ${leg.start}-${leg.end}` };
  }
  const stage = leg.rest[0];
  if (!stage) {
    if (shard.layerEnd !== shard.nLayers) return { ok: false, status: "409 Conflict", message: `the route ends at block ${shard.layerEnd} of ${shard.nLayers}` };
    return { ok: true };
  }
  const path = (h(ROUTE_HEADERS.path) ?? "").split(",").filter(Boolean);
  const hop = stage.hops.find((x) => x.id === path[0]);
  if (!hop) return { ok: false, status: "400 Bad Request", message: `the chosen next shard '${String(path[0]).slice(0, 64)}' is not one the route names for blocks ${stage.start}-${stage.end}` };
  const onward = { model: leg.model, digest: leg.digest, exp: leg.exp, start: stage.start, end: stage.end, rest: leg.rest.slice(1) };
  const expect = { model: leg.model, digest: leg.digest, layerStart: shard.layerEnd };
  return { ok: true, next: new LazyShardLink({ url: hop.url, id: hop.id, routed: { ticket: hop.ticket, leg: onward, path: path.slice(1) } }, () => expect, opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS) };
}

/** Why this shard can't follow the connecting one (another model or file, blocks that don't continue its own), if it can't. */
function expectationMismatch(req: IncomingMessage, opts: ShardServerOptions): string | undefined {
  const shard = opts.shard();
  if (!shard) return "this worker holds no shard (warming, or a whole model)";
  const h = (name: string) => req.headers[name] as string | undefined;
  const model = h(EXPECT_HEADERS.model);
  const digest = h(EXPECT_HEADERS.digest);
  const start = h(EXPECT_HEADERS.layerStart);
  if (model === undefined || digest === undefined || start === undefined) return "a shard connection must say the model, its GGUF digest and the block it continues from";
  if (model !== shard.model) return `this shard serves '${shard.model}', not '${model}'`;
  if (opts.digest && digest !== opts.digest) return `model file differs: this shard's GGUF is sha256 ${opts.digest.slice(0, 16)}…, the sender's ${digest.slice(0, 16)}…`;
  if (Number(start) !== shard.layerStart) return `this shard holds blocks ${shard.layerStart}-${shard.layerEnd}; the sender's end at block ${start}`;
  return undefined;
}

function serveConnection(socket: Duplex, head: Buffer, opts: ShardServerOptions, afterClose?: () => void): void {
  const reader = new FrameReader();
  // Frames run in arrival order: a sequence's steps must not overtake each other.
  let chain = Promise.resolve();
  // Sequences opened over this connection and not closed yet (seq id → model):
  // when the connection goes (the previous shard died or gave up), their KV
  // caches are freed here and down the pipeline instead of leaking.
  const opened = new OpenedSeqs(opts.hold);
  socket.on("close", () => {
    chain = chain.then(async () => {
      for (const [seqId, model] of opened.entries()) {
        const body = toBinary(ShardCloseSchema, create(ShardCloseSchema, { model, seqId }));
        await opts.engine()?.once({ case: "shardClose", value: create(ShardCloseSchema, { model, seqId }) }).catch(() => {});
        // Only over a live link: a next shard whose connection went (lost to a keepalive, closed) freed them itself.
        if (opts.next) await (await opts.next.existing())?.request(FrameKind.CLOSE, body).catch(() => {});
        opened.delete(seqId);
      }
      afterClose?.();
    });
  });
  const onData = (d: Buffer) => {
    let frames: Frame[];
    try {
      frames = reader.push(d);
    } catch (err) {
      // A frame we can't even delimit: say why, then drop the connection.
      socket.end(encodeFrame({ kind: FrameKind.ERROR, dtype: 0, tag: 0, body: Buffer.from((err as Error).message) }));
      return;
    }
    for (const f of frames) {
      // The peer's keepalive: hearing it was the point (watchSilence), nothing to run or answer.
      if (f.kind === FrameKind.PING) continue;
      // This shard's part runs in order; waiting for the next shard's reply
      // does not hold up the frames behind it (micro-batches overlap).
      const handled = chain.then(() => handle(f, opts, opened));
      chain = handled.then(
        () => {},
        () => {},
      );
      void handled.then(async (h) => {
        let reply: Frame;
        try {
          reply = await h.reply;
        } catch (err) {
          reply = errorFrame(f.tag, err);
        }
        if (!socket.destroyed) socket.write(encodeFrame({ ...reply, tag: f.tag }));
      }, (err: unknown) => {
        if (!socket.destroyed) socket.write(encodeFrame(errorFrame(f.tag, err)));
      });
    }
  };
  socket.on("data", onData);
  // The http server's sockets are half-open by default: a peer that hung up gets our end too, so "close" follows.
  socket.on("end", () => socket.end());
  socket.on("error", () => {});
  if (head.length) onData(head);
}

/** The reply to a frame that failed: LOST (naming the shard) when a shard further down is gone, REFUSED as a whole worker would refuse it, ERROR otherwise. */
function errorFrame(tag: number, err: unknown): Frame {
  if (err instanceof ShardLostError) return { kind: FrameKind.LOST, dtype: 0, tag, body: lostBody(err) };
  if (err instanceof ShardRefusedError) return { kind: FrameKind.REFUSED, dtype: 0, tag, body: refusedBody(err) };
  return { kind: FrameKind.ERROR, dtype: 0, tag, body: Buffer.from((err as Error).message) };
}

/**
 * This shard's part of a frame (in arrival order), and the reply to send:
 * for a step forwarded down the pipeline, the next shard's reply, awaited
 * outside the order so later frames need not wait for it.
 */
async function handle(f: Frame, opts: ShardServerOptions, opened: OpenedSeqs): Promise<{ reply: Promise<Frame> }> {
  const engine = opts.engine();
  const shard = opts.shard();
  if (!engine?.alive || !shard) throw new Error("this worker's shard is not loaded (warming or restarting)");
  const ok: Frame = { kind: FrameKind.OK, dtype: 0, tag: f.tag, body: new Uint8Array() };
  switch (f.kind) {
    case FrameKind.OPEN: {
      const open = fromBinary(ShardOpenSchema, f.body);
      if (open.model !== shard.model) throw new Error(`this shard serves '${shard.model}', not '${open.model}'`);
      admitFence(open.fence, opts);
      await engine.once({ case: "shardOpen", value: open });
      if (opts.next) {
        try {
          await (await opts.next.get()).request(FrameKind.OPEN, f.body);
        } catch (err) {
          await engine.once({ case: "shardClose", value: create(ShardCloseSchema, { model: open.model, seqId: open.seqId }) }).catch(() => {});
          throw err;
        }
      }
      opened.add(open.seqId, open.model);
      return { reply: Promise.resolve(ok) };
    }
    case FrameKind.CLOSE: {
      const close = fromBinary(ShardCloseSchema, f.body);
      await engine.once({ case: "shardClose", value: close });
      opened.delete(close.seqId);
      // The sequence is open down the pipeline only over a live link (a next shard frees what a closed one opened).
      if (opts.next) await (await opts.next.existing())?.request(FrameKind.CLOSE, f.body);
      return { reply: Promise.resolve(ok) };
    }
    case FrameKind.STEP: {
      const hidden = shard.hiddenSize;
      const step = decodeStep(f.body, f.dtype, hidden);
      const total = step.seqs.reduce((n, s) => n + s.rows, 0);
      const ev = await engine.once({
        case: "shardStep",
        value: {
          $typeName: "switchyard.engine.v1.ShardStep",
          model: shard.model,
          seqs: step.seqs.map((s) => ({ $typeName: "switchyard.engine.v1.ShardSeqRows", seqId: s.seqId, rows: s.rows, tokenIds: [] })),
          activations: { $typeName: "switchyard.engine.v1.Tensor", dtype: f.dtype, shape: [BigInt(total), BigInt(hidden)], data: step.rows },
          outDtype: f.dtype,
        },
      });
      if (ev.kind.case !== "shardOutput") throw new Error(`engine answered a shard step with ${ev.kind.case}`);
      const out = ev.kind.value;
      if (out.activations) {
        if (!opts.next) throw new Error(`this shard ends at block ${shard.layerEnd} of ${shard.nLayers} and has no next shard configured`);
        const link = await opts.next.get();
        const frame = encodeStep(step.seqs, hidden, out.activations.data);
        if (opts.wire) {
          opts.wire.rowBytes += out.activations.data.length;
          opts.wire.frameBytes += frame.length + 12;
        }
        return { reply: link.request(FrameKind.STEP, frame, f.dtype) };
      }
      return { reply: Promise.resolve({ kind: FrameKind.SAMPLES, dtype: 0, tag: f.tag, body: toBinary(ShardOutputSchema, out) }) };
    }
    case FrameKind.HIDDEN: {
      // Stateless: it keeps no order with the frames around it (its answer waits on the shards after this one).
      const req = fromBinary(HiddenStatesSchema, f.body);
      admitFence(req.fence, opts);
      const next = opts.next;
      const reply = shardHiddenStates(engine, shard, req, next ? () => next.get() : undefined).then(
        (r): Frame => ({ kind: FrameKind.HIDDEN_STATES, dtype: 0, tag: f.tag, body: toBinary(HiddenStatesResultSchema, r) }),
      );
      return { reply };
    }
    default:
      throw new Error(`unexpected frame kind ${f.kind}`);
  }
}
