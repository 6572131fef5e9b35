// bench/lib/cpuprofile.ts on a profile whose timeline is known: the busy
// stretches `bench router --profile` prints (its stalls) and their GC share.
import { describe, expect, it } from "vitest";
import { busyStretches, type CpuProfile, stretchesTable, topSelfTime } from "../../bench/lib/cpuprofile.ts";

/** A profile of 1 ms ticks: "i" idle, "g" garbage collector, "w" work. */
function profile(ticks: string): CpuProfile {
  const ids = { i: 2, g: 3, w: 4 } as const;
  return {
    nodes: [
      { id: 1, callFrame: { functionName: "(root)", url: "", lineNumber: -1 }, children: [2, 3, 4] },
      { id: 2, callFrame: { functionName: "(idle)", url: "", lineNumber: -1 } },
      { id: 3, callFrame: { functionName: "(garbage collector)", url: "", lineNumber: -1 } },
      { id: 4, callFrame: { functionName: "handle", url: "file:///app.js", lineNumber: 1 } },
    ],
    startTime: 0,
    endTime: ticks.length * 1000,
    samples: [...ticks].map((c) => ids[c as keyof typeof ids]),
    timeDeltas: [...ticks].map(() => 1000),
  };
}

describe("busyStretches", () => {
  it("measures runs of samples without an idle one, and the GC share of the long ones", () => {
    // 1 ms of work; a 5 ms stretch (3 ms GC, then 2 of the work queued behind it); a 2 ms one.
    const s = busyStretches(profile("iwiggg" + "wwiiwwi"));
    expect(s.atLeast).toEqual([
      { ms: 1, count: 3, totalMs: 8 },
      { ms: 2, count: 2, totalMs: 7 },
      { ms: 4, count: 1, totalMs: 5 },
      { ms: 8, count: 0, totalMs: 0 },
      { ms: 16, count: 0, totalMs: 0 },
    ]);
    expect(s.busyMs).toBe(8);
    expect(s.gcInLongPct).toBeCloseTo(60, 5);
    expect(s.gcInAllPct).toBeCloseTo(37.5, 5);
    expect(stretchesTable(s)).toContain("| 4 ms | 1 | ");
  });

  it("looks only at the window asked for: a stretch is cut where the window ends", () => {
    // Startup (8 ms of work) before the window, then 3 ms busy inside it.
    const s = busyStretches(profile("wwwwwwwwi" + "iwwwi"), 9, 14);
    expect(s.atLeast[0]).toEqual({ ms: 1, count: 1, totalMs: 3 });
    expect(s.atLeast[2]!.count).toBe(0);
    expect(s.busyMs).toBe(3);
    expect(Number.isNaN(s.gcInLongPct)).toBe(true);
  });
});

describe("topSelfTime", () => {
  it("counts self time inside the window only: a warm-up's work before it is not the load's", () => {
    // 8 ms of GC before the window (a router warming up), then 3 ms of work and 1 of GC in it.
    const prof = profile("gggggggg" + "wwwgii");
    const all = topSelfTime(prof, 3, "/");
    expect(all.split("\n")[2]).toContain("(garbage collector)");
    const windowed = topSelfTime(prof, 3, "/", 9, 15).split("\n");
    expect(windowed[2]).toBe("| 60.0 | `handle /app.js:2` |");
    expect(windowed[3]).toBe("| 20.0 | `(garbage collector)` |");
  });
});
