// readBodyText: a whole answer read under its limit, by events for Node
// streams (undici's bodies) and by iteration for anything else; over the
// limit, destroyed, or ended early, it fails and never waits.
import { PassThrough, Readable } from "node:stream";
import { describe, expect, it } from "vitest";
import { readBodyText, UpstreamTooLarge } from "./transport.ts";

const chunks = (...parts: string[]) => parts.map((p) => Buffer.from(p));

describe("readBodyText", () => {
  it("joins a Node stream's chunks, multi-byte characters split across them included", async () => {
    const euro = Buffer.from("€");
    const body = Readable.from([Buffer.from('{"a":"'), euro.subarray(0, 1), Buffer.concat([euro.subarray(1), Buffer.from('"}')])], { objectMode: false });
    expect(await readBodyText(body, 1024, "test")).toBe('{"a":"€"}');
    expect(await readBodyText(Readable.from(chunks("{}")), 1024, "test")).toBe("{}");
    expect(await readBodyText(Readable.from([]), 1024, "test")).toBe("");
  });

  it("refuses past the limit and destroys the stream, whether by events or by iteration", async () => {
    const node = Readable.from(chunks("12345", "67890"));
    await expect(readBodyText(node, 8, "worker w1's answer")).rejects.toThrow(UpstreamTooLarge);
    expect(node.destroyed).toBe(true);
    // undici's body errors when destroyed without a reason ("Request aborted"): that error must not go unheard (an uncaught exception).
    const undiciLike = new Readable({ read() {}, destroy: (err, cb) => cb(err ?? new Error("Request aborted")) });
    const refused = readBodyText(undiciLike, 8, "test");
    undiciLike.push(Buffer.from("123456789"));
    await expect(refused).rejects.toThrow(UpstreamTooLarge);
    await new Promise((r) => setImmediate(r));
    expect(undiciLike.destroyed).toBe(true);
    let destroyed = false;
    const iterable = { async *[Symbol.asyncIterator]() { yield* chunks("12345", "67890"); }, destroy: () => (destroyed = true) };
    await expect(readBodyText(iterable, 8, "test")).rejects.toThrow(/over the limit of 8 bytes/);
    expect(destroyed).toBe(true);
  });

  it("fails with the stream's error, or as ended early when it closes without one, and at once when it is destroyed already", async () => {
    const failing = new PassThrough();
    const p1 = readBodyText(failing, 1024, "test");
    failing.write("{");
    failing.destroy(new Error("socket hang up"));
    await expect(p1).rejects.toThrow("socket hang up");
    const closing = new PassThrough();
    const p2 = readBodyText(closing, 1024, "worker w1's answer");
    closing.write("{");
    closing.destroy();
    await expect(p2).rejects.toThrow("worker w1's answer ended early");
    const gone = new PassThrough();
    gone.destroy();
    await new Promise((r) => setImmediate(r));
    await expect(readBodyText(gone, 1024, "test")).rejects.toThrow(/ended early/);
  });

  it("refuses a declared content-length over the limit before reading", async () => {
    const body = new PassThrough();
    await expect(readBodyText(body, 10, "test", "11")).rejects.toThrow("test declared 11 bytes, over the limit of 10");
    expect(body.destroyed).toBe(true);
  });
});
