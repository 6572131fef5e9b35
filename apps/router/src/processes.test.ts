// Adding up router processes' metrics: counters and histogram series summed,
// gauges by their merge (sum or max), CPU per request from the sums; the
// node flags a forked router process runs with.
import { describe, expect, it } from "vitest";
import { RouterMetrics } from "./observability/metrics.ts";
import { mergeMetrics, ROUTER_SEMI_SPACE_MB, routerExecArgv } from "./processes.ts";

describe("routerExecArgv", () => {
  const flag = `--max-semi-space-size=${ROUTER_SEMI_SPACE_MB}`;

  it("keeps the primary's own flags and adds the router's semi-space after them", () => {
    expect(routerExecArgv([], "")).toEqual([flag]);
    expect(routerExecArgv(["--cpu-prof", "--cpu-prof-dir=/tmp/p"], "--enable-source-maps")).toEqual(["--cpu-prof", "--cpu-prof-dir=/tmp/p", flag]);
  });

  it("leaves an operator's semi-space alone, on node's command line or in NODE_OPTIONS, in either spelling", () => {
    expect(routerExecArgv(["--max-semi-space-size=16"], "")).toEqual(["--max-semi-space-size=16"]);
    expect(routerExecArgv(["--max_semi_space_size", "8"], "")).toEqual(["--max_semi_space_size", "8"]);
    expect(routerExecArgv(["--inspect"], "--max-old-space-size=512 --max-semi-space-size=32")).toEqual(["--inspect"]);
    expect(routerExecArgv([], "--max-semi-space-size 32")).toEqual([]);
    // Another flag that merely starts alike is not one.
    expect(routerExecArgv([], "--max-semi-space-sizes=1")).toEqual([flag]);
  });
});

describe("mergeMetrics", () => {
  it("sums counters and histograms, takes the max of max-gauges and max-counters, recomputes CPU per request", () => {
    const a = new RouterMetrics();
    const b = new RouterMetrics();
    a.requests.inc({ route: "/v1/chat/completions", status: "200" }, 3);
    b.requests.inc({ route: "/v1/chat/completions", status: "200" }, 5);
    b.requests.inc({ route: "/v1/embeddings", status: "200" }, 2);
    a.duration.observe({ route: "r" }, 0.02);
    b.duration.observe({ route: "r" }, 2);
    a.workers.set({ state: "ready" }, () => 3);
    b.workers.set({ state: "ready" }, () => 3);
    a.admissionQueueDepth.set({ pool: "m", band: "batch" }, () => 4);
    b.admissionQueueDepth.set({ pool: "m", band: "batch" }, () => 1);
    // Each process's CPU since it started: its start-up (half a second here) included, which no request spent.
    a.cpuSeconds.source(() => 1.5);
    b.cpuSeconds.source(() => 3.5);
    a.cpuPerRequest.set({}, () => 1 / 3);
    b.cpuPerRequest.set({}, () => 3 / 7);
    // The kernel's count for the namespace both processes share: each reads the same overflows.
    a.listenOverflows.source(() => 7);
    b.listenOverflows.source(() => 6);
    const merged = mergeMetrics([a.render(), b.render()], (n) => (a.all().find((m) => m.name === n) as { merge?: "sum" | "max" }).merge ?? "sum");
    const v = (s: string) => Number(merged.split("\n").find((l) => l.startsWith(`${s} `))?.slice(s.length + 1));
    expect(v('switchyard_requests_total{route="/v1/chat/completions",status="200"}')).toBe(8);
    expect(v('switchyard_requests_total{route="/v1/embeddings",status="200"}')).toBe(2);
    expect(v('switchyard_request_duration_seconds_bucket{route="r",le="0.025"}')).toBe(1);
    expect(v('switchyard_request_duration_seconds_bucket{route="r",le="+Inf"}')).toBe(2);
    expect(v('switchyard_request_duration_seconds_count{route="r"}')).toBe(2);
    expect(v('switchyard_workers{state="ready"}')).toBe(3);
    expect(v('switchyard_admission_queue_depth{band="batch",pool="m"}')).toBe(5);
    expect(v("process_cpu_seconds_total")).toBe(5);
    // Per request: the CPU each spent serving (its figure × its requests: 1 and 3 s) over all 10 requests.
    expect(v("switchyard_cpu_seconds_per_request")).toBeCloseTo(0.4, 12);
    expect(v("switchyard_listen_overflows_total")).toBe(7);
    // One HELP and one TYPE per family.
    expect(merged.match(/# TYPE switchyard_requests_total counter/g)).toHaveLength(1);
  });
});
