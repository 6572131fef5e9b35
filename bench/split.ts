// `switchyard bench split`: one model unsplit, split in 2 and split in 3
// (issue 11), side by side in one run and interleaved round by round: the
// shards' engine threads sum to the unsplit engine's. Real agents and real
// engines on this machine, activations over the shards' real connections.
// Prints aggregate decode tok/s at 1/8/16 streams, TTFT and per-token latency
// (and what each hop adds), bytes on the wire per activation row ÷ its raw
// bytes, shard start → ready, memory per shard ÷ unsplit, and the stall when
// the serving tail shard is SIGKILLed mid-stream and its replica takes over.
// Greedy output must be the same everywhere: a difference fails the bench.
import os from "node:os";
import path from "node:path";
import { balancedRanges, evenRanges, ggufLayout, resolveModel, startAgent, type AgentHandle, type ShardWire } from "@switchyard/agent";
import { encodeShardRoute, MemoryRegistryStore, SHARD_ROUTE_HEADER, signShardRoute } from "@switchyard/state";
import { repoRoot, startProc, type Proc } from "#testkit/procs";
import { percentile } from "./lib/load.ts";

const MODEL = "smollm2-135m-instruct";
const TOKEN = "bench-split-token-0123456789";
const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
const med = (xs: number[]) => percentile(xs, 50);
const mib = (b: number) => fmt(b / (1 << 20), 1);

interface Shard {
  agent: AgentHandle;
  start: number;
  end: number;
  threads: number;
  /** startAgent → ready (engine spawned, its blocks loaded, warm-up pass). */
  readyMs: number;
  peakKv: number;
}

interface Config {
  name: string;
  /** The head (or the whole worker) is shards[0]. */
  shards: Shard[];
}


/** Starts the shards last to first (each needs the next one's URL), each timed to ready on its own. */
async function startConfig(name: string, ranges: { start: number; end: number }[] | undefined, threads: number[], maxBatch: number, started: AgentHandle[]): Promise<Config> {
  const shards: Shard[] = [];
  const specs = ranges ?? [undefined];
  for (let i = specs.length - 1; i >= 0; i--) {
    const r = specs[i];
    const t0 = performance.now();
    const agent = await startAgent({
      registry: new MemoryRegistryStore(),
      models: [MODEL],
      token: TOKEN,
      device: "cpu",
      workerId: `${name}-${i}`,
      maxBatch,
      maxSeqLen: 512,
      threads: threads[i],
      drainGraceMs: 0,
      log: () => {},
      ...(r ? { layers: r } : {}),
      ...(r && shards[0] ? { next: { url: shards[0].agent.url, token: TOKEN } } : {}),
    });
    started.push(agent);
    await agent.supervisor.whenReady();
    const loaded = agent.supervisor.loaded.get(MODEL)!;
    shards.unshift({ agent, start: loaded.layerStart, end: loaded.layerEnd, threads: threads[i]!, readyMs: performance.now() - t0, peakKv: 0 });
  }
  return { name, shards };
}

interface StreamResult {
  text: string;
  tokens: number;
  ttftMs: number;
  /**
   * First content chunk → last, ÷ the tokens after the first (TPOT). Not the
   * median gap between chunks: chunks read in one go (a busy event loop, a
   * pipe read holding two tokens) have gaps of ~0, and with 8 tokens a few of
   * those made the median 0.00 on a CI box.
   */
  perTokenMs: number;
}

/** A stream's `data:` events as they arrive, each parsed (`[DONE]` and comments skipped). */
async function* sseData<T>(res: Response): AsyncGenerator<T> {
  let buf = "";
  const decoder = new TextDecoder();
  for await (const chunk of res.body!) {
    buf += decoder.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      if (ev.startsWith("data: ") && ev !== "data: [DONE]") yield JSON.parse(ev.slice(6)) as T;
    }
  }
}

async function stream(url: string, prompt: string, maxTokens: number): Promise<StreamResult> {
  const t0 = performance.now();
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  let text = "";
  let tokens = -1;
  let ttftMs = NaN;
  let last = NaN;
  for await (const j of sseData<{ error?: { message: string }; choices?: { text?: string }[]; usage?: { completion_tokens: number } }>(res)) {
    if (j.error) throw new Error(`${url}: stream error ${j.error.message}`);
    const piece = j.choices?.[0]?.text ?? "";
    if (piece) {
      last = performance.now();
      if (Number.isNaN(ttftMs)) ttftMs = last - t0;
      text += piece;
    }
    if (j.usage) tokens = j.usage.completion_tokens;
  }
  if (tokens < 0) throw new Error(`${url}: no usage in the stream`);
  return { text, tokens, ttftMs, perTokenMs: tokens > 1 ? (last - t0 - ttftMs) / (tokens - 1) : NaN };
}

/** A tail shard in its own process (bench/shard-main.ts): one that can be SIGKILLed. */
interface TailProc {
  id: string;
  url: string;
  proc: Proc;
}

async function startTail(id: string, range: { start: number; end: number }, threads: number, maxBatch: number): Promise<TailProc> {
  const proc = startProc(
    process.execPath,
    ["--import", "tsx", path.join(repoRoot(), "bench/shard-main.ts")],
    { MODEL, LAYERS: `${range.start}-${range.end}`, WORKER_ID: id, TOKEN, THREADS: String(threads), MAX_BATCH: String(maxBatch), MAX_SEQ_LEN: "512" },
    id,
  );
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${id}: not ready in 180 s`)), 180_000);
    proc.child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /ready (\S+)/.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    proc.child.once("exit", (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`${id} exited (${code ?? sig}) before it was ready`));
    });
  });
  return { id, url, proc };
}

interface KillResult {
  text: string;
  errorEvents: number;
  /** The SIGKILL → the next text chunk the client got (ms). */
  stallMs: number;
  /** Gaps between text chunks other than the stall. */
  gaps: number[];
}

/** A greedy stream to a head with `headers`; `kill` runs once the first text arrived, and the stall after it is timed. */
async function streamKilling(url: string, prompt: string, maxTokens: number, headers: Record<string, string>, kill: () => void): Promise<KillResult> {
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json", ...headers },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: maxTokens, temperature: 0, stream: true }),
  });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  let text = "";
  let errorEvents = 0;
  let killedAt = NaN;
  let stallMs = NaN;
  let last = NaN;
  const gaps: number[] = [];
  for await (const j of sseData<{ error?: unknown; choices?: { text?: string }[] }>(res)) {
    if (j.error) errorEvents++;
    const piece = j.choices?.[0]?.text ?? "";
    if (!piece) continue;
    const now = performance.now();
    if (!Number.isNaN(killedAt) && Number.isNaN(stallMs)) stallMs = now - killedAt;
    else if (!Number.isNaN(last)) gaps.push(now - last);
    last = now;
    text += piece;
    if (Number.isNaN(killedAt)) {
      kill();
      killedAt = performance.now();
    }
  }
  return { text, errorEvents, stallMs, gaps };
}

interface ReplacementResult {
  kills: number;
  stalls: number[];
  gaps: number[];
  /** The head's loss → first step sent on the new path, per kill (ms). */
  rebuildMs: number[];
  rebuilt: number;
  errorEvents: number;
  mismatch: string;
}

/**
 * A 2-shard pipeline whose tail has a replica, each tail its own process:
 * per round, the tail serving a stream is SIGKILLed after its first token,
 * the head rebuilds the sequence on the replica (re-prefilling prompt +
 * tokens so far), and a fresh spare is started for the next round. The
 * head gets the route a router would send (signed here with the workers'
 * credential). The text must be the unsplit model's, with no error event.
 */
async function runReplacement(opts: { rounds: number; tokens: number; range: [{ start: number; end: number }, { start: number; end: number }]; threads: number; maxBatch: number; unsplit: AgentHandle; started: AgentHandle[]; tails: TailProc[] }): Promise<ReplacementResult> {
  const [headRange, tailRange] = opts.range;
  let next = 0;
  const spawnTail = () => startTail(`replace-tail-${next++}`, tailRange, opts.threads, opts.maxBatch).then((t) => (opts.tails.push(t), t));
  const [head, first, second] = await Promise.all([
    startAgent({ registry: new MemoryRegistryStore(), models: [MODEL], token: TOKEN, device: "cpu", workerId: "replace-head", maxBatch: opts.maxBatch, maxSeqLen: 512, threads: opts.threads, drainGraceMs: 0, log: () => {}, layers: headRange }),
    spawnTail(),
    spawnTail(),
  ]);
  opts.started.push(head);
  await head.supervisor.whenReady();
  const shardHead = head.ctx.shardHead!;
  const out: ReplacementResult = { kills: 0, stalls: [], gaps: [], rebuildMs: [], rebuilt: 0, errorEvents: 0, mismatch: "" };
  let serving = first;
  let spare = second;
  for (let r = 0; r < opts.rounds; r++) {
    const prompt = `Story ${900 + r}: a lighthouse keeper on a stormy night`;
    const want = (await stream(opts.unsplit.url, prompt, opts.tokens)).text;
    // The head takes a stage's replicas in the route's order: the first one serves, the second takes over.
    const route = signShardRoute({ model: MODEL, digest: shardHead.digest, stages: [{ ...tailRange, hops: [serving, spare].map((t) => ({ id: t.id, url: t.url })) }] }, () => TOKEN, Date.now() + 10 * 60_000);
    if (!route) throw new Error("could not sign the shard route");
    const before = shardHead.pipeline.rebuilt.sequences;
    const victim = serving;
    const res = await streamKilling(head.url, prompt, opts.tokens, { [SHARD_ROUTE_HEADER]: encodeShardRoute(route) }, () => victim.proc.child.kill("SIGKILL"));
    out.kills++;
    out.stalls.push(res.stallMs);
    out.gaps.push(...res.gaps);
    out.errorEvents += res.errorEvents;
    out.rebuilt += shardHead.pipeline.rebuilt.sequences - before;
    out.rebuildMs.push(shardHead.pipeline.rebuilt.lastMs);
    if (res.text !== want && !out.mismatch) out.mismatch = `round ${r + 1}: ${JSON.stringify(res.text)} ≠ unsplit ${JSON.stringify(want)}`;
    process.stderr.write(`replacement round ${r + 1}/${opts.rounds} done\n`);
    serving = spare;
    if (r + 1 < opts.rounds) spare = await spawnTail();
  }
  return out;
}

const wireZero: ShardWire = { stepFrameBytes: 0, rowBytes: 0, linkSent: 0, linkReceived: 0 };
function wireOf(c: Config): ShardWire {
  return c.shards.map((s) => s.agent.shardWire()).reduce((a, b) => ({ stepFrameBytes: a.stepFrameBytes + b.stepFrameBytes, rowBytes: a.rowBytes + b.rowBytes, linkSent: a.linkSent + b.linkSent, linkReceived: a.linkReceived + b.linkReceived }), wireZero);
}

interface LevelResult {
  aggregate: number;
  ttftMs: number;
  perTokenMs: number;
  wire: ShardWire;
  texts: string[];
}

/** `n` streams at once on `c`'s head; Σ completion tokens ÷ wall time, and while they run each shard's peak KV bytes. */
async function runLevel(c: Config, n: number, tokens: number, round: number): Promise<LevelResult> {
  const before = wireOf(c);
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      for (const s of c.shards) s.peakKv = Math.max(s.peakKv, (await s.agent.record()).kvCacheBytes ?? 0);
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  const t0 = performance.now();
  // Distinct prompts (no two streams share a prefix beyond the first words); the same ones in every config.
  const results = await Promise.all(Array.from({ length: n }, (_, i) => stream(c.shards[0]!.agent.url, `Story ${round * 100 + i}: a lighthouse keeper on a stormy night`, tokens)));
  const wall = (performance.now() - t0) / 1000;
  sampling = false;
  await sampler;
  const after = wireOf(c);
  return {
    aggregate: results.reduce((a, r) => a + r.tokens, 0) / wall,
    ttftMs: med(results.map((r) => r.ttftMs)),
    perTokenMs: med(results.map((r) => r.perTokenMs)),
    wire: { stepFrameBytes: after.stepFrameBytes - before.stepFrameBytes, rowBytes: after.rowBytes - before.rowBytes, linkSent: after.linkSent - before.linkSent, linkReceived: after.linkReceived - before.linkReceived },
    texts: results.map((r) => r.text),
  };
}

export async function runSplitBench(opts: { quick: boolean; levels?: number[]; threads?: number; cut?: "balanced" | "even" }): Promise<number> {
  const levels = opts.levels ?? (opts.quick ? [1] : [1, 8, 16]);
  const tokens = opts.quick ? 8 : 48;
  // Five: one level lasts ~1.5 s, and the 2-thread unsplit engine is the figure a stray process moves most (202–308 tok/s at 8 streams between quiet runs of two rounds).
  const rounds = opts.quick ? 1 : 5;
  const threads = opts.threads ?? Math.min(os.availableParallelism(), 16);
  // The whole worker would reuse prompt prefixes and shards keep none: measure both without.
  process.env.SWITCHYARD_PREFIX_CACHE_MB = "0";
  // The shards' block ranges: by default the cut `switchyard up --split N` makes (ranges of equal
  // compute, the output head counted on the last); `--cut even` for equal block counts.
  const layout = await ggufLayout((await resolveModel(MODEL)).path);
  const cut = opts.cut ?? "balanced";
  const splitRanges = (n: number) => (cut === "even" ? evenRanges(layout.blocks, n) : balancedRanges(layout, n));
  const maxBatch = Math.max(16, ...levels);
  const per = (k: number) => Array.from({ length: k }, () => Math.max(1, Math.floor(threads / k)));
  process.stderr.write(`» starting unsplit, split=2 and split=3 (${threads} threads each in all)\n`);
  const configs: Config[] = [];
  const started: AgentHandle[] = [];
  const tails: TailProc[] = [];
  try {
    configs.push(await startConfig("unsplit", undefined, [threads], maxBatch, started));
    configs.push(await startConfig("split2", splitRanges(2), per(2), maxBatch, started));
    configs.push(await startConfig("split3", splitRanges(3), per(3), maxBatch, started));
    const hidden = configs[0]!.shards[0]!.agent.supervisor.loaded.get(MODEL)!.hiddenSize;

    // Interleaved: every level, every round, each config in turn.
    const res = new Map<string, Map<number, LevelResult[]>>(configs.map((c) => [c.name, new Map(levels.map((n) => [n, []]))]));
    let mismatch = "";
    for (let r = 0; r < rounds; r++) {
      for (const n of levels) {
        const texts: string[][] = [];
        for (const c of configs) {
          const lr = await runLevel(c, n, tokens, r);
          res.get(c.name)!.get(n)!.push(lr);
          texts.push(lr.texts);
        }
        for (let k = 1; k < texts.length; k++) {
          const i = texts[k]!.findIndex((t, j) => t !== texts[0]![j]);
          if (i >= 0 && !mismatch) mismatch = `${configs[k]!.name} at ${n} streams, stream ${i}: ${JSON.stringify(texts[k]![i])} ≠ unsplit ${JSON.stringify(texts[0]![i])}`;
        }
        process.stderr.write(`round ${r + 1}/${rounds}, ${n} stream(s) done\n`);
      }
    }
    // The replacement phase: a 2-shard pipeline whose tail has a replica; the serving tail is SIGKILLed mid-stream.
    const replacement = await runReplacement({
      rounds: opts.quick ? 1 : 3,
      tokens: opts.quick ? 16 : 64,
      range: splitRanges(2) as [{ start: number; end: number }, { start: number; end: number }],
      threads: per(2)[0]!,
      maxBatch,
      unsplit: configs[0]!.shards[0]!.agent,
      started,
      tails,
    });
    const replaced = replacement.kills > 0 && replacement.rebuilt === replacement.kills && replacement.errorEvents === 0 && !replacement.mismatch && replacement.stalls.every((x) => Number.isFinite(x));

    const agg = (name: string, n: number) => med(res.get(name)!.get(n)!.map((x) => x.aggregate));
    const lat = (name: string, key: "ttftMs" | "perTokenMs") => med(res.get(name)!.get(levels[0]!)!.map((x) => x[key]));
    const label = (c: Config) => (c.shards.length === 1 ? "unsplit" : `split=${c.shards.length}`);
    const threadsOf = (c: Config) => c.shards.map((s) => s.threads).join("+");
    const rowBytes = hidden * 4;

    const out: string[] = [];
    out.push(`Model SmolLM2-135M-Instruct Q4_1 on CPU kernels, ${tokens} tokens per stream, greedy, prefix cache off; median of ${rounds} interleaved round(s).`);
    out.push(`Engine threads: ${configs.map((c) => `${label(c)} ${threadsOf(c)}`).join(", ")} (${os.availableParallelism()} CPUs here).`);
    out.push(`Blocks per shard (${cut === "even" ? "equal block counts" : "equal compute, the output head counted on the last shard"}): ${configs.slice(1).map((c) => `${label(c)} ${c.shards.map((s) => `${s.start}-${s.end}`).join(" | ")}`).join("; ")}.`);
    out.push(`Greedy output identical in every config: ${mismatch ? `NO — ${mismatch}` : "yes"}.`);
    out.push("");
    out.push(`| streams | ${configs.map((c) => `${label(c)} tok/s`).join(" | ")} | ${configs.slice(1).map((c) => `${label(c)} ÷ unsplit`).join(" | ")} |`);
    out.push(`|---:|${configs.map(() => "---:").join("|")}|${configs.slice(1).map(() => "---:").join("|")}|`);
    for (const n of levels) {
      const base = agg("unsplit", n);
      out.push(`| ${n} | ${configs.map((c) => fmt(agg(c.name, n))).join(" | ")} | ${configs.slice(1).map((c) => `${fmt(agg(c.name, n) / base, 2)}×`).join(" | ")} |`);
    }
    out.push("");
    out.push(`Latency at ${levels[0]} stream(s) (median; per-token = first text chunk → last ÷ the tokens after the first); a hop is one shard-to-shard link, each way:`);
    out.push("");
    out.push("| config | hops | TTFT ms | per-token ms | TTFT added per hop ms | per-token added per hop ms |");
    out.push("|---|---:|---:|---:|---:|---:|");
    for (const c of configs) {
      const hops = c.shards.length - 1;
      const addT = hops ? fmt((lat(c.name, "ttftMs") - lat("unsplit", "ttftMs")) / hops, 2) : "-";
      const addP = hops ? fmt((lat(c.name, "perTokenMs") - lat("unsplit", "perTokenMs")) / hops, 2) : "-";
      out.push(`| ${label(c)} | ${hops} | ${fmt(lat(c.name, "ttftMs"), 1)} | ${fmt(lat(c.name, "perTokenMs"), 2)} | ${addT} | ${addP} |`);
    }
    out.push("");
    out.push(`Bytes on the wire per activation row per hop ÷ its raw bytes (${hidden} × f32 = ${rowBytes} B); "all frames" adds the OPEN/CLOSE frames and the replies coming back (samples):`);
    out.push("");
    out.push("| config | streams | rows sent | STEP bytes per row | ÷ raw | all frames both ways ÷ raw |");
    out.push("|---|---:|---:|---:|---:|---:|");
    const wireRatios: { name: string; n: number; step: number; all: number }[] = [];
    for (const c of configs.slice(1)) {
      for (const n of levels) {
        const w = res.get(c.name)!.get(n)!.reduce((a, x) => ({ stepFrameBytes: a.stepFrameBytes + x.wire.stepFrameBytes, rowBytes: a.rowBytes + x.wire.rowBytes, linkSent: a.linkSent + x.wire.linkSent, linkReceived: a.linkReceived + x.wire.linkReceived }), wireZero);
        const rows = w.rowBytes / rowBytes;
        const step = w.stepFrameBytes / w.rowBytes;
        const all = (w.linkSent + w.linkReceived) / w.rowBytes;
        wireRatios.push({ name: c.name, n, step, all });
        out.push(`| ${label(c)} | ${n} | ${rows} | ${fmt(w.stepFrameBytes / rows, 1)} | ${fmt(step, 4)}× | ${fmt(all, 4)}× |`);
      }
    }
    out.push("");
    out.push("Shards: start → ready (each started on its own: engine spawned, its blocks loaded, warm-up pass) and memory ÷ the unsplit engine's:");
    out.push("");
    out.push(`| config | shard | blocks | threads | start → ready ms | weights MiB | weights ÷ unsplit | peak KV MiB (${levels.at(-1)} streams) | KV ÷ unsplit | RSS MiB | RSS ÷ unsplit |`);
    out.push("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    const whole = configs[0]!.shards[0]!;
    const wholeRec = await whole.agent.record();
    const memRatios: { name: string; i: number; weights: number; kv: number }[] = [];
    for (const c of configs) {
      for (const [i, s] of c.shards.entries()) {
        const rec = await s.agent.record();
        const weights = (rec.weightBytes ?? 0) / (wholeRec.weightBytes ?? NaN);
        const kv = s.peakKv / whole.peakKv;
        memRatios.push({ name: c.name, i, weights, kv });
        out.push(
          `| ${label(c)} | ${i} | ${s.start}-${s.end} | ${s.threads} | ${fmt(s.readyMs, 0)} | ${mib(rec.weightBytes ?? NaN)} | ${fmt(weights, 2)} | ${mib(s.peakKv)} | ${fmt(kv, 2)} | ${mib(rec.memoryBytes ?? NaN)} | ${fmt((rec.memoryBytes ?? NaN) / (wholeRec.memoryBytes ?? NaN), 2)} |`,
        );
      }
    }
    out.push("");
    out.push(
      `Replacement: split=2 with a replica of the tail (each tail its own process), the serving tail SIGKILLed after a stream's first token; ${opts.quick ? 16 : 64} tokens per stream. Stall = the kill → the next text chunk on the client; the head's rebuild = its loss → the sequence reopened along the replica (the re-prefill of prompt + tokens so far follows):`,
    );
    out.push("");
    out.push("| kills | stall ms (median) | stall ms (max) | ordinary token interval ms (median) | head's rebuild ms (median) | sequences rebuilt | text identical to unsplit | error events |");
    out.push("|---:|---:|---:|---:|---:|---:|---|---:|");
    out.push(
      `| ${replacement.kills} | ${fmt(med(replacement.stalls), 0)} | ${fmt(Math.max(...replacement.stalls), 0)} | ${fmt(med(replacement.gaps), 1)} | ${fmt(med(replacement.rebuildMs), 0)} | ${replacement.rebuilt} | ${replacement.mismatch ? `NO — ${replacement.mismatch}` : "yes"} | ${replacement.errorEvents} |`,
    );
    const at8 = levels.includes(8) ? 8 : levels.at(-1)!;
    const r8 = agg("split2", at8) / agg("unsplit", at8);
    const w8 = wireRatios.filter((w) => w.n === at8);
    out.push("");
    out.push(
      "Targets: " +
        [
          `split=2 ≥ 0.9× unsplit at ${at8} streams: ${r8 >= 0.9 ? "met" : "NOT met"} (${fmt(r8, 2)}×)`,
          `STEP bytes ≤ 1.01× raw rows at ${at8} streams: ${w8.every((w) => w.step <= 1.01) ? "met" : "NOT met"} (${w8.map((w) => `${w.name} ${fmt(w.step, 4)}×`).join(", ")})`,
          `greedy output identical: ${mismatch ? "NOT met" : "met"}`,
          `a killed tail replaced mid-stream (same text, no error event): ${replaced ? "met" : "NOT met"}`,
        ].join("; "),
    );
    process.stdout.write(out.join("\n") + "\n");
    return mismatch || !replaced ? 1 : 0;
  } finally {
    await Promise.all([...started.map((a) => a.stop()), ...tails.map((t) => t.proc.stop())]);
  }
}
