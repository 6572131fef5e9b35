// `switchyard bench router --against REV`: this checkout's router and the
// router of another commit, side by side in one run, with the bare Node
// proxy as the floor. Issue 14 asks for every hot-path change measured
// before/after in one run; on a shared 2-core box the spread between runs
// is larger than most single changes, so the two builds take turns: round
// after round, the bare proxy first, then the builds in alternating order,
// each target started afresh with its own sim worker, gets the same closed loop
// (and, unless --only non-streaming, the same open loop of 100 streams, or
// of another level with --levels N), and CPU
// time per request (user + system of the process, from /proc) is the figure
// that compares them. REV is checked out into a temporary git worktree whose
// node_modules links to this checkout's, except its own workspace packages
// (which must be its own sources), and removed at the end.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readlinkSync, rmSync, symlinkSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import path from "node:path";
import { benchMessages, causesText, closedLoop, openLoop, percentile, type Target } from "./lib/load.ts";
import { boxCpuSince, boxReading, commandCpuSeconds, freePort, repoRoot, startProc, waitHttp, type Proc } from "#testkit/procs";
import { routerExecArgv } from "@switchyard/router";
import { routerSeesWorker } from "./router.ts";
import { benchScratch, endBench } from "./lib/scratch.ts";
import { arrivalRate, levelOf } from "./lib/levels.ts";
import { winsOf } from "./lib/sign-test.ts";

const REDIS = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";
const SERVICES = ["postgres", "redis-server"] as const;
const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");

export interface AgainstOptions {
  /** A commit (anything `git rev-parse` takes) whose router runs beside this checkout's. */
  against: string;
  quick: boolean;
  /** "non-streaming": only the closed loop. */
  only?: "non-streaming";
  /** Interleaved rounds (default 4, 2 with quick): more of them when the box is noisy. */
  rounds?: number;
  /** Unmeasured rounds first (default 0: every round's processes are warmed before they are measured). */
  warm?: number;
  /** The bench tenant with rate limits that never bind: every request taken and settled in Redis (the limiter's cost on the path). */
  rateLimits?: boolean;
  /** The stream level of each round's streaming loop (one of STREAM_LEVELS; default 100), with that level's shape. */
  streams?: number;
  /** Node flags for REV's router in place of the router's own (routerExecArgv): a node setting's before/after, against HEAD. */
  againstNodeFlags?: string[];
  /** Environment for REV's router only (router settings as SWITCHYARD_… variables): a setting's before/after, against HEAD. */
  againstEnv?: Record<string, string>;
  /** Every request (the closed loop's and the streams') carries a conversation of about this many KB (benchMessages) instead of one short message. */
  bodyKb?: number;
  /**
   * Whole answers at this many a second, an open loop, instead of the
   * 64-client closed loop. A proxy's CPU per answer falls as its load rises
   * (more requests share each turn of its event loop and each system call),
   * and the closed loop runs a slower target at a lower load: at one rate,
   * every target's figures, and the sim worker's and load generator's, are
   * per answer at the same load.
   */
  rate?: number;
  log?: (line: string) => void;
}

/** A worktree of `rev` that resolves its own workspace packages and every other dependency from `root`'s node_modules. */
function checkoutOf(root: string, rev: string): { dir: string; sha: string; remove(): void } {
  let sha: string;
  try {
    sha = execFileSync("git", ["-C", root, "rev-parse", "--verify", `${rev}^{commit}`], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).trim();
  } catch {
    throw new Error(`bench router --against: '${rev}' names no commit in ${root}`);
  }
  const dir = mkdtempSync(path.join(tmpdir(), "sy-against-"));
  execFileSync("git", ["-C", root, "worktree", "add", "--detach", "--force", dir, sha], { stdio: "ignore" });
  const remove = () => {
    try {
      execFileSync("git", ["-C", root, "worktree", "remove", "--force", dir], { stdio: "ignore" });
    } catch {
      rmSync(dir, { recursive: true, force: true });
    }
  };
  try {
    const nm = path.join(root, "node_modules");
    const own = path.join(dir, "node_modules");
    mkdirSync(own);
    for (const entry of readdirSync(nm)) {
      if (entry === "@switchyard") continue;
      symlinkSync(path.join(nm, entry), path.join(own, entry));
    }
    // The workspace links are relative (../../apps/router): the same links here point into the other commit's sources.
    mkdirSync(path.join(own, "@switchyard"));
    for (const pkg of readdirSync(path.join(nm, "@switchyard"))) symlinkSync(readlinkSync(path.join(nm, "@switchyard", pkg)), path.join(own, "@switchyard", pkg));
  } catch (err) {
    remove();
    throw err;
  }
  return { dir, sha, remove };
}

/** With --rate-limits, a build that answers without x-ratelimit-* headers is not counting: its figures would not be what was asked for. */
async function countsRate(url: string, auth: Record<string, string>, name: string): Promise<void> {
  const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", headers: { ...auth, "content-type": "application/json" }, body: JSON.stringify({ model: "sim", messages: [{ role: "user", content: "hi" }] }) });
  await res.arrayBuffer();
  if (res.status !== 200 || res.headers.get("x-ratelimit-limit-requests") === null) {
    throw new Error(`bench router --against --rate-limits: ${name} answered ${res.status} without x-ratelimit-limit-requests (a commit from before rate limits?)`);
  }
}

/** Each round's value over the other's in the same round. */
const paired = (xs: number[], ys: number[]): number[] => xs.map((x, i) => x / ys[i]!);

export async function runRouterAgainst(opts: AgainstOptions): Promise<number> {
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const root = repoRoot();
  const here = execFileSync("git", ["-C", root, "rev-parse", "--short", "HEAD"], { encoding: "utf8" }).trim();
  const dirty = execFileSync("git", ["-C", root, "status", "--porcelain", "--untracked-files=no"], { encoding: "utf8" }).trim() !== "";
  log(`checking out ${opts.against} into a temporary worktree`);
  const other = checkoutOf(root, opts.against);
  const scratch = await benchScratch("against").catch((err: unknown) => {
    other.remove();
    throw err;
  });
  const procs: Proc[] = [];
  try {
    const key = await scratch.tenantKey("bench", { rateLimits: opts.rateLimits === true });
    // Every target its own sim worker, started afresh with it (each build's
    // heartbeating on the build's own prefix): a worker process has its own
    // luck too, and how fast it answers sets how many answers the proxy
    // reads per wake-up, so its CPU per request.
    const startSim = async (label: string, prefix?: string): Promise<{ sim: Proc; simUrl: string }> => {
      const simPort = await freePort();
      const sim = startProc(process.execPath, ["--import", "tsx", path.join(root, "bench/sim-main.ts")], { PORT: String(simPort), TOKENS: "5", ...(prefix ? { REDIS_URL: REDIS, PREFIX: prefix } : {}) }, label);
      procs.push(sim);
      const simUrl = `http://127.0.0.1:${simPort}`;
      await waitHttp(`${simUrl}/healthz`, { ok: () => true });
      return { sim, simUrl };
    };
    const auth = { authorization: `Bearer ${key}` };
    // A target is started afresh for every round and stopped after it: one
    // router process carries its own luck through all the rounds it serves
    // (where V8 placed its heap, what its JIT inlined while warming), and an
    // A/A run of one commit against itself came out 7 % apart one run and
    // 4 % the other way the next, each in every round. A process per round
    // makes the rounds independent draws, so "less in N of M rounds" counts
    // something. Only the measured target runs while it is measured.
    interface Started {
      t: Target;
      proc: Proc;
      sim: Proc;
      simUrl: string;
    }
    interface Slot {
      name: string;
      start(): Promise<Started>;
    }
    const slots: Slot[] = [
      {
        name: "node-passthrough",
        async start() {
          const { sim, simUrl } = await startSim("sim");
          const port = await freePort();
          const proc = startProc(process.execPath, ["--import", "tsx", path.join(root, "bench/passthrough-main.ts")], { PORT: String(port), UPSTREAM: simUrl }, "passthrough");
          procs.push(proc);
          const url = `http://127.0.0.1:${port}`;
          await waitHttp(`${url}/v1/models`, { ok: () => true });
          return { t: { name: "node-passthrough", url, path: "/v1/chat/completions", headers: {} }, proc, sim, simUrl };
        },
      },
    ];
    const ownFlags = routerExecArgv([]);
    const againstFlags = opts.againstNodeFlags ?? ownFlags;
    const flagged = (flags: string[]) => (opts.againstNodeFlags ? ` node ${flags.join(" ") || "(no flags)"}` : "");
    const withEnv = opts.againstEnv && Object.keys(opts.againstEnv).length > 0 ? ` ${Object.entries(opts.againstEnv).map(([k, v]) => `${k}=${v}`).join(" ")}` : "";
    const builds: Array<[string, string, string[], Record<string, string>]> = [
      [`${other.sha.slice(0, 7)} (${opts.against})${flagged(againstFlags)}${withEnv}`, other.dir, againstFlags, opts.againstEnv ?? {}],
      [`${here}${dirty ? "+changes" : ""} (this checkout)${flagged(ownFlags)}`, root, ownFlags, {}],
    ];
    for (const [i, [name, dir, nodeFlags, extraEnv]] of builds.entries()) {
      // Each build its own Redis prefix, so its own ledger stream and its own
      // sim worker heartbeating there: routers on one prefix share the
      // ledger drain, and the idle build would take up rows of the loaded one
      // (6–9 µs of its CPU per request went uncounted that way).
      const prefix = `${scratch.prefix}b${i}:`;
      if (!existsSync(path.join(dir, "apps/cli/bin/switchyard.mjs"))) throw new Error(`${name}: no apps/cli/bin/switchyard.mjs (a commit from before the CLI)`);
      let started = false;
      slots.push({
        name,
        async start() {
          // The sim first: its first heartbeat has replaced the last round's record (one worker id) before the router reads the registry.
          const { sim, simUrl } = await startSim(`sim ${name}`, prefix);
          const port = await freePort();
          const env = {
            DATABASE_URL: scratch.dbUrl,
            REDIS_URL: REDIS,
            SWITCHYARD_REDIS__KEY_PREFIX: prefix,
            SWITCHYARD_ROUTER__PORT: String(port),
            SWITCHYARD_ROUTER__ADMIN_PORT: String(await freePort()),
            SWITCHYARD_LOG__LEVEL: "warn",
            ...extraEnv,
          };
          if (!started) log(`starting ${name}'s router (its first start bundles its sources)`);
          // Both builds with this checkout's node flags (the comparison is of their code), unless --against-node-flags.
          const proc = startProc(process.execPath, [...nodeFlags, path.join(dir, "apps/cli/bin/switchyard.mjs"), "router", "--processes", "1"], env, name);
          procs.push(proc);
          const url = `http://127.0.0.1:${port}`;
          // The first start of a commit bundles its sources (esbuild): allow for it.
          await waitHttp(`${url}/v1/models`, { init: { headers: auth }, ok: (s) => s === 200, timeoutMs: 120_000 });
          await routerSeesWorker(url, auth);
          if (opts.rateLimits && !started) await countsRate(url, auth, name);
          started = true;
          return { t: { name, url, path: "/v1/chat/completions", headers: auth }, proc, sim, simUrl };
        },
      });
    }
    const messages = benchMessages(opts.bodyKb);
    const nsBody = JSON.stringify({ model: "sim", messages });
    const level = levelOf(opts.streams ?? 100, "bench router --against");
    const shape = level.shape;
    const stBody = JSON.stringify({ model: "sim", stream: true, messages, sim: shape });
    const rounds = opts.rounds ?? (opts.quick ? 2 : 4);
    const durationS = opts.quick ? 3 : 5;
    // Every fresh process runs each of its loops unmeasured first (JIT, pools):
    // a process's first seconds cost far more per request.
    const warmS = opts.quick ? 2 : 4;
    const rows: string[] = [];
    /** The rounds' errors by cause, where there were any (the tables count them). */
    const causeRows: string[] = [];
    // Each target's figures, one entry per counted round (a warm-up round's go nowhere).
    const figures = () => ({ p50: [] as number[], p99: [] as number[], errs: [] as number[], ns: [] as number[], pg: [] as number[], redis: [] as number[], sim: [] as number[], load: [] as number[], box: [] as number[], idle: [] as number[], steal: [] as number[], st: [] as number[], rps: [] as number[], dttft99: [] as number[], waited: [] as number[] });
    const cpu: Record<string, ReturnType<typeof figures>> = {};
    // Rounds before the first are the warm-up (--warm, default none: each round's processes are warmed already): the same loops, in the same order, not counted.
    const warmRounds = opts.warm ?? 0;
    const streamCols = opts.only !== "non-streaming";
    for (let round = 1 - warmRounds; round <= rounds; round++) {
      const counted = round >= 1;
      // The floor first, then the two builds, each first in every other
      // round: neither build always follows the same target. An A/A run of
      // one commit against itself came out 16 % apart with the order
      // reversed every round.
      const [floor, ...pair] = slots;
      const order = [floor!, ...(round % 2 === 0 ? [...pair].reverse() : pair)];
      for (const slot of order) {
        const c = counted ? (cpu[slot.name] ??= figures()) : figures();
        const { t, proc, sim, simUrl } = await slot.start();
        log(`round ${round}: ${t.name} in process ${proc.child.pid}`);
        await closedLoop(t, { clients: 64, durationS: warmS, body: nsBody, stream: false });
        const rate = streamCols ? arrivalRate(level) : 0;
        if (streamCols) await openLoop(t, { ratePerS: rate, durationS: warmS, body: stBody, stream: true });
        const load = loadavg()[0]!;
        // What Postgres and Redis spend per whole answer during the closed
        // loop: the ledger's INSERT, the streams and counters run on the same
        // two cores as the router, the load and the sim worker, and a change
        // that moves work from the router into them must show there.
        const svc0 = commandCpuSeconds(SERVICES);
        // And the rest of the box: the sim worker, this process (the load
        // generator), and every core's busy and idle time. On two shared cores
        // a target's throughput is bounded by what the whole box spends per
        // answer, not by its own CPU alone.
        const c0 = proc.cpuSeconds();
        const sim0 = sim.cpuSeconds();
        const load0 = process.cpuUsage();
        const box0 = boxReading();
        const r = opts.rate ? await openLoop(t, { ratePerS: opts.rate, durationS, body: nsBody, stream: false }) : await closedLoop(t, { clients: 64, durationS, body: nsBody, stream: false });
        // Read back in the reverse order, the /proc scan last: each figure's window is the loop's, give or take the others' reads.
        const box = boxCpuSince(box0);
        const loadUse = process.cpuUsage(load0);
        const simS = sim.cpuSeconds() - sim0;
        const procS = proc.cpuSeconds() - c0;
        const svc = commandCpuSeconds(SERVICES);
        const n = Math.max(1, r.samples.length);
        const nsCpu = (procS * 1000) / n;
        const pgCpu = ((svc.postgres - svc0.postgres) * 1000) / n;
        const redisCpu = ((svc["redis-server"] - svc0["redis-server"]) * 1000) / n;
        c.pg.push(pgCpu);
        c.redis.push(redisCpu);
        c.sim.push((simS * 1000) / n);
        c.load.push((loadUse.user + loadUse.system) / 1000 / n);
        c.box.push((box.busy * 1000) / n);
        c.idle.push(100 * box.idleShare);
        c.steal.push(100 * box.stealShare);
        const ok = r.samples.filter((s) => s.ok);
        // How long the whole answers that came took (a target refusing some fast answers the rest sooner).
        const took = ok.map((s) => s.totalMs);
        const p50 = percentile(took, 50);
        const p99 = percentile(took, 99);
        c.p50.push(p50);
        c.p99.push(p99);
        c.errs.push(r.errors);
        c.ns.push(nsCpu);
        c.rps.push(ok.length / r.wallS);
        let st = "";
        let stErrors = "";
        if (streamCols) {
          // ΔTTFT against this target's own sim worker, just before.
          const d = await openLoop({ name: "direct", url: simUrl, path: "/v1/chat/completions", headers: {} }, { ratePerS: rate, durationS, body: stBody, stream: true });
          const s0 = proc.cpuSeconds();
          const w0 = proc.runQueueSeconds();
          const sr = await openLoop(t, { ratePerS: rate, durationS, body: stBody, stream: true });
          const stCpu = ((proc.cpuSeconds() - s0) * 1000) / Math.max(1, sr.samples.length);
          const waited = ((proc.runQueueSeconds() - w0) * 1000) / sr.wallS;
          const p99 = (xs: { ok: boolean; ttftMs: number }[]) => percentile(xs.filter((x) => x.ok).map((x) => x.ttftMs), 99);
          const dt = p99(sr.samples) - p99(d.samples);
          c.st.push(stCpu);
          c.dttft99.push(dt);
          c.waited.push(waited);
          st = ` ${fmt(stCpu, 3)} | ${fmt(dt, 2)} | ${fmt(waited, 0)} | ${sr.errors} |`;
          stErrors = causesText(sr.causes);
        }
        await proc.stop();
        await sim.stop();
        if (counted && r.errors > 0) causeRows.push(`- round ${round}, ${t.name}, whole answers: ${causesText(r.causes)}`);
        if (counted && stErrors) causeRows.push(`- round ${round}, ${t.name}, streams: ${stErrors}`);
        if (counted) rows.push(`| ${round} | ${t.name} | ${fmt(load, 2)} | ${fmt(ok.length / r.wallS, 0)} | ${r.errors} | ${fmt(p50, 1)} | ${fmt(p99, 1)} | ${fmt(nsCpu, 3)} | ${fmt(pgCpu, 3)} | ${fmt(redisCpu, 3)} |${st}`);
      }
      log(counted ? `round ${round} of ${rounds} done` : "warm-up round done");
    }
    const med = (xs: number[]) => percentile(xs, 50);
    const out = [
      `### Router against ${other.sha.slice(0, 7)} (${opts.against}), interleaved: ${rounds} rounds after ${warmRounds} unmeasured warm-up round(s), every target a fresh process per round warmed by ${warmS} s of each loop, ${durationS} s per loop, ${opts.rate ? `whole answers at ${opts.rate}/s open loop (warmed by the 64-client closed loop)` : "64 clients closed loop"}${opts.bodyKb ? ` (each request, whole or streamed, a ${nsBody.length}-byte conversation of ${messages.length} messages)` : ""}${opts.rateLimits ? ", rate limits on (every request counted in Redis, none refused)" : ""}${streamCols ? ` + ${level.streams} streams open loop (ΔTTFT p99 against the sim worker measured just before)` : ""}`,
      "",
      `| round | target | load (1 min) | non-streaming req/s | errors | answered p50 ms | answered p99 ms | non-streaming CPU ms/req | Postgres CPU ms/req | Redis CPU ms/req |${streamCols ? " streaming CPU ms/req | ΔTTFT p99 ms | streaming: waited for a CPU (ms/s) | stream errors |" : ""}`,
      `|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|${streamCols ? "---:|---:|---:|---:|" : ""}`,
      ...rows,
      "",
      ...(causeRows.length > 0 ? ["Errors by cause (status and the error code the answer named, or the socket's error):", "", ...causeRows, ""] : []),
      `Medians over the rounds:`,
      "",
      `| target | non-streaming req/s | errors | answered p50 ms | answered p99 ms | non-streaming CPU ms/req | × bare proxy | × bare proxy, paired | Postgres CPU ms/req | Redis CPU ms/req |${streamCols ? " streaming CPU ms/req | ΔTTFT p99 ms | streaming: waited for a CPU (ms/s) |" : ""}`,
      `|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|${streamCols ? "---:|---:|---:|" : ""}`,
      ...slots.map(({ name }) => {
        const c = cpu[name]!;
        const bare = cpu["node-passthrough"]!.ns;
        return `| ${name} | ${fmt(med(c.rps), 0)} | ${fmt(med(c.errs), 0)} | ${fmt(med(c.p50), 1)} | ${fmt(med(c.p99), 1)} | ${fmt(med(c.ns), 3)} | ${fmt(med(c.ns) / med(bare), 2)} | ${fmt(med(paired(c.ns, bare)), 2)} | ${fmt(med(c.pg), 3)} | ${fmt(med(c.redis), 3)} |${streamCols ? ` ${fmt(med(c.st), 3)} | ${fmt(med(c.dttft99), 2)} | ${fmt(med(c.waited), 0)} |` : ""}`;
      }),
    ];
    // The whole answers' CPU budget, process by process: when the box has no
    // idle left, req/s is its cores over the box's busy time per answer, so a
    // proxy's cost reaches throughput through everyone's (issue 14's 0.7×).
    out.push(
      "",
      `The whole box during the ${opts.rate ? `loop of ${opts.rate} whole answers a second` : "closed loop"}, CPU ms per whole answer (medians over the rounds; "rest": the kernel's network work and whatever else runs on the box):`,
      "",
      "| target | req/s | proxy | sim worker | load generator | Postgres | Redis | rest | box busy | × bare proxy | box idle % | stolen % |",
      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
      ...slots.map(({ name }) => {
        const c = cpu[name]!;
        const rest = c.box.map((b, i) => b - c.ns[i]! - c.sim[i]! - c.load[i]! - c.pg[i]! - c.redis[i]!);
        return `| ${name} | ${fmt(med(c.rps), 0)} | ${fmt(med(c.ns), 3)} | ${fmt(med(c.sim), 3)} | ${fmt(med(c.load), 3)} | ${fmt(med(c.pg), 3)} | ${fmt(med(c.redis), 3)} | ${fmt(med(rest), 3)} | ${fmt(med(c.box), 3)} | ${fmt(med(paired(c.box, cpu["node-passthrough"]!.box)), 2)} | ${fmt(med(c.idle), 1)} | ${fmt(med(c.steal), 1)} |`;
      }),
    );
    // Paired by round (the same minute of the box): how often this checkout
    // used less CPU than REV (and had the lower ΔTTFT p99), each count with
    // its sign test, and the median of the rounds' ratios — the
    // box's speed drifts by more than most changes between rounds, less
    // within one.
    const [, a, b] = slots;
    // Rounds where the two tied say nothing either way: the sign test leaves them out.
    const split = (k: "ns" | "st" | "dttft99") => {
      const xs = cpu[b!.name]![k];
      const ys = cpu[a!.name]![k];
      const lower = xs.filter((x, i) => x < ys[i]!).length;
      const tied = xs.filter((x, i) => x === ys[i]!).length;
      return `${winsOf(lower, rounds - tied)}${tied > 0 ? `, ${tied} tied` : ""}`;
    };
    const ratio = (k: "ns" | "st") => fmt(med(paired(cpu[b!.name]![k], cpu[a!.name]![k])), 3);
    out.push(
      "",
      `${b!.name} against ${a!.name}: non-streaming, less CPU per request in ${split("ns")}, median of the rounds' ratios ${ratio("ns")}×` +
        `${streamCols ? `; streaming, less CPU per stream in ${split("st")}, ${ratio("st")}×; the lower ΔTTFT p99 in ${split("dttft99")}` : ""}. "Paired": the median of each round's ratio to the bare proxy.`,
      `A sign test's p is the chance that two builds which cost the same would split the rounds at least this unevenly: above ~0.1 the count is what a coin gives.`,
    );
    process.stdout.write(out.join("\n") + "\n");
    return 0;
  } finally {
    await endBench(procs, scratch);
    other.remove();
  }
}
