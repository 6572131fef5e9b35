// bench/lib/heapsnapshot.ts on real V8 heap snapshots of this process: what
// is kept alive between two snapshots, by kind, per object held — the table
// `bench router --profile` prints of what a request in flight keeps alive.
import { readFileSync, rmSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { writeHeapSnapshot } from "node:v8";
import { describe, expect, it } from "vitest";
import { censusGrowth, heapCensus, liveTable, responsesIn } from "../../bench/lib/heapsnapshot.ts";

class HeldRequest {
  constructor(
    readonly id: number,
    readonly name: string,
    readonly onDone: () => number,
    readonly bytes: Uint8Array,
  ) {}
}

describe("heap snapshot census", () => {
  it("counts the objects a snapshot holds beyond another, by constructor, closure and string, with array buffers apart", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sy-snap-"));
    const held: HeldRequest[] = [];
    try {
      const before = heapCensus(readFileSync(writeHeapSnapshot(path.join(dir, "a.heapsnapshot")), "utf8"));
      for (let i = 0; i < 500; i++) held.push(new HeldRequest(i, `request number ${i} of a test that holds them`, function onDoneOfHeld() { return i; }, new Uint8Array(4096)));
      const after = heapCensus(readFileSync(writeHeapSnapshot(path.join(dir, "b.heapsnapshot")), "utf8"));
      const growth = censusGrowth(before, after);
      expect(growth.get("HeldRequest")).toMatchObject({ count: 500 });
      expect(growth.get("HeldRequest")!.bytes / 500).toBeGreaterThanOrEqual(16); // a header, four fields
      expect(growth.get("onDoneOfHeld()")!.count).toBe(500);
      expect(growth.get("(string)")!.count).toBeGreaterThanOrEqual(500);
      // The typed arrays' 4 KB each live off the V8 heap, counted apart.
      expect(growth.get("(array buffer data, off-heap)")!.bytes).toBeGreaterThanOrEqual(500 * 4096);
      expect(responsesIn(after)).toBe(0);
      const table = liveTable(growth, 500, 10);
      expect(table).toMatch(/^500 requests in flight: \d+ bytes per request on the V8 heap, (\d+) off it/);
      expect(table).toMatch(/\nPer request, Node's request and response: [0-9.]+ IncomingMessage, [0-9.]+ ServerResponse\.\n/);
      expect(Number(/, (\d+) off it/.exec(table)![1])).toBeGreaterThanOrEqual(4096);
      expect(table).toMatch(/\| `HeldRequest` \| 1\.00 \| \d+ \|/);
      expect(table).toMatch(/\| `onDoneOfHeld\(\)` \| 1\.00 \| \d+ \|/);
      expect(liveTable(growth, 0)).toMatch(/no request was in flight/);
    } finally {
      held.length = 0;
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
