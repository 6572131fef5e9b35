import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { Abort } from "../abort.ts";
import type { SseBatch, SseBatchReader } from "../relay/sse.ts";
import { dispatchSse, dispatchWhole } from "./answer-dispatch.ts";
import { ERROR_BODY_MAX_BYTES, UpstreamTooLarge } from "./transport.ts";
import { Pool } from "./undici.ts";

let server: Server | undefined;
let pool: Pool | undefined;
afterEach(async () => {
  await pool?.destroy();
  server?.closeAllConnections();
  await new Promise((r) => server?.close(r));
  server = pool = undefined;
});

async function serve(handler: (req: IncomingMessage, res: ServerResponse) => void): Promise<Pool> {
  server = createServer(handler);
  await new Promise<void>((r) => server!.listen(0, "127.0.0.1", r));
  pool = new Pool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections: 4, headersTimeout: 0, bodyTimeout: 0 });
  return pool;
}

const sse = (res: ServerResponse) => res.writeHead(200, { "content-type": "text/event-stream" });
const open = (p: Pool, signal = new Abort(), mapError?: (err: unknown) => unknown) =>
  dispatchSse(p, { path: "/v1/chat/completions", method: "POST", headers: { "content-type": "application/json" }, body: "{}" }, signal, { label: "worker w1", ...(mapError ? { mapError } : {}) });

async function readAll(batches: SseBatchReader): Promise<string[]> {
  const out: string[] = [];
  for (;;) {
    const r: IteratorResult<SseBatch> = await batches.next();
    if (r.done) return out;
    for (const e of r.value.events) out.push(e.data);
  }
}

describe("dispatchSse", () => {
  it("gives a 2xx answer's events batch by batch, as they come, and ends with the body", async () => {
    let release!: () => void;
    const later = new Promise<void>((r) => (release = r));
    const p = await serve((req, res) => {
      req.resume();
      sse(res);
      res.write('data: {"a":1}\n\ndata: {"a":2}\n\n');
      void later.then(() => res.end("data: [DONE]\n\n"));
    });
    const answer = await open(p);
    expect(answer.statusCode).toBe(200);
    const first = await answer.batches.next();
    // The first chunk's events arrived before the body ended.
    expect(first.done).toBe(false);
    expect((first.value as SseBatch).events.map((e) => e.data)).toEqual(['{"a":1}', '{"a":2}']);
    release();
    expect(await readAll(answer.batches)).toEqual(["[DONE]"]);
  });

  it("stops reading the socket while its queue is full, and every event arrives once the relay reads on", async () => {
    const n = 2000;
    let wrote = 0;
    const p = await serve((req, res) => {
      req.resume();
      sse(res);
      // One event per write, each its own chunk as far as the socket allows.
      const pad = "x".repeat(16 * 1024);
      const more = () => {
        while (wrote < n) {
          wrote++;
          if (!res.write(`data: {"i":${wrote},"pad":"${pad}"}\n\n`)) return void res.once("drain", more);
        }
        res.end("data: [DONE]\n\n");
      };
      more();
    });
    const answer = await open(p);
    // Not reading for a while: the server is held back (its writes wait for drain), not the router's memory.
    await new Promise((r) => setTimeout(r, 300));
    expect(wrote).toBeLessThan(n);
    const events = await readAll(answer.batches);
    expect(events).toHaveLength(n + 1);
    expect(events.slice(0, n).map((e) => (JSON.parse(e) as { i: number }).i)).toEqual(Array.from({ length: n }, (_, i) => i + 1));
  });

  it("reads a non-2xx answer's body as its error text, at most ERROR_BODY_MAX_BYTES of it", async () => {
    const p = await serve((req, res) => {
      req.resume();
      res.writeHead(req.url === "/big" ? 500 : 429, { "content-type": "application/json" });
      res.end(req.url === "/big" ? "e".repeat(ERROR_BODY_MAX_BYTES * 3) : '{"error":{"message":"busy"}}');
    });
    const busy = await open(p);
    expect(busy.statusCode).toBe(429);
    expect(await busy.errorText()).toBe('{"error":{"message":"busy"}}');
    const big = await dispatchSse(p, { path: "/big", method: "POST", headers: {}, body: "{}" }, new Abort(), {});
    expect(big.statusCode).toBe(500);
    expect(await big.errorText()).toBe("e".repeat(ERROR_BODY_MAX_BYTES));
  });

  it("fails the reader, mapped, when the signal aborts mid-stream; the signal's listener is gone after", async () => {
    const p = await serve((req, res) => {
      req.resume();
      sse(res);
      res.write('data: {"a":1}\n\n');
    });
    const signal = new Abort();
    const answer = await open(p, signal, (err) => ({ mapped: err }));
    await answer.batches.next();
    expect(signal.listenerCount("abort")).toBe(1);
    const reason = new Error("deadline");
    signal.abort(reason);
    await expect(answer.batches.next()).rejects.toEqual({ mapped: reason });
    expect(signal.listenerCount("abort")).toBe(0);
  });

  it("rejects before the head with the abort's reason when the signal aborted first", async () => {
    const p = await serve((req, res) => {
      req.resume();
      sse(res);
      res.end("data: [DONE]\n\n");
    });
    const signal = new Abort();
    const reason = new Error("client went away");
    signal.abort(reason);
    await expect(open(p, signal)).rejects.toBe(reason);
  });

  it("fails the reader when the upstream's connection drops mid-stream", async () => {
    const p = await serve((req, res) => {
      req.resume();
      sse(res);
      res.write('data: {"a":1}\n\n');
      setTimeout(() => res.socket?.destroy(), 50);
    });
    const answer = await open(p);
    await answer.batches.next();
    await expect(answer.batches.next()).rejects.toThrow();
  });

  it("closes the upstream request when the relay stops reading (return)", async () => {
    let closed!: () => void;
    const upstreamClosed = new Promise<void>((r) => (closed = r));
    const p = await serve((req, res) => {
      req.resume();
      sse(res);
      res.write('data: {"a":1}\n\n');
      res.on("close", () => closed());
    });
    const answer = await open(p);
    await answer.batches.next();
    expect(await answer.batches.return()).toEqual({ value: undefined, done: true });
    await upstreamClosed;
  });
});

describe("dispatchWhole", () => {
  const whole = (p: Pool, path: string, maxBytes = 1024, signal = new Abort()) =>
    dispatchWhole(p, { path, method: "POST", headers: { "content-type": "application/json" }, body: "{}" }, signal, { maxBytes, what: "worker w1's answer" });

  it("gathers a 2xx answer's chunks into its bytes, and leaves the connection for the next request", async () => {
    const sockets = new Set<unknown>();
    const p = await serve((req, res) => {
      req.resume();
      sockets.add(req.socket);
      res.writeHead(200, { "content-type": "application/json" });
      res.write('{"id":"a",');
      setTimeout(() => res.end('"usage":{"prompt_tokens":1}}'), 10);
    });
    for (let i = 0; i < 6; i++) {
      const a = await whole(p, "/v1/chat/completions");
      expect(a.statusCode).toBe(200);
      expect((await a.body).toString("utf8")).toBe('{"id":"a","usage":{"prompt_tokens":1}}');
    }
    // Kept alive, each answer read to its end: six requests on one or two connections
    // (the next request can start before undici has marked the last one's connection free).
    expect(sockets.size).toBeLessThanOrEqual(2);
  });

  it("refuses an answer over the limit, declared or as it comes", async () => {
    const p = await serve((req, res) => {
      req.resume();
      const body = "x".repeat(4096);
      if (req.url === "/declared") res.writeHead(200, { "content-length": String(body.length) });
      else res.writeHead(200); // chunked: the size is known only as it comes
      res.end(body);
    });
    const declared = await whole(p, "/declared");
    await expect(declared.body).rejects.toThrow(/declared 4096 bytes, over the limit of 1024/);
    const streamed = await whole(p, "/chunked");
    const err = await streamed.body.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UpstreamTooLarge);
    expect((err as Error).message).toMatch(/worker w1's answer is over the limit of 1024 bytes/);
  });

  it("reads a non-2xx answer's body as its error text", async () => {
    const p = await serve((req, res) => {
      req.resume();
      res.writeHead(503, { "content-type": "application/json" });
      res.end('{"error":{"message":"warming"}}');
    });
    const a = await whole(p, "/v1/chat/completions");
    expect(a.statusCode).toBe(503);
    expect(await a.errorText()).toBe('{"error":{"message":"warming"}}');
  });

  it("rejects the body when the connection drops before its end, and when the signal aborts", async () => {
    const p = await serve((req, res) => {
      req.resume();
      res.writeHead(200, { "content-length": "100" });
      res.write("{");
      if (req.url === "/drop") setTimeout(() => res.socket?.destroy(), 20);
    });
    const dropped = await whole(p, "/drop");
    await expect(dropped.body).rejects.toThrow();
    const signal = new Abort();
    const held = await whole(p, "/hold", 1024, signal);
    const reason = new Error("deadline");
    signal.abort(reason);
    await expect(held.body).rejects.toBe(reason);
    expect(signal.listenerCount("abort")).toBe(0);
  });
});

describe("the time undici held a call before writing it (heldMs)", () => {
  const post = { path: "/v1/chat/completions", method: "POST" as const, headers: { "content-type": "application/json" }, body: "{}" };
  const busy = (ms: number) => {
    const until = performance.now() + ms;
    while (performance.now() < until);
  };

  it("covers a call queued behind the pool's only connection until that connection's stream ends", async () => {
    let release!: () => void;
    const later = new Promise<void>((r) => (release = r));
    await serve((req, res) => {
      req.resume();
      sse(res);
      res.write('data: {"a":1}\n\n');
      if (req.headers["x-hold"]) void later.then(() => res.end("data: [DONE]\n\n"));
      else res.end("data: [DONE]\n\n");
    });
    const one = new Pool(`http://127.0.0.1:${(server!.address() as AddressInfo).port}`, { connections: 1, pipelining: 1, headersTimeout: 0, bodyTimeout: 0 });
    try {
      const first = await dispatchSse(one, { ...post, headers: { ...post.headers, "x-hold": "1" } }, new Abort(), { label: "worker w1" });
      const second = dispatchSse(one, post, new Abort(), { label: "worker w1" });
      await new Promise((r) => setTimeout(r, 60));
      release();
      expect(await readAll(first.batches)).toEqual(['{"a":1}', "[DONE]"]);
      const answer = await second;
      expect(await readAll(answer.batches)).toEqual(['{"a":1}', "[DONE]"]);
      expect(answer.heldMs).toBeGreaterThanOrEqual(55);
      expect(first.heldMs).toBeLessThan(answer.heldMs);
    } finally {
      await one.destroy();
    }
  });

  it("is never written in the loop turn that made it on a new connection, and on a reused idle one only after that turn (undici's check for unasked bytes)", async () => {
    const p = await serve((req, res) => {
      req.resume();
      req.on("end", () => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end('{"ok":true}');
      });
    });
    for (const connection of ["new", "reused"]) {
      const call = dispatchWhole(p, post, new Abort(), { maxBytes: 1024, what: "worker w1's answer" });
      // The rest of this turn: the call's headers wait for it.
      busy(25);
      const answer = await call;
      expect((await answer.body).toString(), connection).toBe('{"ok":true}');
      expect(answer.heldMs, connection).toBeGreaterThanOrEqual(24);
    }
  });
});
