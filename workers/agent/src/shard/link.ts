// One persistent, authenticated connection from this worker to the next
// shard: an HTTP/1.1 Upgrade to `switchyard-shard/1` on the next worker's own
// listener, then binary frames (frame.ts) both ways. It presents either the
// bearer credential routers use for that worker (a static `--next`), or a
// router's shard ticket for that worker with its leg of the route
// (registry/shard-route.ts). Requests are tagged, so many may be in flight on
// the one connection. A keepalive (PINGs both ways) finds a peer that vanished
// without closing the connection (a host gone, a partition, a frozen
// process): it counts as lost, like one whose connection closed.
import http from "node:http";
import https from "node:https";
import type { Socket } from "node:net";
import { encodeShardRoute, type ShardLeg } from "@switchyard/state";
import { encodeFrame, FrameKind, FrameReader, type Frame, type FrameKindValue } from "./frame.ts";

export const SHARD_PROTOCOL = "switchyard-shard/1";
export const SHARD_PATH = "/v1/shard/connect";

export interface ShardPeer {
  /** The next worker's base URL (as in its heartbeat). */
  url: string;
  /** The credential that worker accepts (the router→worker secret): a static `--next`. */
  token?: string;
  /** Its worker id (a routed peer): named when it is lost. */
  id?: string;
  /** A routed peer: the router's ticket for it, its leg of the route, and the replica chosen for each stage after it. */
  routed?: { ticket: string; leg: ShardLeg; path: string[] };
}

/**
 * What the connecting shard expects of the next one, checked by it before
 * the upgrade: the same model name and GGUF file (SHA-256), and blocks
 * starting where the sender's end — so a pipeline never mixes model files or
 * skips or repeats blocks (a wrong answer), it is refused (409).
 */
export interface ShardExpectation {
  model: string;
  digest: string;
  layerStart: number;
}

/**
 * The keepalive the connecting shard asks for, in ms: each end sends a PING
 * every quarter of it, and takes the other for gone when it has heard
 * nothing (no frame, no byte) for that long. A PING is never answered: each
 * end hears the other's own, so one end's large frame going out does not
 * hide the other's liveness (its PINGs come the other way). The accepting
 * shard echoes the header in its 101 when it keeps the keepalive (an older
 * one would not, and is not held to it).
 */
export const KEEPALIVE_HEADER = "x-switchyard-shard-keepalive";
export const DEFAULT_KEEPALIVE_MS = 5000;
/** The keepalives a shard accepts from a peer (ms). */
export const KEEPALIVE_RANGE = { min: 200, max: 600_000 } as const;

export const EXPECT_HEADERS = { model: "x-switchyard-shard-model", digest: "x-switchyard-shard-digest", layerStart: "x-switchyard-shard-start" } as const;
/** A routed connection's headers: the leg (base64url JSON), the ticket, and the replica ids chosen after it. */
export const ROUTE_HEADERS = { leg: "x-switchyard-shard-leg", ticket: "x-switchyard-shard-ticket", path: "x-switchyard-shard-path" } as const;

export class ShardLinkError extends Error {
  override name = "ShardLinkError";
}

/** A shard of the pipeline is gone: its connection closed, or it refused one. `worker` names it (its id, or URL). */
export class ShardLostError extends ShardLinkError {
  override name = "ShardLostError";
  constructor(
    readonly worker: string,
    message: string,
  ) {
    super(message);
  }
}

/**
 * A connection the head retired because a shard on its path was lost (found
 * by another sequence over it): no verdict on the peer at its other end —
 * the sequences over it are rebuilt around the loss already named, without
 * taking the healthy shards before it for lost too.
 */
export class ShardRetiredError extends ShardLinkError {
  override name = "ShardRetiredError";
  constructor(
    readonly peer: string,
    readonly lost: string,
  ) {
    super(`the connection to shard ${peer} was retired: shard ${lost} on its path was lost`);
  }
}

/**
 * A shard down the pipeline refused a frame the way a whole worker refuses a
 * request (a 4xx with its code, as errorJson answers): not a lost shard —
 * the head passes it on to the client instead of rebuilding around it.
 */
export class ShardRefusedError extends ShardLinkError {
  override name = "ShardRefusedError";
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The REFUSED frame body for an error (passed back up unchanged by the shards between). */
export function refusedBody(err: ShardRefusedError): Buffer {
  return Buffer.from(`${err.status} ${err.code}\n${err.message}`, "utf8");
}

/** A REFUSED frame's error; a body that is not a 4xx status and a code is a plain link error (nothing a peer sends becomes a status unchecked). */
export function refusedError(body: Uint8Array): ShardLinkError {
  const text = Buffer.from(body).toString("utf8");
  const m = /^(4\d\d) ([a-z_]{1,64})\n/.exec(text);
  if (!m) return new ShardLinkError(`a shard refused the frame: ${text.slice(0, 200)}`);
  return new ShardRefusedError(Number(m[1]), m[2]!, text.slice(m[0].length, m[0].length + 1000));
}

/** The LOST frame body for an error (a lost shard further down keeps its name). */
export function lostBody(err: ShardLostError): Buffer {
  return Buffer.from(`${err.worker}\n${err.message}`, "utf8");
}

/**
 * Calls `onSilent` once when no byte came in on `socket` for `timeoutMs`;
 * `ping` runs every quarter of it. A verdict waits for the I/O this process
 * had not read yet (an event loop that was busy is not a silent peer), and a
 * check that itself ran late starts the window over. Returns the function
 * that stops watching (also done when the socket closes).
 */
export function watchSilence(socket: Socket, timeoutMs: number, onSilent: (silentMs: number) => void, ping: () => void): () => void {
  let heardAt = Date.now();
  const every = Math.max(50, Math.floor(timeoutMs / 4));
  let tickAt = Date.now();
  const heard = () => (heardAt = Date.now());
  socket.on("data", heard);
  const timer = setInterval(() => {
    const now = Date.now();
    // This process was held up (not the peer): the peer gets a fresh window.
    if (now - tickAt > 2 * every) heardAt = now;
    tickAt = now;
    if (now - heardAt >= timeoutMs) {
      // After the poll phase: bytes already in the kernel get read (and counted) first.
      setImmediate(() => {
        const silent = Date.now() - heardAt;
        if (silent < timeoutMs || socket.destroyed) return;
        stop();
        onSilent(silent);
      });
      return;
    }
    if (!socket.destroyed) ping();
  }, every);
  timer.unref();
  const stop = () => {
    clearInterval(timer);
    socket.off("data", heard);
  };
  socket.once("close", stop);
  return stop;
}

/** The keepalive frame (the same bytes every time). */
export const PING_FRAME = encodeFrame({ kind: FrameKind.PING, dtype: 0, tag: 0, body: new Uint8Array() });

export class ShardLink {
  private tag = 0;
  private readonly pending = new Map<number, { resolve: (f: Frame) => void; reject: (e: Error) => void }>();
  private closed: Error | undefined;
  /** Bytes written and read (frames, after the upgrade), for wire-overhead measurements. */
  bytesSent = 0;
  bytesReceived = 0;

  private constructor(
    private readonly socket: Socket,
    private readonly peerName: string,
  ) {
    const reader = new FrameReader();
    socket.on("data", (d: Buffer) => {
      this.bytesReceived += d.length;
      let frames: Frame[];
      try {
        frames = reader.push(d);
      } catch (err) {
        this.fail(err as Error);
        socket.destroy();
        return;
      }
      for (const f of frames) {
        if (f.kind === FrameKind.PING) continue;
        const p = this.pending.get(f.tag);
        if (!p) continue;
        this.pending.delete(f.tag);
        if (f.kind === FrameKind.ERROR) p.reject(new ShardLinkError(Buffer.from(f.body).toString("utf8")));
        else if (f.kind === FrameKind.REFUSED) p.reject(refusedError(f.body));
        else if (f.kind === FrameKind.LOST) {
          const text = Buffer.from(f.body).toString("utf8");
          const nl = text.indexOf("\n");
          p.reject(new ShardLostError(nl > 0 ? text.slice(0, nl).slice(0, 200) : "?", nl > 0 ? text.slice(nl + 1) : text));
        } else p.resolve(f);
      }
      if (this.closing && this.pending.size === 0) this.close();
    });
    socket.on("close", () => this.fail(new ShardLostError(peerName, `shard ${peerName}: connection closed`)));
    socket.on("error", (err) => this.fail(new ShardLostError(peerName, `shard ${peerName}: ${err.message}`)));
  }

  /** Pings the peer and takes it for gone after `timeoutMs` of silence (it said it keeps the keepalive). */
  private keepalive(timeoutMs: number): void {
    watchSilence(
      this.socket,
      timeoutMs,
      (silent) => {
        this.fail(new ShardLostError(this.peerName, `shard ${this.peerName}: silent for ${silent} ms (keepalive ${timeoutMs} ms), taken for gone`));
        this.socket.destroy();
      },
      () => {
        this.bytesSent += PING_FRAME.length;
        this.socket.write(PING_FRAME);
      },
    );
  }

  /** Opens a link to `peer`; `keepaliveMs` (0: none) is the silence after which it is taken for gone. */
  static connect(peer: ShardPeer, expect?: ShardExpectation, opts: { timeoutMs?: number; keepaliveMs?: number } = {}): Promise<ShardLink> {
    const timeoutMs = opts.timeoutMs ?? 5000;
    const keepaliveMs = opts.keepaliveMs ?? DEFAULT_KEEPALIVE_MS;
    const u = new URL(SHARD_PATH, peer.url);
    const mod = u.protocol === "https:" ? https : http;
    const name = peer.id ?? peer.url;
    return new Promise<ShardLink>((resolve, reject) => {
      const req = mod.request(u, {
        method: "GET",
        headers: {
          ...(peer.token !== undefined ? { authorization: `Bearer ${peer.token}` } : {}),
          ...(peer.routed
            ? { [ROUTE_HEADERS.leg]: encodeShardRoute(peer.routed.leg), [ROUTE_HEADERS.ticket]: peer.routed.ticket, [ROUTE_HEADERS.path]: peer.routed.path.join(",") }
            : {}),
          connection: "Upgrade",
          upgrade: SHARD_PROTOCOL,
          ...(keepaliveMs > 0 ? { [KEEPALIVE_HEADER]: String(keepaliveMs) } : {}),
          ...(expect
            ? { [EXPECT_HEADERS.model]: expect.model, [EXPECT_HEADERS.digest]: expect.digest, [EXPECT_HEADERS.layerStart]: String(expect.layerStart) }
            : {}),
        },
        timeout: timeoutMs,
      });
      req.on("upgrade", (res, socket, head) => {
        if (res.headers.upgrade !== SHARD_PROTOCOL) {
          socket.destroy();
          reject(new ShardLinkError(`shard ${peer.url} answered with upgrade ${String(res.headers.upgrade)}`));
          return;
        }
        socket.setNoDelay(true);
        const link = new ShardLink(socket, name);
        // Only a peer that said it keeps the keepalive is held to it.
        if (keepaliveMs > 0 && Number(res.headers[KEEPALIVE_HEADER]) === keepaliveMs) link.keepalive(keepaliveMs);
        if (head.length) socket.unshift(head);
        resolve(link);
      });
      req.on("response", (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (text = (text + c).slice(0, 500)));
        res.on("end", () => reject(new ShardLinkError(`shard ${peer.url} refused the connection: ${res.statusCode} ${text}`)));
      });
      req.on("timeout", () => req.destroy(new ShardLinkError(`shard ${peer.url}: no answer in ${timeoutMs} ms`)));
      req.on("error", reject);
      req.end();
    }).catch((err: Error) => {
      // Unreachable or refusing: as good as gone, for whoever rebuilds the pipeline.
      throw err instanceof ShardLostError ? err : new ShardLostError(name, err.message);
    });
  }

  get alive(): boolean {
    return this.closed === undefined;
  }

  /** Sends one frame and resolves with its reply (an ERROR reply rejects). */
  request(kind: FrameKindValue, body: Uint8Array, dtype = 0): Promise<Frame> {
    if (this.closed) return Promise.reject(this.closed);
    const tag = (this.tag = (this.tag + 1) >>> 0);
    return new Promise((resolve, reject) => {
      this.pending.set(tag, { resolve, reject });
      const bytes = encodeFrame({ kind, dtype, tag, body });
      this.bytesSent += bytes.length;
      this.socket.write(bytes);
    });
  }

  close(): void {
    this.socket.end();
    this.socket.destroy();
  }

  private closing = false;

  /** Closes once the replies in flight are in (a link replaced by another). */
  closeWhenIdle(): void {
    this.closing = true;
    if (this.pending.size === 0) this.close();
  }

  /**
   * A shard on this link's path was lost (`lost` names it): new frames are
   * refused with ShardRetiredError at once, the replies in flight still come
   * in (or fail with that error if the connection goes first), then it
   * closes — which frees, on every shard after, what was opened over it.
   */
  retire(lost: string): void {
    this.closed ??= new ShardRetiredError(this.peerName, lost);
    this.closeWhenIdle();
  }

  get inFlight(): number {
    return this.pending.size;
  }

  private fail(err: Error): void {
    this.closed ??= err;
    for (const p of this.pending.values()) p.reject(this.closed);
    this.pending.clear();
  }
}

/** A link made on first use and remade after it breaks. */
export class LazyShardLink {
  private link: Promise<ShardLink> | undefined;
  /** Bytes of the links this one replaced. */
  private readonly retired = { sent: 0, received: 0 };
  private current: ShardLink | undefined;

  constructor(
    readonly peer: ShardPeer,
    /** What this shard expects of the next (known once its own shard is loaded). */
    private readonly expect?: () => ShardExpectation | undefined,
    /** The keepalive asked of the next shard (ms; 0: none). */
    private readonly keepaliveMs = DEFAULT_KEEPALIVE_MS,
  ) {}

  async get(): Promise<ShardLink> {
    const current = this.link;
    if (current) {
      const l = await current.catch(() => undefined);
      if (l?.alive) return l;
    }
    if (this.current) {
      this.retired.sent += this.current.bytesSent;
      this.retired.received += this.current.bytesReceived;
      this.current = undefined;
    }
    this.link = ShardLink.connect(this.peer, this.expect?.(), { keepaliveMs: this.keepaliveMs });
    this.link.then((l) => (this.current = l), () => {});
    return this.link;
  }

  /**
   * The link if one is open (or being opened) and alive — never a new
   * connection. For CLOSE frames: a peer whose connection is gone already
   * freed what was opened over it, so reconnecting to tell it (to a host
   * that may be unreachable: the connect timeout) is wasted.
   */
  /** Whether `link` is this one's current connection (not one it replaced). */
  holds(link: ShardLink): boolean {
    return this.current === link;
  }

  async existing(): Promise<ShardLink | undefined> {
    const l = await this.link?.catch(() => undefined);
    return l?.alive ? l : undefined;
  }

  /** Frame bytes sent to and received from the next shard, over every connection made. */
  bytes(): { sent: number; received: number } {
    return { sent: this.retired.sent + (this.current?.bytesSent ?? 0), received: this.retired.received + (this.current?.bytesReceived ?? 0) };
  }

  async close(): Promise<void> {
    const l = await this.link?.catch(() => undefined);
    l?.close();
  }
}
