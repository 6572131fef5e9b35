// One persistent, authenticated connection from this worker to the next
// shard: an HTTP/1.1 Upgrade to `switchyard-shard/1` on the next worker's own
// listener, presenting the same bearer credential routers use for that
// worker, then binary frames (frame.ts) both ways. Requests are tagged, so
// many may be in flight on the one connection.
import http from "node:http";
import https from "node:https";
import type { Socket } from "node:net";
import { encodeFrame, FrameKind, FrameReader, type Frame, type FrameKindValue } from "./frame.ts";

export const SHARD_PROTOCOL = "switchyard-shard/1";
export const SHARD_PATH = "/v1/shard/connect";

export interface ShardPeer {
  /** The next worker's base URL (as in its heartbeat). */
  url: string;
  /** The credential that worker accepts (the router→worker secret). */
  token: string;
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

export const EXPECT_HEADERS = { model: "x-switchyard-shard-model", digest: "x-switchyard-shard-digest", layerStart: "x-switchyard-shard-start" } as const;

export class ShardLinkError extends Error {
  override name = "ShardLinkError";
}

export class ShardLink {
  private tag = 0;
  private readonly pending = new Map<number, { resolve: (f: Frame) => void; reject: (e: Error) => void }>();
  private closed: Error | undefined;
  /** Bytes written, for wire-overhead measurements. */
  bytesSent = 0;

  private constructor(private readonly socket: Socket) {
    const reader = new FrameReader();
    socket.on("data", (d: Buffer) => {
      let frames: Frame[];
      try {
        frames = reader.push(d);
      } catch (err) {
        this.fail(err as Error);
        socket.destroy();
        return;
      }
      for (const f of frames) {
        const p = this.pending.get(f.tag);
        if (!p) continue;
        this.pending.delete(f.tag);
        if (f.kind === FrameKind.ERROR) p.reject(new ShardLinkError(Buffer.from(f.body).toString("utf8")));
        else p.resolve(f);
      }
    });
    socket.on("close", () => this.fail(new ShardLinkError("shard connection closed")));
    socket.on("error", (err) => this.fail(err));
  }

  static connect(peer: ShardPeer, expect?: ShardExpectation, timeoutMs = 5000): Promise<ShardLink> {
    const u = new URL(SHARD_PATH, peer.url);
    const mod = u.protocol === "https:" ? https : http;
    return new Promise((resolve, reject) => {
      const req = mod.request(u, {
        method: "GET",
        headers: {
          authorization: `Bearer ${peer.token}`,
          connection: "Upgrade",
          upgrade: SHARD_PROTOCOL,
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
        const link = new ShardLink(socket);
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

  private fail(err: Error): void {
    this.closed ??= err;
    for (const p of this.pending.values()) p.reject(this.closed);
    this.pending.clear();
  }
}

/** A link made on first use and remade after it breaks. */
export class LazyShardLink {
  private link: Promise<ShardLink> | undefined;

  constructor(
    readonly peer: ShardPeer,
    /** What this shard expects of the next (known once its own shard is loaded). */
    private readonly expect?: () => ShardExpectation | undefined,
  ) {}

  async get(): Promise<ShardLink> {
    const current = this.link;
    if (current) {
      const l = await current.catch(() => undefined);
      if (l?.alive) return l;
    }
    this.link = ShardLink.connect(this.peer, this.expect?.());
    return this.link;
  }

  async close(): Promise<void> {
    const l = await this.link?.catch(() => undefined);
    l?.close();
  }
}
