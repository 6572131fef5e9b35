// Probe for issue 11's split throughput: unsplit vs split=2 at N streams,
// interleaved, with each process's CPU (utime+stime from /proc/PID/stat at
// the level's start and end) and each shard engine's busy share and idle
// gaps (the agent's shardStep calls, timed), and the head's STEP round trip
// to the tail minus the tail's engine call. Env: STREAMS (8), TOKENS (48),
// ROUNDS (3), VARIANTS: a comma list of `unsplit` or `split[:OPTS]`, OPTS
// joined by `+`: `rK` (head blocks 0-K; default 15), `dN` (pipeline depth),
// `f16` (f16 rows), `tp` (the tail in its own process, so its Node agent's
// CPU is its own). Not a benchmark of record: `switchyard bench split` is.
import { readFileSync, readdirSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { FrameKind, resolveModel, ShardLink, startAgent, type AgentHandle } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";
import { repoRoot, startProc, type Proc } from "#testkit/procs";

// Every STEP frame's round trip on a shard link (the head's to the tail, in split=2), and each step's agent-side engine times.
const rtt = { on: false, ms: [] as number[] };
/** TIMELINE=1: every event of the level (ms since its start), printed for a stretch of steps. */
const timeline: { t: number; what: string }[] = [];
let t00 = 0;
const mark = (what: string) => {
  if (process.env.TIMELINE && rtt.on) timeline.push({ t: performance.now() - t00, what });
};
const origRequest = ShardLink.prototype.request;
ShardLink.prototype.request = function (this: ShardLink, kind, body, dtype) {
  if (kind !== FrameKind.STEP || !rtt.on) return origRequest.call(this, kind, body, dtype);
  const t0 = performance.now();
  mark("head→tail STEP sent");
  const p = origRequest.call(this, kind, body, dtype);
  void p.then(() => {
    rtt.ms.push(performance.now() - t0);
    mark("head got SAMPLES");
  }, () => {});
  return p;
};

const MODEL = "smollm2-135m-instruct";
const TOKEN = "bench-split-token-0123456789";
const env = process.env;
const STREAMS = Number(env.STREAMS ?? 8);
const TOKENS = Number(env.TOKENS ?? 48);
const ROUNDS = Number(env.ROUNDS ?? 3);
const VARIANTS = (env.VARIANTS ?? "unsplit,split").split(",");
const TICK = 100;

function cpuMs(pid: number): number {
  const s = readFileSync(`/proc/${pid}/stat`, "utf8");
  const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
  return ((Number(f[11]) + Number(f[12])) * 1000) / TICK;
}
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  for (const d of readdirSync("/proc")) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const s = readFileSync(`/proc/${d}/stat`, "utf8");
      const f = s.slice(s.lastIndexOf(")") + 2).split(" ");
      if (Number(f[1]) === pid) out.push(Number(d));
    } catch {}
  }
  return out;
}

interface Timed {
  busy: number;
  steps: number;
  rows: number;
  gaps: number[];
  /** Each step's engine call, sent → answered (agent side). */
  each: number[];
  /** Sequences per step → steps. */
  sizes: Map<number, number>;
  inflight: number;
  since: number;
  lastEnd: number;
  active: boolean;
}
function instrument(agent: AgentHandle, name: string): Timed {
  const t: Timed = { busy: 0, steps: 0, rows: 0, gaps: [], each: [], sizes: new Map(), inflight: 0, since: 0, lastEnd: NaN, active: false };
  const client = agent.supervisor.client as unknown as { once: (k: { case: string; value: { seqs?: { rows: number }[] } }, id?: string) => Promise<unknown> };
  const orig = client.once.bind(client);
  client.once = async (k, id) => {
    if (k.case !== "shardStep" || !t.active) return orig(k, id);
    const t0 = performance.now();
    mark(`${name} engine call (${(k.value.seqs ?? []).length} seqs)`);
    if (t.inflight === 0) {
      if (!Number.isNaN(t.lastEnd)) t.gaps.push(t0 - t.lastEnd);
      t.since = t0;
    }
    t.inflight++;
    try {
      return await orig(k, id);
    } finally {
      t.inflight--;
      const t1 = performance.now();
      mark(`${name} engine answered`);
      // Busy: the union of the intervals with a step outstanding at this engine.
      if (t.inflight === 0) {
        t.busy += t1 - t.since;
        t.lastEnd = t1;
      }
      t.steps++;
      t.each.push(t1 - t0);
      const n = (k.value.seqs ?? []).length;
      t.sizes.set(n, (t.sizes.get(n) ?? 0) + 1);
      t.rows += (k.value.seqs ?? []).reduce((a, s) => a + s.rows, 0);
    }
  };
  return t;
}

async function stream(url: string, prompt: string, maxTokens: number): Promise<{ text: string; tokens: number }> {
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${TOKEN}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: maxTokens, temperature: 0, stream: true, stream_options: { include_usage: true } }),
  });
  if (res.status !== 200) throw new Error(`${url}: ${res.status} ${await res.text()}`);
  let buf = "";
  let text = "";
  let tokens = 0;
  const dec = new TextDecoder();
  for await (const chunk of res.body!) {
    buf += dec.decode(chunk, { stream: true });
    let nl: number;
    while ((nl = buf.indexOf("\n\n")) >= 0) {
      const ev = buf.slice(0, nl);
      buf = buf.slice(nl + 2);
      if (!ev.startsWith("data: ") || ev === "data: [DONE]") continue;
      const j = JSON.parse(ev.slice(6)) as { choices?: { text?: string }[]; usage?: { completion_tokens: number } };
      text += j.choices?.[0]?.text ?? "";
      if (j.usage) tokens = j.usage.completion_tokens;
    }
  }
  return { text, tokens };
}

interface Variant {
  name: string;
  url: string;
  /** Processes to sample: label → pid. */
  pids: Record<string, number>;
  timed: Record<string, Timed>;
}

const agents: AgentHandle[] = [];
const procs: Proc[] = [];
const base = (i: string, threads: number, extra: object) =>
  startAgent({ registry: new MemoryRegistryStore(), models: [MODEL], token: TOKEN, device: "cpu", workerId: i, maxBatch: 16, maxSeqLen: 512, threads, drainGraceMs: 0, log: () => {}, ...extra });

async function startVariant(spec: string): Promise<Variant> {
  const [name, opts = ""] = spec.split(":");
  const o = new Set(opts.split("+").filter(Boolean));
  if (name === "unsplit") {
    const a = await base("unsplit", 2, {});
    agents.push(a);
    await a.supervisor.whenReady();
    return { name: spec, url: a.url, pids: { engine: a.supervisor.client!.pid! }, timed: {} };
  }
  const cut = [...o].find((x) => /^r\d+$/.test(x));
  const k = cut ? Number(cut.slice(1)) : 15;
  const depth = [...o].find((x) => /^d\d+$/.test(x));
  let tailUrl: string;
  const pids: Record<string, number> = {};
  const timed: Record<string, Timed> = {};
  if (o.has("tp")) {
    const p = startProc(process.execPath, ["--import", "tsx", path.join(repoRoot(), "bench/shard-main.ts")], { MODEL, LAYERS: `${k}-30`, WORKER_ID: `${spec}-tail`, TOKEN, THREADS: "1", MAX_BATCH: "16", MAX_SEQ_LEN: "512" }, `${spec}-tail`);
    procs.push(p);
    tailUrl = await new Promise<string>((resolve) => {
      let out = "";
      p.child.stdout!.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /ready (\S+)/.exec(out);
        if (m) resolve(m[1]!);
      });
    });
    pids["tail node"] = p.child.pid!;
    const kids = childrenOf(p.child.pid!);
    pids["tail engine"] = kids[0]!;
  } else {
    const tail = await base(`${spec}-tail`, 1, { layers: { start: k, end: 30 } });
    agents.push(tail);
    await tail.supervisor.whenReady();
    tailUrl = tail.url;
    pids["tail engine"] = tail.supervisor.client!.pid!;
    timed.tail = instrument(tail, "tail");
  }
  const head = await base(`${spec}-head`, 1, {
    layers: { start: 0, end: k },
    next: { url: tailUrl, token: TOKEN },
    ...(depth ? { pipelineDepth: Number(depth.slice(1)) } : {}),
    ...(o.has("f16") ? { shardF16: true } : {}),
  });
  agents.push(head);
  await head.supervisor.whenReady();
  pids["head engine"] = head.supervisor.client!.pid!;
  timed.head = instrument(head, "head");
  return { name: spec, url: head.url, pids, timed };
}

const f = (x: number, d = 1) => x.toFixed(d);
const load = () => os.loadavg().map((x) => x.toFixed(2)).join(" ");

try {
  process.env.SWITCHYARD_PREFIX_CACHE_MB = "0";
  await resolveModel(MODEL);
  const vs: Variant[] = [];
  for (const s of VARIANTS) vs.push(await startVariant(s));
  // Warm each once.
  for (const v of vs) await stream(v.url, "Hello there", 4);
  const results = new Map<string, { tps: number[]; lines: string[] }>(vs.map((v) => [v.name, { tps: [], lines: [] }]));
  const texts = new Map<string, string[]>();
  for (let r = 0; r < ROUNDS; r++) {
    for (const v of vs) {
      for (const t of Object.values(v.timed)) Object.assign(t, { busy: 0, steps: 0, rows: 0, gaps: [], each: [], sizes: new Map(), lastEnd: NaN, active: true });
      rtt.on = true;
      rtt.ms = [];
      timeline.length = 0;
      t00 = performance.now();
      const pids = { ...v.pids, "bench node": process.pid };
      const c0 = Object.fromEntries(Object.entries(pids).map(([k, p]) => [k, cpuMs(p)]));
      const l0 = load();
      const t0 = performance.now();
      const res = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(v.url, `Story ${r * 100 + i}: a lighthouse keeper on a stormy night`, TOKENS)));
      const wall = performance.now() - t0;
      const c1 = Object.fromEntries(Object.entries(pids).map(([k, p]) => [k, cpuMs(p)]));
      for (const t of Object.values(v.timed)) t.active = false;
      rtt.on = false;
      if (process.env.TIMELINE && timeline.length) {
        const mid = Math.floor(timeline.length / 2);
        console.log(timeline.slice(mid, mid + 40).map((e) => `  ${e.t.toFixed(2).padStart(9)} ${e.what}`).join("\n"));
      }
      const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
      const hop = v.timed.tail && rtt.ms.length ? ` | head→tail STEP round trip ${f(mean(rtt.ms), 2)}ms − tail engine call ${f(mean(v.timed.tail.each), 2)}ms = relay ${f(mean(rtt.ms) - mean(v.timed.tail.each), 2)}ms per step` : "";
      const toks = res.reduce((a, x) => a + x.tokens, 0);
      const tps = (toks * 1000) / wall;
      const key = String(r);
      const ts = res.map((x) => x.text);
      if (!texts.has(key)) texts.set(key, ts);
      else if (texts.get(key)!.some((t, i) => t !== ts[i])) console.log(`!! ${v.name} round ${r}: text differs from ${vs[0]!.name}`);
      const cpu = Object.entries(pids).map(([k]) => `${k} ${f(c1[k]! - c0[k]!, 0)}ms (${f((100 * (c1[k]! - c0[k]!)) / wall, 0)}%, ${f((c1[k]! - c0[k]!) / toks, 2)}ms/tok)`).join(", ");
      const tm = Object.entries(v.timed)
        .map(([k, t]) => {
          const g = [...t.gaps].sort((a, b) => a - b);
          const sizes = [...t.sizes].sort((a, b) => a[0] - b[0]).map(([n, c]) => `${n}×${c}`).join(" ");
          return `${k}: busy ${f((100 * t.busy) / wall, 0)}% steps ${t.steps} (seqs×steps ${sizes}) rows/step ${f(t.rows / Math.max(1, t.steps), 1)} idle gaps n=${g.length} med ${f(g[Math.floor(g.length / 2)] ?? 0, 2)} p90 ${f(g[Math.floor(g.length * 0.9)] ?? 0, 2)} sum ${f(g.reduce((a, b) => a + b, 0), 0)}ms`;
        })
        .join(" | ");
      results.get(v.name)!.tps.push(tps);
      console.log(`r${r} ${v.name}: ${f(tps)} tok/s wall ${f(wall, 0)}ms load ${l0} | CPU ${cpu}${tm ? " | " + tm : ""}${hop}`);
    }
  }
  const med = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  const b = med(results.get(vs[0]!.name)!.tps);
  for (const v of vs) console.log(`${v.name}: median ${f(med(results.get(v.name)!.tps))} tok/s = ${f(med(results.get(v.name)!.tps) / b, 2)}× ${vs[0]!.name}  (all: ${results.get(v.name)!.tps.map((x) => f(x)).join(", ")})`);
  console.log(`load after: ${load()}`);
} finally {
  await Promise.all([...agents.map((a) => a.stop()), ...procs.map((p) => p.stop())]);
}
