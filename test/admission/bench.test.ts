// The admission benchmark in its CI size, as users run it: `switchyard bench
// admission --quick`. The test holds the behaviour: under 500 batch streams,
// admission off lets interactive TTFT p99 grow at least 10× (the load is
// real), admission on keeps it at least 4× below that with the workers' own
// queues empty (batch waits in the router, so an interactive request never
// waits behind it on a worker), and every interactive request is answered.
// The bench's own goal (on ≤ 1.25× idle) is reported by the bench and in
// docs/BENCHMARKS.md; it is not a gate here because on a loaded box the
// router's CPU jitter alone moves the p99 of 128 samples past it (1.3–2.3× at
// load average ~10 with the workers' queues at 0). The regression of
// 2026-12-01 (3.8–4.8×: requests ranked in one burst all sent to one worker,
// which queued them) fails the queue check on any box. About a minute.
import { describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli-run.ts";

const ratioOf = (out: string, mode: "on" | "off"): number => {
  const m = new RegExp(`admission ${mode}: interactive TTFT p99 under load [^(]*\\([^)]*= ([0-9.]+)×\\)`).exec(out);
  if (!m) throw new Error(`no 'admission ${mode}' check line in:\n${out.slice(-3000)}`);
  return Number(m[1]);
};

/** A table row's cells: admission, batch load, ok, p50, p99, max, done/s, busy, worker queue (mean), router queue (mean). */
const rowOf = (out: string, mode: "on" | "off", load: string): string[] => {
  const line = out.split("\n").find((l) => l.startsWith(`| ${mode} | ${load} |`));
  if (!line) throw new Error(`no '${mode} | ${load}' row in:\n${out.slice(-3000)}`);
  return line.split("|").slice(1, -1).map((c) => c.trim());
};

describe("switchyard bench admission --quick", () => {
  it("admission on keeps interactive TTFT p99 under load ≥ 4× below off and the workers' queues empty, off ≥ 10× idle, every interactive request answered", async () => {
    const { out } = await runCli(["bench", "admission", "--quick"]);
    expect(out).toMatch(/PASS {2}admission off: interactive TTFT p99 under load ≥ 10× idle/);
    expect(out).not.toMatch(/FAIL {2}(?!admission on: interactive TTFT p99 under load ≤ 1\.25× idle)/);
    expect(ratioOf(out, "on") * 4).toBeLessThanOrEqual(ratioOf(out, "off"));
    // Mean worker queue (sampled every 250 ms) with admission on under load: none, bar a heartbeat's jitter.
    expect(Number(rowOf(out, "on", "500 streams")[8])).toBeLessThan(1);
    // Off, the same load does queue on the workers (the column measures something).
    expect(Number(rowOf(out, "off", "500 streams")[8])).toBeGreaterThan(100);
  }, 300_000);
});
