// Child processes for benchmarks and tests: spawn, wait for a URL to answer,
// read CPU time from /proc, stop; free ports. Part of the test kit.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

/** The repository root, found from this module (sources or the CLI's dist/ bundle). */
export function repoRoot(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(path.join(dir, "bench", "sim-main.ts")) && existsSync(path.join(dir, "package.json"))) return dir;
    dir = path.dirname(dir);
  }
  throw new Error("cannot find the switchyard repository root");
}
import { createServer } from "node:net";

/** Ports this process handed out: never hand the same one out twice (two servers started in parallel). */
const handedOut = new Set<number>();

/** Whether a process with this pid exists (signal 0 checks without sending). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

export async function freePort(): Promise<number> {
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once("error", reject);
      s.listen(0, "127.0.0.1", () => {
        const p = (s.address() as { port: number }).port;
        s.close(() => resolve(p));
      });
    });
    if (handedOut.has(port)) continue;
    handedOut.add(port);
    return port;
  }
}

export interface Proc {
  child: ChildProcess;
  stop(): Promise<void>;
  /** The last 4,000 characters the process wrote, stdout and stderr together. */
  output(): string;
  /**
   * User + system CPU seconds used so far by the process and every process
   * under it (a router's cluster workers; those that ended count through
   * their parent's reaped-children time), from /proc.
   */
  cpuSeconds(): number;
  /**
   * Seconds the main thread of the process and of every live process under
   * it has spent runnable without a CPU (schedstat's run delay): time an
   * event loop had work and waited for a core, which a box running its load
   * generator, upstream and proxy on two cores adds to every latency.
   */
  runQueueSeconds(): number;
}

const CLK_TCK = 100;

/** [ppid, own utime+stime, reaped children's cutime+cstime] in ticks, and the command name, from /proc/<pid>/stat. */
function statOf(pid: number): [number, number, number, string] | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // "pid (comm) state ppid …": the name is what the outermost parentheses hold (it may hold some itself).
    const close = stat.lastIndexOf(")");
    // Fields after the command name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    const f = stat.slice(close + 2).split(" ");
    return [Number(f[1]), Number(f[11]) + Number(f[12]), Number(f[13]) + Number(f[14]), stat.slice(stat.indexOf("(") + 1, close)];
  } catch {
    return undefined;
  }
}

/** `pid` and its live descendants, with their /proc/<pid>/stat figures. */
function processTree(pid: number): Map<number, [number, number, number, string]> {
  const root = statOf(pid);
  const tree = new Map<number, [number, number, number, string]>();
  if (!root) return tree;
  const children = new Map<number, number[]>();
  const stats = new Map<number, [number, number, number, string]>([[pid, root]]);
  for (const name of readdirSync("/proc")) {
    const p = Number(name);
    if (!Number.isInteger(p) || p === pid) continue;
    const st = statOf(p);
    if (!st) continue;
    (children.get(st[0]) ?? children.set(st[0], []).get(st[0])!).push(p);
    stats.set(p, st);
  }
  const todo = [pid];
  while (todo.length) {
    const p = todo.pop()!;
    tree.set(p, stats.get(p)!);
    todo.push(...(children.get(p) ?? []));
  }
  return tree;
}

/** CPU seconds of `pid` and its live descendants, plus the children they have reaped. */
export function treeCpuSeconds(pid: number): number {
  const tree = processTree(pid);
  if (tree.size === 0) return NaN;
  let ticks = 0;
  for (const [, st] of tree) ticks += st[1] + st[2];
  return ticks / CLK_TCK;
}

/**
 * CPU seconds of the processes under each command name in `names`
 * (/proc/<pid>/stat's name), plus the children they have reaped: what the
 * box's shared services (postgres, redis-server) spend while a load runs,
 * counted as the difference of two calls. One pass over /proc for all the
 * names. Postgres runs a process per connection and reaps its exited
 * workers (autovacuum, parallel helpers) into the postmaster's figure, so
 * the sum covers them too.
 */
export function commandCpuSeconds<N extends string>(names: readonly N[]): Record<N, number> {
  const ticks = Object.fromEntries(names.map((n) => [n, 0])) as Record<N, number>;
  for (const entry of readdirSync("/proc")) {
    const p = Number(entry);
    if (!Number.isInteger(p)) continue;
    const st = statOf(p);
    if (st && Object.hasOwn(ticks, st[3])) ticks[st[3] as N] += st[1] + st[2];
  }
  for (const n of names) ticks[n] /= CLK_TCK;
  return ticks;
}

/** A reading of the whole box's CPU time (/proc/stat), to subtract from a later one with boxCpuSince. */
export interface BoxReading {
  /** When it was read, in seconds (monotonic). */
  at: number;
  /** Seconds summed over the cores: idle (I/O wait included), and stolen by the hypervisor. */
  idle: number;
  steal: number;
  /** Cores online. */
  cores: number;
}

/** The box's CPU time between two readings, in seconds summed over its cores. */
export interface BoxCpu {
  /** Running anything: every process, the kernel, interrupts — the cores' time less idle and stolen. */
  busy: number;
  /** Idle, or waiting for I/O with nothing to run. */
  idle: number;
  /** Taken by the hypervisor for other guests while this one had work: a VM's hidden neighbour. */
  steal: number;
  /** Wall seconds between the readings. */
  wall: number;
  /** Idle and stolen as shares of the cores' wall time (0–1). */
  idleShare: number;
  stealShare: number;
}

export function boxReading(): BoxReading {
  const lines = readFileSync("/proc/stat", "utf8").split("\n");
  const f = lines[0]!.trim().split(/\s+/);
  if (f[0] !== "cpu") throw new Error(`unexpected /proc/stat: ${f[0]}`);
  // user nice system idle iowait irq softirq steal …
  const n = (i: number) => Number(f[i]) || 0;
  return { at: performance.now() / 1000, idle: (n(4) + n(5)) / CLK_TCK, steal: n(8) / CLK_TCK, cores: lines.filter((l) => /^cpu\d/.test(l)).length };
}

/**
 * What a load cost the whole machine since `before`: every process and the
 * kernel's network work included. On a box where the load generator and the
 * servers share the cores, the throughput a proxy reaches is bounded by the
 * sum of everyone's CPU per request, not by its own alone; the idle share
 * says whether the box or one thread was the limit. Busy is the cores' wall
 * time less idle and stolen: the kernel times idle exactly, while its busy
 * columns are sampled at each tick and miss work done in bursts between
 * ticks (an open loop's), so they can add up to less than the processes' own
 * figures.
 */
export function boxCpuSince(before: BoxReading): BoxCpu {
  const now = boxReading();
  const wall = now.at - before.at;
  const idle = now.idle - before.idle;
  const steal = now.steal - before.steal;
  const all = wall * now.cores;
  return { busy: Math.max(0, all - idle - steal), idle, steal, wall, idleShare: all > 0 ? idle / all : 0, stealShare: all > 0 ? steal / all : 0 };
}

/**
 * Nanoseconds a thread has waited on a run queue, from
 * /proc/<pid>/task/<tid>/schedstat ("run time, run delay, timeslices"). The
 * router reads its own the same way (observability/runtime.ts); the test kit
 * may not import the router (test/architecture/boundaries.test.ts).
 */
export function runDelayNs(pid: number, tid = pid): number | undefined {
  try {
    const ns = Number(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, "utf8").split(" ")[1]);
    return Number.isFinite(ns) ? ns : undefined;
  } catch {
    return undefined;
  }
}

/** Run-queue seconds of the main threads of `pid` and its live descendants (NaN when /proc has no schedstat). */
export function treeRunQueueSeconds(pid: number): number {
  const tree = processTree(pid);
  if (tree.size === 0) return NaN;
  let ns = 0;
  for (const p of tree.keys()) {
    const d = runDelayNs(p);
    if (d === undefined) {
      if (p === pid) return NaN;
      continue; // a descendant gone since the tree was read
    }
    ns += d;
  }
  return ns / 1e9;
}

export function startProc(cmd: string, args: string[], env: Record<string, string> = {}, label = cmd): Proc {
  const child = spawn(cmd, args, { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
  let tail = "";
  const keep = (d: Buffer) => {
    tail = (tail + d.toString()).slice(-4000);
  };
  child.stdout?.on("data", keep);
  child.stderr?.on("data", keep);
  child.on("exit", (code, sig) => {
    if (code && code !== 0 && sig === null) process.stderr.write(`[${label}] exited ${code}\n${tail}\n`);
  });
  return {
    child,
    output: () => tail,
    cpuSeconds: () => (child.pid === undefined ? NaN : treeCpuSeconds(child.pid)),
    runQueueSeconds: () => (child.pid === undefined ? NaN : treeRunQueueSeconds(child.pid)),
    stop: () =>
      new Promise<void>((resolve) => {
        if (child.exitCode !== null || child.signalCode !== null) return resolve();
        child.once("exit", () => resolve());
        child.kill("SIGTERM");
        setTimeout(() => child.kill("SIGKILL"), 3000).unref();
      }),
  };
}

export async function waitHttp(url: string, opts: { timeoutMs?: number; init?: RequestInit; ok?: (status: number) => boolean } = {}): Promise<number> {
  const t0 = performance.now();
  const deadline = Date.now() + (opts.timeoutMs ?? 30_000);
  for (;;) {
    try {
      const res = await fetch(url, opts.init);
      await res.arrayBuffer();
      if ((opts.ok ?? ((s) => s < 500))(res.status)) return performance.now() - t0;
    } catch {
      // not up yet
    }
    if (Date.now() > deadline) throw new Error(`${url} did not answer in time`);
    await new Promise((r) => setTimeout(r, 10));
  }
}
