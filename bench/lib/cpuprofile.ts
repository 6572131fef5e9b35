// Reading a V8 .cpuprofile (node --cpu-prof) for `bench router --profile`:
// where the time goes (top self time), and where the event loop stalls —
// stretches of samples with no idle one between them, what they are made
// of. Issue 14: the router's ΔTTFT p99 is set by its stalls, not its p50.
import { readFileSync } from "node:fs";

export interface CpuProfile {
  nodes: Array<{ id: number; hitCount?: number; children?: number[]; callFrame: { functionName: string; url: string; lineNumber: number } }>;
  /** µs, the profiler's clock. */
  startTime: number;
  endTime: number;
  /** The node sampled at each tick, and the µs before each tick. */
  samples: number[];
  timeDeltas: number[];
}

export function readProfile(file: string): CpuProfile {
  return JSON.parse(readFileSync(file, "utf8")) as CpuProfile;
}

const pct = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : "-");

/**
 * The functions with the most self time in [fromMs, toMs) of the profile
 * (ms after its start; by default all of it), as a table; paths shown
 * relative to `root`. A sample stands for the time until the next one.
 */
export function topSelfTime(prof: CpuProfile, n: number, root: string, fromMs = 0, toMs = Infinity): string {
  const nodes = new Map(prof.nodes.map((x) => [x.id, x]));
  const self = new Map<number, number>();
  let total = 0;
  let t = prof.startTime;
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i] ?? 0;
    const at = (t - prof.startTime) / 1000;
    if (at < fromMs || at >= toMs) continue;
    const dt = prof.timeDeltas[i + 1] ?? 0;
    self.set(prof.samples[i]!, (self.get(prof.samples[i]!) ?? 0) + dt);
    total += dt;
  }
  const by = new Map<string, number>();
  for (const [id, us] of self) {
    const cf = nodes.get(id)!.callFrame;
    const where = cf.url ? `${cf.url.replace(/^file:\/\//, "").replace(root + "/", "")}:${cf.lineNumber + 1}` : "";
    const k = `${cf.functionName || "(anonymous)"} ${where}`.trim();
    by.set(k, (by.get(k) ?? 0) + us);
  }
  const rows = [...by.entries()].sort((a, b) => b[1] - a[1]).slice(0, n);
  return ["| self % | function |", "|---:|---|", ...rows.map(([k, v]) => `| ${pct((100 * v) / total)} | \`${k}\` |`)].join("\n");
}

/** Stretches at least this long are counted (ms). */
export const STRETCH_THRESHOLDS_MS = [1, 2, 4, 8, 16] as const;
/** Stretches at least this long are the "long" ones whose make-up is reported. */
export const LONG_STRETCH_MS = 4;

export interface Stretches {
  /** The window looked at (ms). */
  spanMs: number;
  /** Time with no idle sample (ms). */
  busyMs: number;
  /** Per threshold: how many stretches were at least that long, and the time they took (ms). */
  atLeast: Array<{ ms: number; count: number; totalMs: number }>;
  /** Garbage collection's share of the stretches ≥ LONG_STRETCH_MS, and of all busy time (%). */
  gcInLongPct: number;
  gcInAllPct: number;
}

/**
 * Busy stretches in [fromMs, toMs) of the profile (ms after its start): runs
 * of consecutive samples none of which is "(idle)". A request arriving
 * during one waits for its end, so their lengths bound what a stall adds to
 * a request; their garbage-collection share tells pauses from work queued.
 */
export function busyStretches(prof: CpuProfile, fromMs = 0, toMs = Infinity): Stretches {
  const kind = new Map<number, "idle" | "gc" | "other">();
  for (const n of prof.nodes) kind.set(n.id, n.callFrame.functionName === "(idle)" ? "idle" : n.callFrame.functionName === "(garbage collector)" ? "gc" : "other");
  const runs: Array<{ ms: number; gcMs: number }> = [];
  let t = prof.startTime;
  let runStart = -1;
  let runGc = 0;
  let busy = 0;
  let gcAll = 0;
  let first = -1;
  let last = -1;
  const close = (at: number) => {
    if (runStart >= 0) runs.push({ ms: (at - runStart) / 1000, gcMs: runGc / 1000 });
    runStart = -1;
    runGc = 0;
  };
  for (let i = 0; i < prof.samples.length; i++) {
    t += prof.timeDeltas[i] ?? 0;
    const at = (t - prof.startTime) / 1000;
    if (at < fromMs || at >= toMs) {
      close(t);
      continue;
    }
    if (first < 0) first = t;
    last = t;
    // A sample stands for the time until the next one.
    const dt = prof.timeDeltas[i + 1] ?? 0;
    const k = kind.get(prof.samples[i]!) ?? "other";
    if (k === "idle") {
      close(t);
      continue;
    }
    if (runStart < 0) runStart = t;
    busy += dt;
    if (k === "gc") {
      runGc += dt;
      gcAll += dt;
    }
  }
  close(t);
  const long = runs.filter((r) => r.ms >= LONG_STRETCH_MS);
  const longMs = long.reduce((a, r) => a + r.ms, 0);
  return {
    spanMs: first < 0 ? 0 : (last - first) / 1000,
    busyMs: busy / 1000,
    atLeast: STRETCH_THRESHOLDS_MS.map((ms) => {
      const these = runs.filter((r) => r.ms >= ms);
      return { ms, count: these.length, totalMs: these.reduce((a, r) => a + r.ms, 0) };
    }),
    gcInLongPct: longMs > 0 ? (100 * long.reduce((a, r) => a + r.gcMs, 0)) / longMs : NaN,
    gcInAllPct: busy > 0 ? (100 * gcAll) / busy : NaN,
  };
}

export function stretchesTable(s: Stretches): string {
  const perS = (n: number) => (s.spanMs > 0 ? ((1000 * n) / s.spanMs).toFixed(1) : "-");
  return [
    "| at least | stretches | per second | share of the time |",
    "|---:|---:|---:|---:|",
    ...s.atLeast.map((a) => `| ${a.ms} ms | ${a.count} | ${perS(a.count)} | ${s.spanMs > 0 ? pct((100 * a.totalMs) / s.spanMs) : "-"} % |`),
    "",
    `Busy ${pct(s.spanMs > 0 ? (100 * s.busyMs) / s.spanMs : NaN)} % of ${(s.spanMs / 1000).toFixed(1)} s; garbage collection is ${pct(s.gcInLongPct)} % of the stretches ≥ ${LONG_STRETCH_MS} ms and ${pct(s.gcInAllPct)} % of all busy time.`,
  ].join("\n");
}
