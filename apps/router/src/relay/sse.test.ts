// The SSE parser against the WHATWG rules: every line ending, chunks split at
// every byte, comments, unknown fields, multi-line data, and the limits.
import { PassThrough, Readable } from "node:stream";
import { beforeAll, describe, expect, it } from "vitest";
import { UpstreamTooLarge } from "../backends/transport.ts";
import { parseSse, parseSseBatches, type SseBatch, SseBatchQueue, type SseBatchReader, sseEvent, type SseOptions, type SseQueueOptions, textBatch } from "./sse.ts";

// Every parser case runs twice: through parseSseBatches over an async
// iterable, and through SseBatchQueue fed by a Node stream's events (below),
// as the worker relay's dispatch handler feeds it from undici's parser.
type Reader = "iterator" | "events";
let reader: Reader = "iterator";
const readers: Reader[] = ["iterator", "events"];

function batchesOf(chunks: Array<Uint8Array | string>, opts: Partial<SseOptions> = {}): AsyncIterable<SseBatch> {
  return reader === "iterator" ? parseSseBatches(from(chunks), opts) : sseBatchesOf(Readable.from(chunks), opts);
}

const enc = new TextEncoder();

/**
 * An SseBatchQueue fed by a Node stream's events, standing in for the
 * dispatch handler that feeds it in the router (backends/answer-dispatch.ts):
 * pause() and resume() for its hold on the socket, destroy() for its abort;
 * a body that closes without its end is a failure, as it is for an iterator.
 */
function sseBatchesOf(body: Readable, opts: SseQueueOptions = {}): SseBatchReader {
  const off = () => {
    body.off("data", onData);
    body.off("end", onEnd);
    body.off("error", onError);
    body.off("close", onClose);
  };
  const queue = new SseBatchQueue(
    {
      resume: () => body.resume(),
      stop: () => body.destroy(),
      finished: () => {
        off();
        // undici's body reports its own destruction as an 'error': nobody's to hear it.
        body.on("error", () => {});
      },
    },
    opts,
  );
  const onData = (chunk: Buffer) => {
    if (!queue.chunk(chunk) && !queue.done) body.pause();
  };
  const onEnd = () => queue.end();
  const onError = (err: Error) => queue.fail(err);
  const prematureClose = () => body.errored ?? Object.assign(new Error(`${opts.label ?? "upstream"}'s stream ended early`), { code: "ERR_STREAM_PREMATURE_CLOSE" });
  const onClose = () => queue.fail(prematureClose());
  if (body.destroyed) queue.fail(prematureClose());
  else {
    body.on("data", onData);
    body.once("end", onEnd);
    body.once("error", onError);
    body.once("close", onClose);
  }
  return queue;
}

async function* from(chunks: Array<Uint8Array | string>): AsyncGenerator<Uint8Array | string> {
  for (const c of chunks) yield c;
}

async function collect(chunks: Array<Uint8Array | string>, maxEventBytes?: number): Promise<string[]> {
  const out: string[] = [];
  for await (const b of batchesOf(chunks, maxEventBytes === undefined ? {} : { maxEventBytes })) for (const e of b.events) out.push(e.data);
  return out;
}

/** The stream cut into two chunks at every byte, and into single bytes: each must parse the same. */
async function everySplit(text: string): Promise<string[][]> {
  const bytes = enc.encode(text);
  const results: string[][] = [];
  for (let i = 0; i <= bytes.length; i++) results.push(await collect([bytes.subarray(0, i), bytes.subarray(i)]));
  results.push(await collect(Array.from(bytes, (b) => Uint8Array.of(b))));
  return results;
}

describe.each(readers)("parseSse (%s)", (mode) => {
  beforeAll(() => {
    reader = mode;
  });

  it.each([
    ["LF", "\n"],
    ["CRLF", "\r\n"],
    ["CR", "\r"],
  ])("lines ending in %s, split at every byte boundary", async (_name, eol) => {
    const text = `data: {"a":1}${eol}${eol}: keep-alive${eol}${eol}data: {"b":"é✓"}${eol}${eol}data: [DONE]${eol}${eol}`;
    for (const got of await everySplit(text)) expect(got).toEqual(['{"a":1}', '{"b":"é✓"}', "[DONE]"]);
  });

  it("mixed line endings in one stream, split at every byte boundary", async () => {
    const text = 'data: one\r\n\rdata: two\n\r\ndata: three\r\r: c\rdata: four\n\n';
    for (const got of await everySplit(text)) expect(got).toEqual(["one", "two", "three", "four"]);
  });

  it("a CR at a chunk's end and an LF at the next one's start are one line ending, not two", async () => {
    // Two endings would dispatch `x` early and make `y` an event of its own.
    expect(await collect(["data: x\r", "\ndata: y\r\n\r\n"])).toEqual(["x\ny"]);
  });

  it("joins several data lines with \\n (one event, never several)", async () => {
    const text = 'data: A\ndata: \ndata: data: {"injected":true}\n\n';
    for (const got of await everySplit(text)) expect(got).toEqual(['A\n\ndata: {"injected":true}']);
  });

  it("CR inside what an LF-only parser would call one line starts new lines", async () => {
    expect(await collect(['data: {"a":1}\r\rdata: {"injected":true}\n\n'])).toEqual(['{"a":1}', '{"injected":true}']);
  });

  it("ignores comments, event/id/retry and unknown fields; a field without a colon has an empty value", async () => {
    const text = ": hello\nevent: error\nid: 7\nretry: 10\nfoo: bar\ndata\n\nevent: x\n\ndata:no-space\n\ndata:  two spaces\n\n";
    // `data` alone is a data line with an empty value; an event with no data line is no event.
    expect(await collect([text])).toEqual(["", "no-space", " two spaces"]);
  });

  it("a field named like data but longer is not data", async () => {
    expect(await collect(["datax: 1\ndat: 2\nDATA: 3\n\ndata: 4\n\n"])).toEqual(["4"]);
  });

  it("strips one BOM at the start of the stream only", async () => {
    expect(await collect(["\uFEFFdata: a\n\ndata: \uFEFFb\n\n"])).toEqual(["a", "\uFEFFb"]);
    const bom = Uint8Array.of(0xef, 0xbb, 0xbf);
    expect(await collect([bom.subarray(0, 1), bom.subarray(1), "data: a\n\n"])).toEqual(["a"]);
  });

  it("drops an event the stream ended in the middle of (the spec discards it)", async () => {
    expect(await collect(["data: a\n\ndata: b\n"])).toEqual(["a"]);
    expect(await collect(["data: a\n\ndata: b"])).toEqual(["a"]);
  });

  it("keeps UTF-8 characters split across chunks", async () => {
    const bytes = enc.encode("data: ✓✓\n\n");
    // Split inside the first ✓ (bytes 6..8).
    expect(await collect([bytes.subarray(0, 7), bytes.subarray(7, 8), bytes.subarray(8)])).toEqual(["✓✓"]);
  });

  it("refuses a line without an end past the limit, without buffering the rest", async () => {
    let served = 0;
    async function* endless(): AsyncGenerator<Uint8Array> {
      const piece = new Uint8Array(64 * 1024).fill(0x61);
      yield enc.encode("data: ");
      for (;;) {
        served += piece.length;
        yield piece;
      }
    }
    await expect(
      (async () => {
        for await (const _ of parseSse(endless(), { maxEventBytes: 1024 * 1024, label: "worker w" })) void _;
      })(),
    ).rejects.toThrow(UpstreamTooLarge);
    // Read up to the limit and one chunk more, no further.
    expect(served).toBeLessThanOrEqual(1024 * 1024 + 64 * 1024);
  });

  it("refuses a comment line past the limit too", async () => {
    await expect(collect([":" + "x".repeat(2000) + "\n\n"], 1000)).rejects.toThrow(/SSE line over the limit of 1000 bytes/);
  });

  it("refuses an event whose data lines together pass the limit", async () => {
    const line = `data: ${"x".repeat(400)}\n`;
    await expect(collect([line.repeat(3) + "\n"], 1000)).rejects.toThrow(/SSE event over the limit of 1000 bytes/);
    // At the limit it passes: 2 × 400 + one joining \n.
    expect(await collect([line.repeat(2) + "\n"], 801)).toEqual([`${"x".repeat(400)}\n${"x".repeat(400)}`]);
  });

  it("many events in one chunk, and an event spread over many chunks", async () => {
    const many = Array.from({ length: 500 }, (_, i) => `data: {"i":${i}}\r\n\r\n`).join("");
    const got = await collect([many]);
    expect(got).toHaveLength(500);
    expect(got[499]).toBe('{"i":499}');
    const big = `data: ${"y".repeat(10_000)}\n\n`;
    const pieces = big.match(/[\s\S]{1,7}/g)!;
    expect(await collect(pieces)).toEqual(["y".repeat(10_000)]);
  });
});

describe("sseEvent", () => {
  it("formats one data line and the blank line", () => {
    expect(new TextDecoder().decode(sseEvent('{"a":1}'))).toBe('data: {"a":1}\n\n');
  });
});

describe.each(readers)("parseSseBatches (%s)", (mode) => {
  beforeAll(() => {
    reader = mode;
  });

  async function batches(chunks: Array<Uint8Array | string>): Promise<SseBatch[]> {
    const out: SseBatch[] = [];
    for await (const b of batchesOf(chunks)) out.push(b);
    return out;
  }
  /** What each event's bytes are, when it has them (null: it goes out as text). */
  const spans = (b: SseBatch) => b.events.map((e) => (e.start < 0 ? null : b.chunk.toString("utf8", e.start, e.end)));

  it("one batch per chunk, each canonical event with its exact bytes", async () => {
    const got = await batches(['data: {"a":1}\n\ndata: {"b":2}\n\n', "data: [DONE]\n\n"]);
    expect(got.map((b) => b.events.map((e) => e.data))).toEqual([['{"a":1}', '{"b":2}'], ["[DONE]"]]);
    expect(got.map(spans)).toEqual([['data: {"a":1}\n\n', 'data: {"b":2}\n\n'], ["data: [DONE]\n\n"]]);
  });

  it("an event split across chunks has no bytes (it comes in the batch of the chunk that ends it); the chunk's other events keep theirs", async () => {
    const got = await batches(['data: {"a":1}\n\ndata: {"b"', ':2}\n\ndata: {"c":3}\n\n']);
    expect(got.map(spans)).toEqual([['data: {"a":1}\n\n'], [null, 'data: {"c":3}\n\n']]);
    expect(got[1]!.events[0]!.data).toBe('{"b":2}');
    // Split after the data line's LF: the blank line is in the next chunk.
    const split = await batches(["data: x\n", "\ndata: y\n\n"]);
    expect(split.map(spans)).toEqual([[null, "data: y\n\n"]]);
  });

  it("a chunk that ends mid-event yields nothing until the event completes", async () => {
    const got = await batches(["data: {", '"a":1', "}\n\n"]);
    expect(got).toHaveLength(1);
    expect(spans(got[0]!)).toEqual([null]);
  });

  it("CRLF, CR, several data lines, data: without the space and a BOM go out as text", async () => {
    const got = await batches(["\uFEFFdata: bom\n\n", 'data: {"a":1}\r\n\r\ndata: {"b":2}\n\r\ndata: c\r\rdata: x\ndata: y\n\ndata:z\n\ndata: ok\n\n']);
    expect(got.map(spans)).toEqual([[null], [null, null, null, null, null, "data: ok\n\n"]]);
  });

  it("comments and fields before the data line are dropped from the bytes; inside the event they make it text", async () => {
    const got = await batches([": keep-alive\n\nevent: message\nid: 1\ndata: {\"a\":1}\n\n: ping\ndata: {\"b\":2}\n\ndata: {\"c\":3}\n: inside\n\n"]);
    expect(spans(got[0]!)).toEqual(['data: {"a":1}\n\n', 'data: {"b":2}\n\n', null]);
    expect(got[0]!.events.map((e) => e.data)).toEqual(['{"a":1}', '{"b":2}', '{"c":3}']);
  });

  it("cut at every byte, the events and their text are those of the whole stream", async () => {
    const text = 'data: {"a":"é"}\n\n: c\n\ndata: {"b":2}\r\n\r\ndata: [DONE]\n\n';
    const bytes = enc.encode(text);
    for (let i = 0; i <= bytes.length; i++) {
      const got = await batches([bytes.subarray(0, i), bytes.subarray(i)]);
      const out = got.flatMap((b) => b.events.map((e) => (e.start < 0 ? `data: ${e.data}\n\n` : b.chunk.toString("utf8", e.start, e.end)))).join("");
      expect(out).toBe('data: {"a":"é"}\n\ndata: {"b":2}\n\ndata: [DONE]\n\n');
    }
  });
});

describe("SseBatchQueue fed by a Node stream", () => {
  it("pauses the stream while batches wait for the relay, and resumes it as they are taken", async () => {
    const body = new PassThrough();
    const it = sseBatchesOf(body);
    for (let i = 0; i < 40; i++) body.write(`data: ${i}\n\n`);
    await new Promise((r) => setImmediate(r));
    // Not read on without end: 16 batches wait, the rest stays in the stream's buffer.
    expect(body.isPaused()).toBe(true);
    const got: string[] = [];
    const reading = (async () => {
      for (;;) {
        const r = await it.next();
        if (r.done) return;
        got.push(...r.value.events.map((e) => e.data));
      }
    })();
    await new Promise((r) => setImmediate(r));
    body.end("data: [DONE]\n\n");
    await reading;
    expect(got).toEqual([...Array.from({ length: 40 }, (_, i) => String(i)), "[DONE]"]);
  });

  it("fails with the stream's error, as ended early on a close without end, and over the limit destroys the stream", async () => {
    const failing = new PassThrough();
    const a = sseBatchesOf(failing);
    failing.write("data: 1\n\n");
    expect((await a.next()).value?.events[0]?.data).toBe("1");
    failing.destroy(new Error("socket hang up"));
    await expect(a.next()).rejects.toThrow("socket hang up");

    const closing = new PassThrough();
    const b = sseBatchesOf(closing, { label: "worker w1" });
    closing.write("data: 1");
    closing.destroy();
    await expect(b.next()).rejects.toThrow("worker w1's stream ended early");

    // undici's body errors when destroyed without a reason: that error must not go unheard.
    const undiciLike = new Readable({ read() {}, destroy: (err, cb) => cb(err ?? new Error("Request aborted")) });
    const c = sseBatchesOf(undiciLike, { maxEventBytes: 100 });
    undiciLike.push(Buffer.from(`data: ${"x".repeat(200)}`));
    await expect(c.next()).rejects.toThrow(UpstreamTooLarge);
    await new Promise((r) => setImmediate(r));
    expect(undiciLike.destroyed).toBe(true);
  });

  it("rejects with what mapError makes of a failure: the stream's error, an early close, a line over the limit", async () => {
    const seen: unknown[] = [];
    const mapError = (err: unknown) => {
      seen.push(err);
      return new Error(`mapped: ${(err as Error).message}`);
    };
    const failing = new PassThrough();
    const a = sseBatchesOf(failing, { mapError });
    failing.destroy(new Error("socket hang up"));
    await expect(a.next()).rejects.toThrow("mapped: socket hang up");
    // The failure is kept as mapped: a later next() rejects with the same error, not mapped again.
    await expect(a.next()).rejects.toThrow("mapped: socket hang up");
    const closing = new PassThrough();
    const b = sseBatchesOf(closing, { label: "worker w1", mapError });
    closing.write("data: 1");
    closing.destroy();
    await expect(b.next()).rejects.toThrow("mapped: worker w1's stream ended early");
    const big = new PassThrough();
    const c = sseBatchesOf(big, { maxEventBytes: 100, mapError });
    big.write(`data: ${"x".repeat(200)}`);
    await expect(c.next()).rejects.toThrow(/^mapped: .*over the limit of 100 bytes/);
    expect(seen).toHaveLength(3);
    expect(seen[2]).toBeInstanceOf(UpstreamTooLarge);
  });

  it("return() lets an unfinished stream go (destroyed), and is done from then on", async () => {
    const body = new PassThrough();
    const it = sseBatchesOf(body);
    body.write("data: 1\n\n");
    await it.return!();
    expect(body.destroyed).toBe(true);
    const gone = new PassThrough();
    gone.destroy();
    await new Promise((r) => setImmediate(r));
    await expect(sseBatchesOf(gone).next()).rejects.toThrow(/ended early/);
  });
});

describe("textBatch", () => {
  it("holds payloads without bytes", () => {
    expect(textBatch(["a", "b"]).events).toEqual([
      { data: "a", start: -1, end: -1 },
      { data: "b", start: -1, end: -1 },
    ]);
  });
});
