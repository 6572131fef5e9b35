// The stall metrics read the real process: a blocked event loop shows in the
// delay histogram, allocation churn in the GC counters, work in the CPU counter.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { mkdtempSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { RouterMetrics } from "./metrics.ts";
import { heldHighest, kernelListenOverflows, loopCpuWaitSeconds, loopDelayBuckets, RuntimeMetrics } from "./runtime.ts";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

function value(text: string, series: string): number {
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line ? Number(line.slice(series.length + 1)) : NaN;
}

let runtime: RuntimeMetrics | undefined;
afterEach(() => runtime?.stop());

describe("runtime metrics", () => {
  it("counts the kernel's listen overflows since it started: a stopped listener with a backlog of 1 and eight connections", async () => {
    const metrics = new RouterMetrics();
    runtime = new RuntimeMetrics(metrics);
    expect(value(metrics.render(), "switchyard_listen_overflows_total")).toBeGreaterThanOrEqual(0);
    const child = spawn(process.execPath, ["-e", "require('net').createServer().listen({ port: 0, host: '127.0.0.1', backlog: 1 }, function () { console.log(this.address().port) })"], { stdio: ["ignore", "pipe", "inherit"] });
    const [line] = (await once(child.stdout!, "data")) as [Buffer];
    const sockets: ReturnType<typeof connect>[] = [];
    try {
      child.kill("SIGSTOP");
      for (let i = 0; i < 8; i++) sockets.push(connect({ port: Number(line.toString().trim()), host: "127.0.0.1" }).on("error", () => {}));
      await sleep(300);
      // Every listener in the namespace counts: at least the ones made here.
      expect(value(metrics.render(), "switchyard_listen_overflows_total")).toBeGreaterThanOrEqual(1);
    } finally {
      for (const s of sockets) s.destroy();
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    }
  });

  it("reads ListenOverflows from the TcpExt lines; none where the file or the field is missing", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "netstat-"));
    const file = path.join(dir, "netstat");
    writeFileSync(file, "TcpExt: SyncookiesSent ListenOverflows ListenDrops\nTcpExt: 0 42 42\nIpExt: InNoRoutes\nIpExt: 0\n");
    expect(kernelListenOverflows(file)).toBe(42);
    writeFileSync(file, "IpExt: InNoRoutes\nIpExt: 0\n");
    expect(kernelListenOverflows(file)).toBeUndefined();
    expect(kernelListenOverflows(path.join(dir, "absent"))).toBeUndefined();
  });

  it("a 150 ms block of the event loop lands in the delay histogram's upper buckets; GC pauses and CPU are counted", async () => {
    const cpuSeconds = (u = process.cpuUsage()) => (u.user + u.system) / 1e6;
    const before = cpuSeconds();
    const metrics = new RouterMetrics();
    runtime = new RuntimeMetrics(metrics, { resolutionMs: 5 });
    await sleep(60);
    const until = performance.now() + 150;
    while (performance.now() < until) {
      // busy: the loop cannot run its timers
    }
    // Churn enough short-lived garbage for the young generation to be collected.
    let keep = 0;
    for (let i = 0; i < 2e5; i++) keep += JSON.stringify({ i, s: "x".repeat(64) }).length;
    expect(keep).toBeGreaterThan(0);
    await sleep(60);
    metrics.requests.inc({ route: "/v1/chat/completions", status: "200" });
    const text = metrics.render();
    const count = value(text, "switchyard_event_loop_delay_seconds_count");
    expect(count).toBeGreaterThan(3);
    // The blocked sample exceeds 0.1 s: the 0.1 s bucket holds fewer than all samples.
    expect(value(text, 'switchyard_event_loop_delay_seconds_bucket{le="0.1"}')).toBeLessThan(count);
    expect(value(text, 'switchyard_event_loop_delay_seconds_bucket{le="+Inf"}')).toBe(count);
    expect(value(text, "switchyard_event_loop_delay_max_seconds")).toBeGreaterThan(0.1);
    // An idle tick is not a delay: the timer's own 5 ms interval is not counted, so even on a busy machine most ticks are under 10 ms late.
    expect(value(text, 'switchyard_event_loop_delay_seconds_bucket{le="0.01"}')).toBeGreaterThan(count / 2);
    expect(value(text, "switchyard_event_loop_delay_seconds_sum")).toBeGreaterThan(0.1);
    // GC entries are delivered asynchronously; the churn above made some.
    await sleep(20);
    const after = metrics.render();
    expect(value(after, 'switchyard_gc_pauses_total{kind="minor"}')).toBeGreaterThan(0);
    expect(after).toMatch(/switchyard_gc_pause_seconds_bucket\{kind="minor",le="0.001"\} \d+/);
    // The process's CPU since it started (this test process: its start-up and earlier tests too) …
    const cpu = value(after, "process_cpu_seconds_total");
    expect(cpu).toBeGreaterThan(before + 0.1);
    expect(cpu).toBeLessThanOrEqual(cpuSeconds());
    // … and per request (one here) only since the metrics began: start-up is no request's.
    expect(value(after, "switchyard_cpu_seconds_per_request")).toBeGreaterThan(0.1);
    expect(value(after, "switchyard_cpu_seconds_per_request")).toBeCloseTo(cpu - before, 1);
  });

  it("counts the time the loop's thread waited for a CPU: a busy loop sharing its core with another waits for it about half the time", async () => {
    const here = path.dirname(fileURLToPath(import.meta.url));
    // A process of its own, pinned to CPU 0 beside a busy sibling: its metrics, read before and after a second of busy loop.
    const script = `
      import { RouterMetrics } from ${JSON.stringify(pathToFileURL(path.join(here, "metrics.ts")).href)};
      import { RuntimeMetrics } from ${JSON.stringify(pathToFileURL(path.join(here, "runtime.ts")).href)};
      const metrics = new RouterMetrics();
      const runtime = new RuntimeMetrics(metrics);
      const read = () => Number(/^switchyard_event_loop_cpu_wait_seconds_total (\\S+)$/m.exec(metrics.render())?.[1]);
      const w0 = read();
      const t = performance.now();
      while (performance.now() - t < 1000);
      process.stdout.write(String(read() - w0));
      runtime.stop();`;
    const run = (args: string[]) =>
      new Promise<string>((resolve, reject) => {
        const child = spawn("taskset", ["-c", "0", process.execPath, ...args], { stdio: ["ignore", "pipe", "pipe"] });
        let out = "";
        child.stdout.on("data", (d: Buffer) => (out += d));
        child.stderr.on("data", (d: Buffer) => (out += d));
        child.on("error", reject);
        child.on("exit", (code) => (code === 0 ? resolve(out) : reject(new Error(`exit ${code}: ${out}`))));
      });
    const sibling = run(["-e", "const t = Date.now(); while (Date.now() - t < 4000);"]);
    const waited = Number(await run(["--import", "tsx", "--input-type=module", "-e", script]));
    await sibling;
    expect(waited).toBeGreaterThan(0.25);
    expect(waited).toBeLessThan(1.2);
  });

  it("is on /metrics where the kernel keeps schedstat, and left out where it does not", () => {
    const metrics = new RouterMetrics();
    runtime = new RuntimeMetrics(metrics);
    const v = value(metrics.render(), "switchyard_event_loop_cpu_wait_seconds_total");
    expect(v).toBeGreaterThanOrEqual(0);
    expect(v).toBeCloseTo(loopCpuWaitSeconds()!, 1);
    expect(loopCpuWaitSeconds("/proc/self/no-such-file")).toBeUndefined();
  });

  it("bucket counts come from the percentile table: share of samples at or under each bound", () => {
    const h = { count: 200, percentiles: new Map([[0, 1e6], [50, 2e6], [99, 30e6], [100, 120e6]]) };
    expect(loopDelayBuckets(h, [0.001, 0.0025, 0.05, 0.1, 0.25])).toEqual([0, 100, 198, 198, 200]);
    // Samples are whole timer intervals: with a 1 ms resolution, a 2 ms sample is 1 ms late.
    expect(loopDelayBuckets(h, [0, 0.001, 0.029], 1e6)).toEqual([0, 100, 198]);
  });

  it("an estimate that dips as samples come in does not make a cumulative bucket fall", () => {
    // 4999 of 5000 samples under 1 ms, then 26 more of which enough are slow that
    // the table's percentile at 1 ms moves down a step: the estimate dips.
    const before = loopDelayBuckets({ count: 5000, percentiles: new Map([[99.98, 1e6], [100, 5e6]]) }, [0.001]);
    const after = loopDelayBuckets({ count: 5026, percentiles: new Map([[99.2, 1e6], [100, 5e6]]) }, [0.001]);
    expect(after[0]).toBeLessThan(before[0]!);
    const seen: number[] = [];
    expect(heldHighest(seen, before)).toEqual(before);
    expect(heldHighest(seen, after)).toEqual(before);
    expect(heldHighest(seen, [before[0]! + 5])).toEqual([before[0]! + 5]);
  });
});
