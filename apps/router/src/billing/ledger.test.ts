import { describe, expect, it } from "vitest";
import type { NewLedgerRow } from "@switchyard/db";
import { silentLogger } from "../observability/log.ts";
import { BatchingLedgerWriter } from "./ledger.ts";

const row = (i: number): NewLedgerRow => ({
  requestId: `r${i}`,
  tenantId: 1,
  backend: "worker",
  model: "m",
  costMicro: 0n,
  costSource: "price_table",
  status: "ok",
  startedAt: new Date(0),
  finishedAt: new Date(1),
  durationMs: 1,
});

describe("BatchingLedgerWriter", () => {
  it("keeps rows through write failures and writes each once when the database is back", async () => {
    const written: string[] = [];
    let failures = 2;
    const w = new BatchingLedgerWriter(
      async (rows) => {
        if (failures-- > 0) throw new Error("connection refused");
        written.push(...rows.map((r) => r.requestId));
      },
      { log: silentLogger, flushMs: 5, maxBatch: 3 },
    );
    for (let i = 0; i < 7; i++) w.record(row(i));
    await w.flush(); // fails
    expect(w.buffered).toBe(7);
    await w.flush(); // fails
    await w.flush(); // succeeds
    expect(written).toEqual(["r0", "r1", "r2", "r3", "r4", "r5", "r6"]);
    expect(w.buffered).toBe(0);
    await w.flush(); // nothing to do, and later rows still get written
    w.record(row(7));
    await w.close();
    expect(written.at(-1)).toBe("r7");
  });

  it("bounds its memory: past maxBuffered the oldest rows are dropped and counted", async () => {
    let dropped = 0;
    const w = new BatchingLedgerWriter(async () => {
      throw new Error("down");
    }, { log: silentLogger, flushMs: 10_000, maxBatch: 1000, maxBuffered: 5, onDrop: (n) => (dropped += n) });
    for (let i = 0; i < 8; i++) w.record(row(i));
    expect(w.buffered).toBe(5);
    expect(dropped).toBe(3);
  });
});
