// The test kit's /proc readers, on real processes: CPU seconds of a tree and
// the run-queue wait of its main threads (two busy loops sharing one core
// each wait for it about half the time).
import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { runDelayNs, startProc, treeCpuSeconds, treeRunQueueSeconds } from "./procs.ts";

const busy = (ms: number) => `const t = Date.now(); while (Date.now() - t < ${ms});`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("procs: /proc figures", () => {
  it("counts the run-queue wait of busy loops sharing one core, little for one alone, none for a sleeper", async () => {
    // a and b both on CPU 0: whenever one runs, the other waits. c has CPU 1 to itself (mostly: the box runs other things).
    const a = startProc("taskset", ["-c", "0", process.execPath, "-e", busy(2500)], {}, "busy-a");
    const b = startProc("taskset", ["-c", "0", process.execPath, "-e", busy(2500)], {}, "busy-b");
    const c = startProc("taskset", ["-c", "1", process.execPath, "-e", busy(2500)], {}, "busy-c");
    const idle = startProc(process.execPath, ["-e", "setTimeout(() => {}, 2500)"], {}, "sleeper");
    try {
      await sleep(700); // past node's start
      const w0 = [a.runQueueSeconds(), b.runQueueSeconds(), idle.runQueueSeconds(), c.runQueueSeconds()];
      const c0 = a.cpuSeconds() + b.cpuSeconds();
      const cc0 = c.cpuSeconds();
      await sleep(1000);
      const w = [a.runQueueSeconds() - w0[0]!, b.runQueueSeconds() - w0[1]!, idle.runQueueSeconds() - w0[2]!, c.runQueueSeconds() - w0[3]!];
      const cpu = a.cpuSeconds() + b.cpuSeconds() - c0;
      // Running is not waiting: c ran nearly the whole second and waited little.
      expect(c.cpuSeconds() - cc0).toBeGreaterThan(0.7);
      expect(w[3]!).toBeLessThan(0.3);
      // One core between them: ~1 s of CPU in all, ~0.5 s of waiting each.
      expect(cpu).toBeGreaterThan(0.6);
      expect(cpu).toBeLessThan(1.3);
      expect(w[0]! + w[1]!).toBeGreaterThan(0.6);
      expect(w[0]!).toBeGreaterThan(0.2);
      expect(w[1]!).toBeGreaterThan(0.2);
      expect(w[2]!).toBeLessThan(0.05);
    } finally {
      await Promise.all([a.stop(), b.stop(), c.stop(), idle.stop()]);
    }
  });

  it("adds up the main threads of a process tree (a parent whose children wait)", async () => {
    // A shell that waits for two busy children on one core: its own main thread sleeps.
    const script = `taskset -c 0 ${process.execPath} -e '${busy(2500)}' & taskset -c 0 ${process.execPath} -e '${busy(2500)}' & wait`;
    const sh = spawn("sh", ["-c", script], { stdio: "ignore" });
    try {
      await sleep(700);
      const pid = sh.pid!;
      const t0 = treeRunQueueSeconds(pid);
      const own0 = runDelayNs(pid)!;
      const c0 = treeCpuSeconds(pid);
      await sleep(1000);
      expect(treeRunQueueSeconds(pid) - t0).toBeGreaterThan(0.6);
      expect((runDelayNs(pid)! - own0) / 1e9).toBeLessThan(0.05);
      expect(treeCpuSeconds(pid) - c0).toBeGreaterThan(0.6);
    } finally {
      sh.kill("SIGKILL");
      await once(sh, "exit");
    }
  });

  it("says NaN for a process that is not there", () => {
    expect(treeRunQueueSeconds(2 ** 22 + 7)).toBeNaN();
    expect(runDelayNs(2 ** 22 + 7)).toBeUndefined();
  });
});
