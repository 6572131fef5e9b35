// The test kit's /proc readers, on real processes: CPU seconds of a tree and
// the run-queue wait of its main threads (two busy loops sharing one core
// each wait for it about half the time), by command name, and the whole
// box's busy and idle time.
import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, expect, it } from "vitest";
import { cpus } from "node:os";
import { boxCpuSince, boxReading, commandCpuSeconds, runDelayNs, startProc, treeCpuSeconds, treeRunQueueSeconds } from "./procs.ts";

const busy = (ms: number) => `const t = Date.now(); while (Date.now() - t < ${ms});`;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("procs: /proc figures", () => {
  it("counts the run-queue wait of busy loops sharing one core, and none for a sleeper", async () => {
    // Three busy loops pinned to CPU 0: each runs about a third of the time
    // and waits for the core the other two thirds (more if the box puts
    // anything else there) — so the wait is not the run time misread.
    const loops = ["a", "b", "c"].map((n) => startProc("taskset", ["-c", "0", process.execPath, "-e", busy(2500)], {}, `busy-${n}`));
    const idle = startProc(process.execPath, ["-e", "setTimeout(() => {}, 2500)"], {}, "sleeper");
    try {
      await sleep(700); // past node's start
      const w0 = loops.map((p) => p.runQueueSeconds());
      const c0 = loops.map((p) => p.cpuSeconds());
      const i0 = idle.runQueueSeconds();
      await sleep(1000);
      const waited = loops.map((p, i) => p.runQueueSeconds() - w0[i]!);
      const cpu = loops.map((p, i) => p.cpuSeconds() - c0[i]!);
      // One core among them: about a second of CPU in all.
      expect(cpu.reduce((x, y) => x + y)).toBeGreaterThan(0.3);
      expect(cpu.reduce((x, y) => x + y)).toBeLessThan(1.3);
      for (let i = 0; i < loops.length; i++) {
        expect(waited[i], `loop ${i}: waited ${waited[i]} s, ran ${cpu[i]} s`).toBeGreaterThan(0.45);
        expect(waited[i]!, `loop ${i}`).toBeGreaterThan(cpu[i]!);
      }
      expect(idle.runQueueSeconds() - i0).toBeLessThan(0.05);
    } finally {
      await Promise.all([...loops.map((p) => p.stop()), idle.stop()]);
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
      expect(treeCpuSeconds(pid) - c0).toBeGreaterThan(0.3);
    } finally {
      sh.kill("SIGKILL");
      await once(sh, "exit");
    }
  });

  it("adds up the CPU of processes by command name, whoever their parent", async () => {
    // Two busy loops and a sleeper under names of their own (process.title
    // sets /proc/<pid>/comm): the busy pair's CPU is counted, the sleeper
    // adds nothing, and a name nothing runs under counts 0.
    const tag = `sybusy${process.pid % 100000}`;
    const named = (title: string, code: string) => startProc(process.execPath, ["-e", `process.title = ${JSON.stringify(title)}; ${code}`], {}, title);
    const procs = [named(`${tag}a`, busy(2500)), named(`${tag}a`, busy(2500)), named(`${tag}b`, "setTimeout(() => {}, 2500)")];
    try {
      await sleep(700);
      const before = commandCpuSeconds([`${tag}a`, `${tag}b`]);
      await sleep(1000);
      const after = commandCpuSeconds([`${tag}a`, `${tag}b`, `${tag}zz`]);
      // Two loops on two cores for 1 s: well over one core-second unless the box is crowded.
      expect(after[`${tag}a`]! - before[`${tag}a`]!).toBeGreaterThan(0.6);
      expect(after[`${tag}b`]! - before[`${tag}b`]!).toBeLessThan(0.05);
      expect(after[`${tag}zz`]).toBe(0);
    } finally {
      await Promise.all(procs.map((p) => p.stop()));
    }
  });

  it("says NaN for a process that is not there", () => {
    expect(treeRunQueueSeconds(2 ** 22 + 7)).toBeNaN();
    expect(runDelayNs(2 ** 22 + 7)).toBeUndefined();
  });
  it("counts the whole box's time: a busy loop inside its busy share, idle never more than the cores' wall time", async () => {
    // /proc/stat's cpuN lines, as os.cpus() reads them (not the affinity mask).
    const cores = cpus().length;
    const loop = startProc(process.execPath, ["-e", busy(2500)], {}, "busy-box");
    try {
      await sleep(700);
      const r0 = boxReading();
      expect(r0.cores).toBe(cores);
      const c0 = loop.cpuSeconds();
      await sleep(1000);
      const box = boxCpuSince(r0);
      const ran = loop.cpuSeconds() - c0;
      expect(box.wall).toBeGreaterThan(0.95);
      // The loop's own second is part of what the box ran (its figure moves in 10 ms ticks).
      expect(ran).toBeGreaterThan(0.3);
      expect(box.busy).toBeGreaterThan(ran - 0.05);
      // Idle and stolen time is read in the kernel's ticks: at most the cores' wall time.
      expect(box.idle + box.steal).toBeLessThan(box.wall * cores + 0.02);
      expect(box.idle).toBeGreaterThanOrEqual(0);
    } finally {
      await loop.stop();
    }
  });
});
