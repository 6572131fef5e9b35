// `switchyard bench <suite>`: benchmarks that print a table.
import { UsageError } from "../usage.ts";

export async function benchCommand(args: string[], flags: { quick?: boolean; model?: string[]; levels?: string; only?: string; cluster?: string; profile?: string; processes?: string; threads?: string; reference?: string; cut?: string; against?: string; rounds?: string; warm?: string; "rate-limits"?: boolean; rate?: string; "against-node-flags"?: string; "against-env"?: string; "body-kb"?: string }): Promise<number> {
  const [suite] = args;
  // The one bench entry point; it loads only the suite asked for.
  const { benches, STREAM_LEVELS } = await import("../../../../bench/index.ts");
  if (suite === "router") {
    const levels = flags.levels?.split(",").map((n) => Number(n.trim()));
    if (levels?.some((n) => !Number.isInteger(n))) throw new UsageError(`bench router: --levels takes stream counts like 1,100,1000`);
    // --warm N: unmeasured runs of each load before the measured ones (default 2, 1 with --quick; with --against, unmeasured rounds, default 0).
    const warm = flags.warm === undefined ? undefined : Number(flags.warm);
    if (warm !== undefined && !(Number.isInteger(warm) && warm >= 0)) throw new UsageError("bench router: --warm takes a whole number ≥ 0 (unmeasured warm-up runs)");
    if (warm !== undefined && flags.profile !== undefined) throw new UsageError("bench router --profile: warms its load for a fixed time; --warm goes with the tables and --against");
    // --body-kb N: each request a conversation of about N KB (the body's parse, checks and way upstream at a real size); with --against or --profile.
    const bodyKb = flags["body-kb"] === undefined ? undefined : Number(flags["body-kb"]);
    if (bodyKb !== undefined) {
      if (flags.against === undefined && flags.profile === undefined) throw new UsageError("bench router: --body-kb goes with --against or --profile");
      if (!(Number.isInteger(bodyKb) && bodyKb >= 1 && bodyKb <= 1024)) throw new UsageError(`bench router ${flags.against !== undefined ? "--against" : "--profile"}: --body-kb takes a whole number of KB from 1 to 1024, got '${flags["body-kb"]}'`);
    }
    // --against REV: this checkout's router and REV's, taking turns (before/after of a change in one run).
    if (flags.against !== undefined) {
      if (flags.profile !== undefined || flags.cluster !== undefined) throw new UsageError("bench router --against: takes --quick, --rounds, --levels N and --only non-streaming, not --profile or --cluster");
      if (flags.only !== undefined && flags.only !== "non-streaming") throw new UsageError(`bench router --against: --only takes 'non-streaming', got '${flags.only}'`);
      // --levels N: the streaming loop of each round at that stream level (default 100).
      if (levels !== undefined) {
        if (flags.only === "non-streaming") throw new UsageError("bench router --against: --levels goes with the streaming loop, not --only non-streaming");
        oneStreamLevel("bench router --against", levels, flags.levels!, STREAM_LEVELS);
      }
      if (!flags.against.trim()) throw new UsageError("bench router --against: give a commit, e.g. --against HEAD~1");
      const rounds = flags.rounds === undefined ? undefined : Number(flags.rounds);
      if (rounds !== undefined && !(Number.isInteger(rounds) && rounds >= 1)) throw new UsageError("bench router --against: --rounds takes a whole number ≥ 1");
      // --rate N: whole answers at N a second (an open loop) instead of the closed loop: every target's CPU per answer at one load.
      const rate = flags.rate === undefined ? undefined : Number(flags.rate);
      if (rate !== undefined && !(Number.isInteger(rate) && rate >= 1 && rate <= 100_000)) throw new UsageError(`bench router --against: --rate takes whole answers a second from 1 to 100000, got '${flags.rate}'`);
      const againstNodeFlags = flags["against-node-flags"]?.trim().split(/\s+/).filter(Boolean);
      if (againstNodeFlags?.some((f) => !f.startsWith("-"))) throw new UsageError(`bench router --against-node-flags: node flags only (each starting with -), got '${flags["against-node-flags"]}'`);
      // --against-env 'NAME=VALUE …': REV's router only (a setting's before/after against HEAD).
      let againstEnv: Record<string, string> | undefined;
      if (flags["against-env"] !== undefined) {
        againstEnv = {};
        for (const pair of flags["against-env"].trim().split(/\s+/).filter(Boolean)) {
          const m = /^(SWITCHYARD_[A-Z0-9_]+)=(.*)$/.exec(pair);
          if (!m) throw new UsageError(`bench router --against-env: SWITCHYARD_…=VALUE pairs, separated by spaces, got '${pair}'`);
          againstEnv[m[1]!] = m[2]!;
        }
      }
      return benches.routerAgainst({ against: flags.against.trim(), quick: flags.quick === true, ...(flags.only ? { only: "non-streaming" as const } : {}), ...(rounds ? { rounds } : {}), ...(warm !== undefined ? { warm } : {}), ...(flags["rate-limits"] ? { rateLimits: true } : {}), ...(againstNodeFlags ? { againstNodeFlags } : {}), ...(againstEnv ? { againstEnv } : {}), ...(levels ? { streams: levels[0]! } : {}), ...(bodyKb ? { bodyKb } : {}), ...(rate ? { rate } : {}) });
    }
    if (flags.rate !== undefined) throw new UsageError("bench router: --rate goes with --against");
    if (flags["rate-limits"]) throw new UsageError("bench router: --rate-limits goes with --against");
    if (flags["against-node-flags"] !== undefined) throw new UsageError("bench router: --against-node-flags goes with --against");
    if (flags["against-env"] !== undefined) throw new UsageError("bench router: --against-env goes with --against");
    // --only non-streaming: with --profile, the profile of the non-streaming closed loop instead of the 100 streams.
    if (flags.only !== undefined && flags.only !== "money" && !(flags.only === "non-streaming" && flags.profile)) throw new UsageError(`bench router: --only takes 'money' (or 'non-streaming' with --profile), got '${flags.only}'`);
    // --cluster h:p,h:p (or BENCH_REDIS_CLUSTER): also the money and lease figures on that Redis Cluster, next to the single node.
    const clusterList = flags.cluster ?? process.env.BENCH_REDIS_CLUSTER;
    const cluster = clusterList?.split(",").map((s) => s.trim()).filter(Boolean);
    if (clusterList !== undefined && !cluster?.length) throw new UsageError("bench router: --cluster takes seed nodes like 127.0.0.1:7000,127.0.0.1:7001");
    // --profile DIR: only a CPU profile of one router process under the 100-stream load;
    // --levels N picks another of the tables' stream levels for it (1 or 1000).
    if (flags.profile !== undefined && levels !== undefined) {
      if (flags.only === "non-streaming") throw new UsageError("bench router --profile: --levels goes with the streaming profile, not --only non-streaming");
      oneStreamLevel("bench router --profile", levels, flags.levels!, STREAM_LEVELS);
    }
    const processes = flags.processes === undefined ? undefined : Number(flags.processes);
    if (processes !== undefined && !(Number.isInteger(processes) && processes >= 1)) throw new UsageError("bench router: --processes takes a whole number ≥ 1");
    return benches.router({ quick: flags.quick === true, levels, only: flags.only as "money" | "non-streaming" | undefined, ...(cluster ? { cluster } : {}), ...(flags.profile ? { profile: flags.profile } : {}), ...(processes ? { processes } : {}), ...(warm !== undefined ? { warm } : {}), ...(bodyKb ? { bodyKb } : {}) });
  }
  if (suite === "admission") {
    return benches.admission({ quick: flags.quick === true });
  }
  if (suite === "routing") {
    return benches.routing({ quick: flags.quick === true });
  }
  if (suite === "registry") {
    return benches.registry({ quick: flags.quick === true });
  }
  if (suite === "engine") {
    if ((flags.model?.length ?? 0) > 1) throw new UsageError("bench engine: one --model at a time");
    // --reference: llama.cpp built for this CPU and node-llama-cpp's prebuilt (both, the default), or one of them.
    const reference = flags.reference ?? "both";
    if (reference !== "both" && reference !== "native" && reference !== "node") throw new UsageError(`bench engine: --reference takes 'both', 'native' or 'node', got '${reference}'`);
    return benches.engine({ quick: flags.quick === true, reference, ...(flags.model?.[0] ? { model: flags.model[0] } : {}) });
  }
  if (suite === "split") {
    const levels = flags.levels?.split(",").map((n) => Number(n.trim()));
    if (levels?.some((n) => !Number.isInteger(n) || n < 1)) throw new UsageError("bench split: --levels takes stream counts like 1,8,16");
    const threads = flags.threads === undefined ? undefined : Number(flags.threads);
    if (threads !== undefined && (!Number.isInteger(threads) || threads < 1)) throw new UsageError("bench split: --threads takes the unsplit engine's thread count (the shards' sum to it)");
    // --cut even: equal block counts per shard instead of the equal-compute cut `up --split` makes.
    if (flags.cut !== undefined && flags.cut !== "even" && flags.cut !== "balanced") throw new UsageError(`bench split: --cut takes 'balanced' or 'even', got '${flags.cut}'`);
    const cut = flags.cut as "balanced" | "even" | undefined;
    return benches.split({ quick: flags.quick === true, ...(levels ? { levels } : {}), ...(threads ? { threads } : {}), ...(cut ? { cut } : {}) });
  }
  throw new UsageError(`bench: expected 'router', 'engine', 'split', 'admission', 'routing' or 'registry', got '${suite ?? ""}'`);
}

/** --profile and --against run one of the tables' stream levels: refuses anything else, naming them. */
function oneStreamLevel(who: string, levels: number[], given: string, known: ReadonlyArray<{ streams: number }>): void {
  const counts = known.map((l) => l.streams);
  if (levels.length !== 1 || !counts.includes(levels[0]!)) throw new UsageError(`${who}: --levels takes one of the stream levels ${counts.slice(0, -1).join(", ")} or ${counts.at(-1)}, got '${given}'`);
}
