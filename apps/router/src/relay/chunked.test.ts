import { createServer, IncomingMessage, ServerResponse, type Server } from "node:http";
import { connect, Socket, type AddressInfo } from "node:net";
import { getHeapStatistics, setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { afterEach, describe, expect, it } from "vitest";
import { flattenHead, frame, pieceWriter } from "./chunked.ts";

let server: Server | undefined;
afterEach(async () => {
  if (!server) return;
  server.closeAllConnections();
  await new Promise((r) => server?.close(r));
  server = undefined;
});

/** A server whose every answer is `respond(res)`; its port. */
async function serve(respond: (res: ServerResponse) => Promise<void> | void): Promise<number> {
  server = createServer((req, res) => {
    req.resume();
    void respond(res);
  });
  await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
  return (server.address() as AddressInfo).port;
}

/** Sends `raw` on one connection and collects what comes back until `done(text)` or the connection ends. */
function exchange(port: number, raw: string, done: (text: string) => boolean): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = connect(port, "127.0.0.1");
    let got = Buffer.alloc(0);
    s.on("data", (d: Buffer) => {
      got = Buffer.concat([got, d]);
      if (done(got.toString("latin1"))) {
        s.destroy();
        resolve(got.toString("utf8"));
      }
    });
    s.on("end", () => resolve(got.toString("utf8")));
    s.on("error", reject);
    s.write(raw);
  });
}

const get = (path: string, version = "1.1") => `GET ${path} HTTP/${version}\r\nhost: x\r\n\r\n`;

/** An HTTP/1.1 chunked body decoded; throws on bad framing. */
function unchunk(body: string): string[] {
  const buf = Buffer.from(body, "utf8");
  const pieces: string[] = [];
  let at = 0;
  for (;;) {
    const eol = buf.indexOf("\r\n", at);
    const size = parseInt(buf.toString("latin1", at, eol), 16);
    if (!Number.isFinite(size)) throw new Error(`bad chunk size at ${at}`);
    at = eol + 2;
    if (size === 0) return pieces;
    pieces.push(buf.toString("utf8", at, at + size));
    at += size;
    if (buf.toString("latin1", at, at + 2) !== "\r\n") throw new Error(`chunk not ended by CRLF at ${at}`);
    at += 2;
  }
}

describe("pieceWriter", () => {
  it("sends the head with the first piece, then each piece as one chunk of its own: the same bytes as res.write, and the connection is kept", async () => {
    const pieces = ["data: a\n\n", Buffer.from("data: bé\n\n"), new Uint8Array(0), "", "data: ü€\n\n"];
    const expected = ["data: a\n\n", "data: bé\n\n", "data: ü€\n\n"];
    // Through res.write, by request path: only the first piece, unless the answer waits behind a pipelined one.
    const writes = new Map<string, number>();
    server = createServer((req, res) => {
      req.resume();
      res.writeHead(200, { "content-type": "text/plain; charset=utf-8" });
      const w = res.write.bind(res);
      res.write = ((...a: Parameters<typeof w>) => (writes.set(req.url!, (writes.get(req.url!) ?? 0) + 1), w(...a))) as typeof res.write;
      const put = pieceWriter(res);
      // The second of two pipelined requests answers at once too: its socket is the first one's until that ends.
      for (const p of pieces) expect(put(p)).toBe(true);
      res.end();
    });
    await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
    const port = (server.address() as AddressInfo).port;
    const answers = (t: string) => t.split("HTTP/1.1 200 OK\r\n").slice(1).map((a) => a.slice(a.indexOf("\r\n\r\n") + 4));
    const heads = (t: string) => t.split("HTTP/1.1 200 OK\r\n").slice(1).map((a) => a.slice(0, a.indexOf("\r\n\r\n")).toLowerCase());
    const twoAnswers = (t: string) => t.split("0\r\n\r\n").length === 3;
    const text = await exchange(port, get("/one") + get("/two"), twoAnswers);
    // Both on one connection: the first ended properly, and the second, pipelined behind it, went through res.write whole.
    expect(answers(text).map(unchunk)).toEqual([expected, expected]);
    for (const h of heads(text)) expect(h).toContain("transfer-encoding: chunked");
    expect(Object.fromEntries(writes)).toEqual({ "/one": 1, "/two": 3 });
  });

  it("writes plain bytes to an HTTP/1.0 client (no chunking there) through res.write", async () => {
    const port = await serve((res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      const put = pieceWriter(res);
      put("one ");
      put(Buffer.from("two "));
      put("three");
      res.end();
    });
    const text = await exchange(port, get("/", "1.0"), () => false);
    const body = text.slice(text.indexOf("\r\n\r\n") + 4);
    expect(text.toLowerCase()).not.toContain("transfer-encoding");
    expect(body).toBe("one two three");
  });

  it("says when the client pushes back, and every byte arrives once it reads", async () => {
    const piece = Buffer.alloc(256 * 1024, 0x61);
    let pushedBack = 0;
    const port = await serve(async (res) => {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      const put = pieceWriter(res);
      for (let i = 0; i < 32; i++) {
        const w = put(i % 2 ? piece : piece.toString("latin1"));
        if (w !== true) {
          pushedBack++;
          await w;
        }
      }
      res.end();
    });
    const text = await new Promise<string>((resolve, reject) => {
      const s = connect(port, "127.0.0.1");
      const parts: Buffer[] = [];
      s.pause();
      // A slow reader: the server's socket buffer fills before it reads anything.
      setTimeout(() => s.resume(), 300);
      s.on("data", (d: Buffer) => {
        parts.push(d);
        if (Buffer.concat(parts).toString("latin1").endsWith("0\r\n\r\n")) {
          s.destroy();
          resolve(Buffer.concat(parts).toString("latin1"));
        }
      });
      s.on("error", reject);
      s.write(get("/"));
    });
    const pieces = unchunk(text.slice(text.indexOf("\r\n\r\n") + 4));
    expect(pieces).toHaveLength(32);
    expect(pieces.every((p) => p.length === piece.length && /^a+$/.test(p))).toBe(true);
    expect(pushedBack).toBeGreaterThan(0);
  });

  it("settles a pushed-back write when the client goes away", async () => {
    let settled: Promise<string> | undefined;
    const port = await serve((res) => {
      res.writeHead(200, { "content-type": "application/octet-stream" });
      const put = pieceWriter(res);
      put("first");
      let w: true | Promise<void> = true;
      for (let i = 0; i < 64 && w === true; i++) w = put(Buffer.alloc(1024 * 1024));
      settled = w === true ? Promise.resolve("never pushed back") : w.then(() => "settled");
    });
    const s = connect(port, "127.0.0.1");
    s.pause();
    s.write(get("/"));
    await new Promise((r) => setTimeout(r, 300));
    s.destroy();
    expect(await settled).toBe("settled");
  });
});

describe("frame", () => {
  it("writes the size line in lower-case hex, the data and CRLF, at every digit count", () => {
    for (const n of [1, 9, 10, 15, 16, 17, 255, 256, 4095, 4096, 65_535, 65_536, 1_048_575, 1_048_576, 16_777_216]) {
      const piece = Buffer.alloc(n, 0x61);
      expect(frame(piece).equals(Buffer.concat([Buffer.from(`${n.toString(16)}\r\n`, "latin1"), piece, Buffer.from("\r\n")])), `${n} bytes`).toBe(true);
    }
  });
});

describe("flattenHead", () => {
  // A stream's head as the relay writes it (relayStream's headers), a request id apiece.
  const heads = (n: number, flatten: boolean): ServerResponse[] =>
    Array.from({ length: n }, (_, i) => {
      const res = new ServerResponse(new IncomingMessage(new Socket()));
      res.writeHead(200, {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        connection: "keep-alive",
        "x-request-id": `req_${i.toString(16).padStart(32, "0")}`,
        "x-switchyard-backend": "worker:w1",
      });
      if (flatten) flattenHead(res);
      return res;
    });
  const headOf = (res: ServerResponse) => (res as ServerResponse & { _header: string })._header;

  it("leaves the head's text as it was", () => {
    const [plain] = heads(1, false);
    const [flat] = heads(1, true);
    expect(headOf(flat!)).toBe(headOf(plain!));
    expect(headOf(flat!)).toMatch(/^HTTP\/1\.1 200 OK\r\ncontent-type: text\/event-stream; charset=utf-8\r\n[\s\S]*x-request-id: req_0{32}\r\n[\s\S]*\r\n\r\n$/);
  });

  it("lets go of the string tree Node built the head from: a held response keeps less of it alive", () => {
    // A full collection on demand (vitest's workers run without --expose-gc).
    setFlagsFromString("--expose-gc");
    const gc = runInNewContext("gc") as () => void;
    const n = 20_000;
    const heldBy = (flatten: boolean) => {
      gc();
      const before = getHeapStatistics().used_heap_size;
      const held = heads(n, flatten);
      gc();
      const after = getHeapStatistics().used_heap_size;
      expect(held).toHaveLength(n);
      return (after - before) / n;
    };
    const plain = heldBy(false);
    const flat = heldBy(true);
    // ~0.8 KB of cons strings per head is the whole difference (a response holds ~1.5 KB besides).
    expect(plain - flat, `bytes per held response: ${plain.toFixed(0)} as built, ${flat.toFixed(0)} flattened`).toBeGreaterThan(400);
  });
});
