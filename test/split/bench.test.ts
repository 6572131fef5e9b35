// The split benchmark in its CI size, as users run it: `switchyard bench split
// --quick` (1 stream, a few tokens) starts the model unsplit, in 2 and in 3
// shards, prints its tables, and the values in them are sane: tokens flowed
// everywhere, greedy output agreed, every activation row crossed each hop
// with only a small header, each shard holds a share of the weights, and a
// tail SIGKILLed mid-stream was replaced by its replica without a trace in the text.
import { describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli-run.ts";

/** The rows (cells) of the table whose header starts `header`. */
function table(out: string, header: string): string[][] {
  const lines = out.split("\n");
  const at = lines.findIndex((l) => l.startsWith(header));
  expect(at, `a table headed ${header}\n${out}`).toBeGreaterThanOrEqual(0);
  const rows: string[][] = [];
  for (const l of lines.slice(at + 2)) {
    if (!l.startsWith("|")) break;
    rows.push(l.split("|").slice(1, -1).map((c) => c.trim()));
  }
  return rows;
}
/** The row of `rows` whose first cells are `first`. */
function row(rows: string[][], ...first: string[]): string[] {
  const r = rows.find((cells) => first.every((f, i) => cells[i] === f));
  expect(r, `a row starting ${first.join(" | ")} in ${JSON.stringify(rows)}`).toBeDefined();
  return r!;
}
const num = (cell: string) => Number.parseFloat(cell.replace(/×$/, ""));

describe("switchyard bench split --quick", () => {
  it("prints throughput, hop latency, wire bytes, start → ready, memory per shard and a mid-stream replacement, with sane values", async () => {
    const { code, out } = await runCli(["bench", "split", "--quick", "--threads", "2"]);
    expect(out).toContain("Greedy output identical in every config: yes.");
    expect(out).toContain("Engine threads: unsplit 2, split=2 1+1, split=3 1+1+1");
    // The cut `up --split` makes: equal compute, the last shard's share counting the output head.
    expect(out).toContain("split=2 0-19 | 19-30; split=3 0-12 | 12-25 | 25-30.");
    // Throughput at 1 stream: all three produced tokens.
    const tput = row(table(out, "| streams | unsplit tok/s"), "1");
    expect(tput.slice(1, 4).map(num).every((x) => x > 0)).toBe(true);
    // Latency: a positive TTFT and per-token time for each config.
    const latency = table(out, "| config | hops | TTFT ms");
    for (const c of ["unsplit", "split=2", "split=3"]) {
      const r = row(latency, c);
      expect(num(r[2]!)).toBeGreaterThan(0);
      expect(num(r[3]!)).toBeGreaterThan(0);
    }
    expect(row(latency, "split=3")[1]).toBe("2");
    // Wire: at least one row per token per hop, each row its 576 f32 plus a small header (not JSON, not base64).
    for (const c of ["split=2", "split=3"]) {
      const w = row(table(out, "| config | streams | rows sent"), c, "1");
      expect(num(w[2]!)).toBeGreaterThan(8);
      expect(num(w[4]!)).toBeGreaterThanOrEqual(1);
      expect(num(w[4]!)).toBeLessThan(1.05);
      expect(num(w[5]!)).toBeLessThan(1.5);
    }
    // Memory: each shard a share of the unsplit weights; start → ready measured.
    const memory = table(out, "| config | shard | blocks");
    const whole = row(memory, "unsplit", "0");
    expect(whole[2]).toBe("0-30");
    expect(num(whole[6]!)).toBe(1);
    for (const [c, i, blocks, lo, hi] of [["split=2", "0", "0-19", 0.3, 0.85], ["split=2", "1", "19-30", 0.3, 0.8], ["split=3", "1", "12-25", 0.15, 0.5]] as const) {
      const r = row(memory, c, i);
      expect(r[2]).toBe(blocks);
      expect(num(r[4]!)).toBeGreaterThan(0);
      expect(num(r[6]!)).toBeGreaterThan(lo);
      expect(num(r[6]!)).toBeLessThan(hi);
    }
    // Replacement: the serving tail SIGKILLed mid-stream, the stream went on on its replica with the unsplit text, no error event.
    const replaced = row(table(out, "| kills | stall ms"), "1");
    expect(replaced[5]).toBe("1");
    expect(replaced[6]).toBe("yes");
    expect(replaced[7]).toBe("0");
    expect(num(replaced[1]!)).toBeGreaterThan(0);
    expect(out).toMatch(/Targets: split=2 ≥ 0\.9× unsplit at 1 streams: (met|NOT met)/);
    expect(out).toContain("a killed tail replaced mid-stream (same text, no error event): met");
    expect(code).toBe(0);
  }, 300_000);
});
