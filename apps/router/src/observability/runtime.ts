// The router process's own stalls, on /metrics: event-loop delay (a
// histogram from perf_hooks.monitorEventLoopDelay), GC pauses (counted and
// timed through a PerformanceObserver), CPU time, also per request
// answered, and the time the loop's thread waited for a CPU. A p99 far above
// the p50 is a stall, not slowness: these say which, and whether it was the
// router's (its work, its collector) or the host's (no core free to run it).
import { readFileSync } from "node:fs";
import { constants, monitorEventLoopDelay, PerformanceObserver, type IntervalHistogram } from "node:perf_hooks";
import type { RouterMetrics } from "./metrics.ts";

/** Seconds. The loop's resolution is 10 ms by default; finer buckets below it still show the idle floor. */
export const EVENT_LOOP_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5];
export const GC_BUCKETS = [0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25];

const gcKinds: Record<number, string> = {
  [constants.NODE_PERFORMANCE_GC_MINOR]: "minor",
  [constants.NODE_PERFORMANCE_GC_MAJOR]: "major",
  [constants.NODE_PERFORMANCE_GC_INCREMENTAL]: "incremental",
  [constants.NODE_PERFORMANCE_GC_WEAKCB]: "weakcb",
};

/**
 * Bucket counts of a Prometheus histogram from a monitorEventLoopDelay
 * histogram (nanoseconds): the share of samples at or under each bound, read
 * from its percentile table (exact at the recorded values, conservative in
 * between). Its samples are whole timer intervals, so `offsetNs` (the
 * resolution) is added to each bound: a delay is what exceeds the interval.
 */
export function loopDelayBuckets(h: Pick<IntervalHistogram, "count" | "percentiles">, bucketsS: number[], offsetNs = 0): number[] {
  const table = [...h.percentiles.entries()].sort((a, b) => a[0] - b[0]); // [percentile, ns]
  return bucketsS.map((b) => {
    const ns = b * 1e9 + offsetNs;
    let share = 0;
    for (const [p, v] of table) if (v <= ns) share = p;
    return Math.floor((share / 100) * h.count);
  });
}

/** Each count held at the highest `seen` so far (updated in place): cumulative buckets that never fall. */
export function heldHighest(seen: number[], counts: number[]): number[] {
  return counts.map((c, i) => (seen[i] = Math.max(seen[i] ?? 0, c)));
}

/**
 * Seconds this process's main thread — the event loop's — has spent
 * runnable on a run queue without a CPU since it started, from
 * /proc/self/schedstat ("run time, run delay, timeslices": the thread group
 * leader's own); undefined where there is no such file (not Linux).
 */
export function loopCpuWaitSeconds(file = "/proc/self/schedstat"): number | undefined {
  try {
    const ns = Number(readFileSync(file, "utf8").split(" ")[1]);
    return Number.isFinite(ns) ? ns / 1e9 : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The kernel's count of handshakes dropped because a listening socket's
 * accept queue was full (TcpExt ListenOverflows in /proc/net/netstat), for
 * this process's network namespace since it was made; undefined where there
 * is no such count (not Linux).
 */
export function kernelListenOverflows(file = "/proc/net/netstat"): number | undefined {
  try {
    const lines = readFileSync(file, "utf8").split("\n");
    for (let i = 0; i + 1 < lines.length; i++) {
      if (!lines[i]!.startsWith("TcpExt:")) continue;
      const at = lines[i]!.split(/\s+/).indexOf("ListenOverflows");
      const n = Number(lines[i + 1]!.split(/\s+/)[at]);
      return at > 0 && Number.isFinite(n) ? n : undefined;
    }
  } catch {
    // not Linux
  }
  return undefined;
}

export class RuntimeMetrics {
  private readonly loop: IntervalHistogram;
  private readonly gc: PerformanceObserver;
  private readonly cpu0 = process.cpuUsage();

  constructor(private readonly metrics: RouterMetrics, opts: { resolutionMs?: number } = {}) {
    const resolutionMs = opts.resolutionMs ?? 10;
    // Each sample is the time between two ticks of a timer armed every resolutionMs: the delay is the excess.
    const res = resolutionMs * 1e6;
    const excess = (ns: number) => Math.max(0, ns - res) / 1e9;
    this.loop = monitorEventLoopDelay({ resolution: resolutionMs });
    this.loop.enable();
    this.gc = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) {
        const kind = gcKinds[(e as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? "other";
        metrics.gcPauses.inc({ kind });
        metrics.gcPause.observe({ kind }, e.duration / 1000);
      }
    });
    this.gc.observe({ entryTypes: ["gc"] });
    // Every kind's series from the start, at zero: the first major GC must
    // not grow /metrics (a scraper sees a fixed set; the cardinality test holds).
    for (const kind of [...Object.values(gcKinds), "other"]) {
      metrics.gcPauses.inc({ kind }, 0);
      metrics.gcPause.touch({ kind });
    }
    // The buckets are estimates from the percentile table, which can dip as
    // samples come in; a cumulative bucket must never fall (Prometheus reads
    // a fall as a reset), so each is held at its highest so far.
    const seen: number[] = [];
    metrics.eventLoopDelay.source(() => {
      const h = this.loop;
      const counts = heldHighest(seen, loopDelayBuckets(h, metrics.eventLoopDelay.buckets, res));
      return { counts, count: h.count, sum: h.count ? excess(h.mean) * h.count : 0 };
    });
    metrics.eventLoopDelayMax.set({}, () => (this.loop.count ? excess(this.loop.max) : 0));
    metrics.eventLoopDelayP99.set({}, () => (this.loop.count ? excess(this.loop.percentile(99)) : 0));
    // Since the process started, as Prometheus' process_* series are everywhere
    // (rate() over a restart reads a reset either way; a dashboard of a
    // router's whole CPU includes its start-up).
    metrics.cpuSeconds.source(() => {
      const u = process.cpuUsage();
      return (u.user + u.system) / 1e6;
    });
    // Where the kernel keeps no schedstat the series is left out, not shown as a 0 that would read "never waited".
    if (loopCpuWaitSeconds() !== undefined) metrics.cpuWait.source(() => loopCpuWaitSeconds() ?? 0);
    // Since this process started; the network namespace's count (several router processes each read the same one: merged by max).
    const overflows0 = kernelListenOverflows();
    if (overflows0 !== undefined) metrics.listenOverflows.source(() => Math.max(0, (kernelListenOverflows() ?? overflows0) - overflows0));
    metrics.cpuPerRequest.set({}, () => {
      const n = metrics.requests.total();
      return n > 0 ? this.cpuSeconds() / n : 0;
    });
  }

  /** User + system CPU seconds this process used since the metrics began (per request: start-up is no request's). */
  cpuSeconds(): number {
    const u = process.cpuUsage(this.cpu0);
    return (u.user + u.system) / 1e6;
  }

  stop(): void {
    this.loop.disable();
    this.gc.disconnect();
  }
}
