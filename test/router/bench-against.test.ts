// `switchyard bench router --against REV` in its CI size, as users run it:
// REV's router (its own sources, from a temporary worktree) and this
// checkout's take turns beside the bare proxy, every request answered, and
// the table says how much CPU each spent per request. The worktree is gone
// afterwards.
import { execFileSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { ROUTER_SEMI_SPACE_MB } from "@switchyard/router";
import { runCli } from "../helpers/cli-run.ts";

const root = path.resolve(import.meta.dirname, "../..");
const worktrees = () => execFileSync("git", ["-C", root, "worktree", "list", "--porcelain"], { encoding: "utf8" }).split("\n").filter((l) => l.startsWith("worktree ")).length;

describe("switchyard bench router --against", () => {
  it("runs REV's router and this checkout's in turns, every request answered, CPU per request beside the bare proxy's; leaves no worktree", async () => {
    const before = worktrees();
    // With --rate-limits: each build was checked to count requests (x-ratelimit-* on an answer) before its loops.
    // With --against-node-flags: REV's router runs with V8's own semi-space, this checkout's with the router's.
    // With --against-env: REV's router holds one request at a time (router.maxInFlight), and refuses the closed loop's others.
    const { code, out, err } = await runCli(["bench", "router", "--against", "HEAD", "--quick", "--only", "non-streaming", "--rate-limits", "--against-node-flags=--max-semi-space-size=16", "--against-env=SWITCHYARD_ROUTER__MAX_IN_FLIGHT=1"]);
    expect(code).toBe(0);
    // Every target ran in a process of its own in each round: six processes for three targets over two rounds.
    const started = [...err.matchAll(/^round ([12]): (.+) in process (\d+)$/gm)].map((m) => ({ round: m[1], name: m[2], pid: m[3] }));
    expect(started, err).toHaveLength(6);
    expect(new Set(started.map((s) => s.pid)).size).toBe(6);
    const sha = execFileSync("git", ["-C", root, "rev-parse", "--short=7", "HEAD"], { encoding: "utf8" }).trim();
    expect(out).toContain(`### Router against ${sha} (HEAD), interleaved: 2 rounds after 0 unmeasured warm-up round(s), every target a fresh process per round`);
    expect(out).toContain("rate limits on (every request counted in Redis, none refused)");
    const lines = out.split("\n");
    const at = lines.findIndex((l) => l.startsWith("| target | non-streaming req/s"));
    expect(at, out).toBeGreaterThan(0);
    // A table's rows: from under its header to the first line that is not one.
    const table = (header: number) => {
      const rows: string[][] = [];
      for (let i = header + 2; i < lines.length && lines[i]!.startsWith("|"); i++) rows.push(lines[i]!.split("|").slice(1, -1).map((c) => c.trim()));
      return rows;
    };
    const medians = table(at);
    const rev = `${sha} (HEAD) node --max-semi-space-size=16 SWITCHYARD_ROUTER__MAX_IN_FLIGHT=1`;
    expect(medians.map((r) => r[0])).toEqual(["node-passthrough", rev, expect.stringMatching(new RegExp(`\\(this checkout\\) node --max-semi-space-size=${ROUTER_SEMI_SPACE_MB}$`))]);
    for (const r of medians) {
      expect(Number(r[1]), r.join(" | ")).toBeGreaterThan(0); // req/s
      expect(Number(r[3]), r.join(" | ")).toBeGreaterThan(0); // the answered requests' p50 ms
      expect(Number(r[4]), r.join(" | ")).toBeGreaterThanOrEqual(Number(r[3])); // … and p99
      expect(Number(r[5]), r.join(" | ")).toBeGreaterThan(0); // CPU ms per request
    }
    // Errors: none but REV's refusals past its one request in flight.
    expect(medians.map((r) => Number(r[2]) > 0)).toEqual([false, true, false]);
    expect(Number(medians[0]![6])).toBe(1); // the floor against itself
    expect(Number(medians[0]![7])).toBe(1); // … round by round too
    for (const r of medians.slice(1)) expect(Number(r[7]), r.join(" | ")).toBeGreaterThan(0); // each build over the floor of its round
    // Postgres and Redis worked for this checkout's answers: a ledger row and a rate-limit count each.
    // (REV's figures are per request, nearly all of them refused before either: too small to show.)
    const mine = medians[2]!;
    expect(Number(mine[8]), mine.join(" | ")).toBeGreaterThan(0);
    expect(Number(mine[9]), mine.join(" | ")).toBeGreaterThan(0);
    // The whole box's budget per whole answer, process by process: the bare
    // proxy, the sim worker and the load generator each spent CPU, and the
    // box's busy time holds them all (ticks of 10 ms allow a little slack).
    const boxAt = lines.findIndex((l) => l.startsWith("| target | req/s | proxy | sim worker | load generator | Postgres | Redis | rest | box busy |"));
    expect(boxAt, out).toBeGreaterThan(0);
    const box = table(boxAt).map((r) => r.map((c, i) => (i === 0 ? c : Number(c))));
    expect(box.map((r) => r[0])).toEqual(medians.map((r) => r[0]));
    for (const r of box) {
      const [, rps, proxy, sim, load, , , , busy, , idle, stolen] = r as [string, ...number[]];
      for (const x of [rps, proxy, sim, load, busy]) expect(x, r.join(" | ")).toBeGreaterThan(0);
      expect(busy, r.join(" | ")).toBeGreaterThan(0.8 * (proxy! + sim! + load!));
      expect(idle, r.join(" | ")).toBeGreaterThanOrEqual(0);
      expect(idle! + stolen!, r.join(" | ")).toBeLessThan(100);
    }
    expect(box[0]![9]).toBe(1); // the floor's box against itself
    // Every round's closed loop answered without errors, for every target but REV's (its refusals).
    const perRound = lines.filter((l) => /^\| [12] \| /.test(l)).map((l) => l.split("|").slice(1, -1).map((c) => c.trim()));
    expect(perRound).toHaveLength(6);
    // Errors are told by cause under the rounds' table: REV's are its refusals, and only those.
    const causes = lines.filter((l) => l.startsWith("- round "));
    for (const r of perRound) {
      if (r[1] === rev) expect(Number(r[4]), r.join(" | ")).toBeGreaterThan(0);
      else expect(r[4], [r.join(" | "), ...causes].join("\n")).toBe("0");
    }
    expect(causes).toHaveLength(2);
    for (const l of causes) {
      const [head, told] = l.split(": ");
      expect(head, l).toMatch(/^- round [12], /);
      expect(head!.replace(/^- round [12], /, ""), l).toBe(`${rev}, whole answers`);
      expect(told, l).toMatch(/^HTTP 503 router_overloaded ×\d+$/);
    }
    // The order: the floor first in every round, then the builds, each first in one round; never one target twice in a row.
    const order = perRound.map((r) => r[1]!);
    expect(order[0]).toBe("node-passthrough");
    expect(order[3]).toBe("node-passthrough");
    expect(order.slice(1, 3)).toEqual([...order.slice(4, 6)].reverse());
    for (let i = 1; i < order.length; i++) expect(order[i]).not.toBe(order[i - 1]);
    // Paired by round: in how many this checkout used less CPU than REV (a count, not a verdict).
    expect(out).toMatch(new RegExp(`\\(this checkout\\) node --max-semi-space-size=${ROUTER_SEMI_SPACE_MB} against ${sha} \\(HEAD\\) node --max-semi-space-size=16 SWITCHYARD_ROUTER__MAX_IN_FLIGHT=1: non-streaming, less CPU per request in [012] of [012] rounds \\(sign test p = \\d\\.\\d+\\)(, [12] tied)?, median of the rounds' ratios \\d+\\.\\d{3}×\\.`));
    expect(worktrees()).toBe(before);
  }, 240_000);

  it("runs the streaming loop at the stream level --levels names, every stream answered, whole answers for a conversation --body-kb long at the --rate asked; refuses a level it has not", async () => {
    const { code, out } = await runCli(["bench", "router", "--against", "HEAD", "--quick", "--levels", "1", "--rounds", "1", "--warm", "0", "--body-kb", "3", "--rate", "300"]);
    expect(code, out).toBe(0);
    const header = /interleaved: 1 rounds after 0 unmeasured warm-up round\(s\), every target a fresh process per round warmed by 2 s of each loop, 3 s per loop, whole answers at 300\/s open loop \(warmed by the 64-client closed loop\) \(each request, whole or streamed, a (\d+)-byte conversation of (\d+) messages\) \+ 1 streams open loop/.exec(out);
    expect(header, out).not.toBeNull();
    expect(Number(header![1])).toBeGreaterThanOrEqual(3 * 1024);
    expect(Number(header![1])).toBeLessThan(4 * 1024);
    expect(Number(header![2])).toBeGreaterThan(5);
    const rows = out.split("\n").filter((l) => /^\| 1 \| /.test(l)).map((l) => l.split("|").slice(1, -1).map((c) => c.trim()));
    expect(rows.map((r) => r[1]), out).toEqual(["node-passthrough", expect.stringContaining("(HEAD)"), expect.stringContaining("(this checkout)")]);
    expect(out).toContain("The whole box during the loop of 300 whole answers a second, CPU ms per whole answer");
    for (const r of rows) {
      // The open loop sent 300 a second, and every target kept up (none is that slow).
      expect(Number(r[3]), r.join(" | ")).toBeGreaterThan(240);
      expect(Number(r[3]), r.join(" | ")).toBeLessThan(330);
      expect(r[4], r.join(" | ")).toBe("0");
      expect(Number(r[10]), r.join(" | ")).toBeGreaterThan(0); // streaming CPU ms per stream
      expect(Number.isFinite(Number(r[11])), r.join(" | ")).toBe(true); // ΔTTFT p99
      expect(r[13], r.join(" | ")).toBe("0"); // stream errors
    }
    for (const [args, msg] of [
      [["--levels", "7"], /--against: --levels takes one of the stream levels 1, 100 or 1000, got '7'/],
      [["--levels", "100", "--only", "non-streaming"], /--against: --levels goes with the streaming loop/],
      [["--body-kb", "0"], /--against: --body-kb takes a whole number of KB from 1 to 1024, got '0'/],
      [["--rate", "2.5"], /--against: --rate takes whole answers a second from 1 to 100000, got '2.5'/],
    ] as const) {
      const refused = await runCli(["bench", "router", "--against", "HEAD", ...args]);
      expect(refused.code).not.toBe(0);
      expect(refused.err).toMatch(msg);
    }
    const alone = await runCli(["bench", "router", "--body-kb", "4"]);
    expect(alone.code).not.toBe(0);
    expect(alone.err).toMatch(/--body-kb goes with --against or --profile/);
    const rateAlone = await runCli(["bench", "router", "--rate", "100"]);
    expect(rateAlone.code).not.toBe(0);
    expect(rateAlone.err).toMatch(/--rate goes with --against/);
  }, 240_000);

  it("refuses --rounds that is not a whole number ≥ 1", async () => {
    const { code, err } = await runCli(["bench", "router", "--against", "HEAD", "--rounds", "0"]);
    expect(code).not.toBe(0);
    expect(err).toMatch(/--rounds takes a whole number ≥ 1/);
  }, 60_000);

  it("refuses --warm that is not a whole number ≥ 0, and --warm with --profile", async () => {
    const bad = await runCli(["bench", "router", "--quick", "--warm", "1.5"]);
    expect(bad.code).not.toBe(0);
    expect(bad.err).toMatch(/--warm takes a whole number ≥ 0/);
    const profiled = await runCli(["bench", "router", "--profile", "/tmp/never-written", "--warm", "1"]);
    expect(profiled.code).not.toBe(0);
    expect(profiled.err).toMatch(/--profile: warms its load for a fixed time/);
  }, 60_000);

  it("refuses --rate-limits, --against-node-flags and --against-env without --against, node flags that are not flags and settings that are not Switchyard's", async () => {
    const { code, err } = await runCli(["bench", "router", "--quick", "--rate-limits"]);
    expect(code).not.toBe(0);
    expect(err).toMatch(/--rate-limits goes with --against/);
    const flags = await runCli(["bench", "router", "--quick", "--against-node-flags=--max-semi-space-size=16"]);
    expect(flags.code).not.toBe(0);
    expect(flags.err).toMatch(/--against-node-flags goes with --against/);
    const notFlags = await runCli(["bench", "router", "--against", "HEAD", "--against-node-flags=--max-semi-space-size 16"]);
    expect(notFlags.code).not.toBe(0);
    expect(notFlags.err).toMatch(/--against-node-flags: node flags only \(each starting with -\), got '--max-semi-space-size 16'/);
    const envAlone = await runCli(["bench", "router", "--quick", "--against-env=SWITCHYARD_ROUTER__MAX_IN_FLIGHT=1"]);
    expect(envAlone.code).not.toBe(0);
    expect(envAlone.err).toMatch(/--against-env goes with --against/);
    const notEnv = await runCli(["bench", "router", "--against", "HEAD", "--against-env=PATH=/tmp"]);
    expect(notEnv.code).not.toBe(0);
    expect(notEnv.err).toMatch(/--against-env: SWITCHYARD_…=VALUE pairs, separated by spaces, got 'PATH=\/tmp'/);
  }, 60_000);

  it("refuses a name that is no commit, before starting anything", async () => {
    const { code, err } = await runCli(["bench", "router", "--against", "no-such-rev-xyz", "--quick"]);
    expect(code).not.toBe(0);
    expect(err).toMatch(/'no-such-rev-xyz' names no commit/);
  }, 60_000);
});
