// `switchyard bench router --profile DIR` in its CI size: a CPU profile of one
// router under the non-streaming closed loop is written and summarised, then
// the async resources a router creates per request are counted on a second
// run (bench/lib/async-census.mjs): one upstream request per request served,
// and some promises — the figure issue 14's async-layer work is tracked by;
// with the load's GC pauses and the event loop's busy stretches (its stalls);
// then, on a third run, what a request allocates (bench/lib/heap-sample.mjs),
// and on a fourth what a request in flight keeps alive (bench/lib/heap-snapshot.mjs).
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli-run.ts";

describe("switchyard bench router --profile", () => {
  it("writes a CPU profile, prints its top functions, the load's GC pauses and busy stretches, then the async resources, the bytes allocated per request and those a request in flight keeps alive", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sy-profile-"));
    try {
      const { code, out } = await runCli(["bench", "router", "--profile", dir, "--only", "non-streaming", "--quick"]);
      expect(code, out).toBe(0);
      const file = /CPU profile: (\S+\.cpuprofile)/.exec(out)?.[1];
      expect(file && existsSync(file), out).toBe(true);
      expect(out).toMatch(/\| self % \| function \|/);
      // The router's event loop under a closed loop on a shared box: it ran, and sometimes waited for a core (/proc schedstat).
      const waited = /its event loop waited for a CPU (\d+) ms per second \(run queue\)/.exec(out)?.[1];
      expect(Number(waited), out).toBeGreaterThanOrEqual(0);
      expect(Number(waited), out).toBeLessThan(1000);
      const perRequest = (resource: string) => Number(new RegExp(`\\| ${resource.replace(/[()]/g, "\\$&")} \\| ([0-9.]+) \\|`).exec(out)?.[1]);
      expect(out).toMatch(/Async resources created per request \(\d+ requests, non-streaming closed loop/);
      // Each request served made exactly one upstream request: the census counts requests and resources alike.
      expect(perRequest("upstream requests (undici)")).toBeGreaterThan(0.95);
      expect(perRequest("upstream requests (undici)")).toBeLessThan(1.05);
      expect(perRequest("PROMISE")).toBeGreaterThan(1);
      // The load's GC pauses, from the router's own histogram: a 5 s closed
      // loop allocates hundreds of MB, so the young generation was collected.
      const minor = /\| minor \| (\d+) \| ([0-9.]+) \| ([0-9.]+) \|/.exec(out);
      expect(minor, out).not.toBeNull();
      expect(Number(minor![1])).toBeGreaterThan(0);
      expect(Number(minor![3])).toBeCloseTo(Number(minor![2]) / Number(minor![1]), 1);
      // Busy stretches during the load: counted per threshold, each count within the one before.
      const counts = [1, 2, 4, 8, 16].map((ms) => Number(new RegExp(`\\| ${ms} ms \\| (\\d+) \\|`).exec(out)?.[1]));
      expect(counts.every(Number.isFinite), out).toBe(true);
      expect(counts[0]).toBeGreaterThan(0);
      for (let i = 1; i < counts.length; i++) expect(counts[i]).toBeLessThanOrEqual(counts[i - 1]!);
      expect(out).toMatch(/garbage collection is (\d+\.\d|-) % of the stretches ≥ 4 ms and \d+\.\d % of all busy time/);
      // Every worker call of the load, by how long undici held it before its
      // write: as many calls as requests answered, their shares adding up.
      const answered = Number(/non-streaming closed loop, 64 clients, 5s: (\d+)\/\d+ ok/.exec(out)?.[1]);
      const heldAll = /\| \*\*all\*\* \| \*\*(\d+)\*\* \| mean ([0-9.]+) ms \|/.exec(out);
      expect(heldAll, out).not.toBeNull();
      expect(Number(heldAll![1])).toBeGreaterThanOrEqual(answered);
      expect(Number(heldAll![1])).toBeLessThan(answered + 64);
      const shares = [...out.matchAll(/^\| [0-9.]+–(?:[0-9.]+|∞) \| (\d+) \| ([0-9.]+) \|$/gm)];
      expect(shares.length).toBe(11);
      expect(shares.reduce((a, m) => a + Number(m[1]), 0)).toBe(Number(heldAll![1]));
      // What a request allocates, by module (a third run, sampling the heap):
      // tens of KB (request, answer, upstream call, ledger row), with the
      // router's own relay and Node's HTTP among the groups named.
      expect(out).toMatch(/Allocated per request \(\d+ requests, non-streaming closed loop/);
      const all = Number(/\| \*\*all\*\* \| \*\*([0-9.]+)\*\* \| 100\.0 \|/.exec(out)?.[1]);
      expect(all, out).toBeGreaterThan(5);
      expect(all).toBeLessThan(1000);
      expect(out).toMatch(/\| router relay \| [0-9.]+ \| [0-9.]+ \|/);
      expect(out).toMatch(/\| npm undici \| [0-9.]+ \| [0-9.]+ \|/);
      // What a request in flight keeps alive (a fourth run, heap snapshots
      // idle and under the load): its Node request beside its response, and
      // kilobytes of state on the V8 heap.
      expect(out).toMatch(/Kept alive per request in flight \(non-streaming closed loop, 64 clients/);
      const live = /(\d+) requests in flight: (\d+) bytes per request on the V8 heap/.exec(out);
      expect(live, out).not.toBeNull();
      expect(Number(live![1])).toBeGreaterThan(0);
      expect(Number(live![2])).toBeGreaterThan(1000);
      expect(Number(live![2])).toBeLessThan(1_000_000);
      const incoming = Number(/Per request, Node's request and response: ([0-9.]+) IncomingMessage/.exec(out)?.[1]);
      expect(incoming, out).toBeGreaterThan(0.9);
      expect(incoming).toBeLessThan(1.2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);

  it("profiles another stream level with its shape (--levels 1: one stream of 10 tokens), and refuses levels it has not", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sy-profile-"));
    try {
      const { code, out } = await runCli(["bench", "router", "--profile", dir, "--levels", "1", "--quick"]);
      expect(code, out).toBe(0);
      // One stream at a time for 5 s of 20 ms + 10 × 20 ms streams: a couple of dozen, every one answered.
      const load = /^1 streams, 5s: (\d+)\/(\d+) ok, TTFT p50 ([0-9.]+) ms/m.exec(out);
      expect(load, out).not.toBeNull();
      expect(Number(load![2])).toBeGreaterThan(10);
      expect(load![1]).toBe(load![2]);
      // The sim's first token comes after 20 ms at this level (100 streams: 50 ms).
      expect(Number(load![3])).toBeGreaterThanOrEqual(20);
      expect(Number(load![3])).toBeLessThan(50);
      expect(out).toMatch(/Allocated per request \(\d+ requests, 1 streams of 10 tokens/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    for (const [args, message] of [
      [["--levels", "7"], /--levels takes one of the stream levels 1, 100 or 1000, got '7'/],
      [["--levels", "1,100"], /--levels takes one of the stream levels 1, 100 or 1000, got '1,100'/],
      [["--levels", "1000", "--only", "non-streaming"], /--levels goes with the streaming profile/],
    ] as const) {
      const r = await runCli(["bench", "router", "--profile", "/tmp/never-written", ...args]);
      expect(r.code).not.toBe(0);
      expect(r.err).toMatch(message);
    }
  }, 240_000);
});
