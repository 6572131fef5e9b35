// The SSE parser against the WHATWG rules: every line ending, chunks split at
// every byte, comments, unknown fields, multi-line data, and the limits.
import { describe, expect, it } from "vitest";
import { UpstreamTooLarge } from "../backends/transport.ts";
import { parseSse, sseEvent } from "./sse.ts";

const enc = new TextEncoder();

async function* from(chunks: Array<Uint8Array | string>): AsyncGenerator<Uint8Array | string> {
  for (const c of chunks) yield c;
}

async function collect(chunks: Array<Uint8Array | string>, maxEventBytes?: number): Promise<string[]> {
  const out: string[] = [];
  for await (const p of parseSse(from(chunks), maxEventBytes === undefined ? {} : { maxEventBytes })) out.push(p);
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

describe("parseSse", () => {
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
