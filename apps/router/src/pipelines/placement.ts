// Placement of split models, from heartbeats alone (every router computes
// the same from the same registry; nothing is stored): the live, ready
// shards of one model file (same GGUF digest, same block count) are chained
// into pipelines covering blocks [0, n). Each head shard (blocks from 0) gets
// the pipeline with the fewest hops after it, then the most room; each stage
// keeps its replicas for that exact range, best first, so the head can
// replace a lost one mid-stream without asking a router. A pipeline is
// routed as one worker: its record is the head's, with the load of its
// busiest stage and the capacity of its smallest.
import { acceptsNewWork, MAX_STAGE_HOPS, type LayerRangeRecord, type RoutePlan, type WorkerRecord } from "@switchyard/state";

export interface PipelineStage {
  start: number;
  end: number;
  /** Shards serving exactly these blocks, best first (the first is the one the load figures use). */
  replicas: WorkerRecord[];
}

export interface PipelinePlan {
  model: string;
  digest: string;
  blocks: number;
  head: WorkerRecord;
  headEnd: number;
  /** The stages after the head, in block order. */
  stages: PipelineStage[];
  /** The pipeline as one routable worker (the head's id and URL). */
  record: WorkerRecord;
}

interface ShardAt {
  worker: WorkerRecord;
  range: LayerRangeRecord & { blocks: number; digest: string };
}

const load = (w: WorkerRecord) => (w.inFlight + w.queueDepth) / Math.max(1, w.capacity);

/** Default order of a stage's replicas: ready before degraded, then the most room. */
export function byRoom(replicas: readonly WorkerRecord[]): WorkerRecord[] {
  return [...replicas].sort((a, b) => Number(a.state === "degraded") - Number(b.state === "degraded") || load(a) - load(b) || (a.id < b.id ? -1 : 1));
}

/**
 * The pipelines each model has now, by model name. `order` ranks one
 * stage's replicas (the router passes its scorer: health, load, latency).
 * Only shards count — a range short of the whole model, with its digest and
 * block count advertised — and only those accepting work (warmed up).
 */
export function placePipelines(workers: readonly WorkerRecord[], order: (replicas: readonly WorkerRecord[]) => WorkerRecord[] = byRoom): Map<string, PipelinePlan[]> {
  // model \0 digest \0 blocks → shards
  const groups = new Map<string, ShardAt[]>();
  for (const w of workers) {
    if (!acceptsNewWork(w)) continue;
    for (const r of w.layerRanges) {
      if (r.digest === undefined || r.blocks === undefined) continue;
      if (r.start >= r.end || r.end > r.blocks || (r.start === 0 && r.end === r.blocks)) continue;
      // A head that serves the model whole (a static --next pipeline) is routed as a worker already.
      if (w.models.includes(r.model)) continue;
      const key = `${r.model}\u0000${r.digest}\u0000${r.blocks}`;
      groups.set(key, [...(groups.get(key) ?? []), { worker: w, range: r as ShardAt["range"] }]);
    }
  }
  const out = new Map<string, PipelinePlan[]>();
  for (const shards of groups.values()) {
    const { model, digest, blocks } = shards[0]!.range;
    // Replicas per exact range.
    const byRange = new Map<string, { start: number; end: number; replicas: WorkerRecord[] }>();
    for (const s of shards) {
      const k = `${s.range.start}-${s.range.end}`;
      const e = byRange.get(k) ?? { start: s.range.start, end: s.range.end, replicas: [] };
      if (!e.replicas.includes(s.worker)) e.replicas.push(s.worker);
      byRange.set(k, e);
    }
    const ranges = [...byRange.values()].map((r) => ({ ...r, replicas: order(r.replicas) }));
    const rest = bestChains(ranges, blocks);
    for (const head of ranges.filter((r) => r.start === 0)) {
      const chain = rest.get(head.end);
      if (!chain) continue;
      const stages: PipelineStage[] = chain.map((r) => ({ start: r.start, end: r.end, replicas: r.replicas.slice(0, MAX_STAGE_HOPS) }));
      for (const h of head.replicas) {
        // A worker is one stage of a pipeline, never two (its blocks would run twice on one engine's slot budget).
        if (stages.some((st) => st.replicas.includes(h))) continue;
        const plan: PipelinePlan = { model, digest, blocks, head: h, headEnd: head.end, stages, record: pipelineRecord(h, model, stages) };
        out.set(model, [...(out.get(model) ?? []), plan]);
      }
    }
  }
  return out;
}

/**
 * For every block boundary b, the best way from b to `blocks`: fewest
 * stages first, then the least loaded first replicas. Ranges only go
 * forward, so one pass from the end suffices.
 */
function bestChains(ranges: Array<{ start: number; end: number; replicas: WorkerRecord[] }>, blocks: number) {
  type Best = { hops: number; cost: number; chain: typeof ranges };
  const best = new Map<number, Best>([[blocks, { hops: 0, cost: 0, chain: [] }]]);
  const starts = [...new Set(ranges.map((r) => r.start))].filter((s) => s > 0).sort((a, b) => b - a);
  for (const s of starts) {
    let pick: Best | undefined;
    for (const r of ranges) {
      if (r.start !== s) continue;
      const after = best.get(r.end);
      if (!after) continue;
      const cand = { hops: after.hops + 1, cost: Math.max(after.cost, load(r.replicas[0]!)), chain: [r, ...after.chain] };
      if (!pick || cand.hops < pick.hops || (cand.hops === pick.hops && cand.cost < pick.cost)) pick = cand;
    }
    if (pick) best.set(s, pick);
  }
  const out = new Map<number, typeof ranges>();
  for (const [b, v] of best) if (b < blocks) out.set(b, v.chain);
  return out;
}

/** The pipeline seen as one worker: the head's identity, the busiest stage's load, the smallest stage's capacity. */
function pipelineRecord(head: WorkerRecord, model: string, stages: PipelineStage[]): WorkerRecord {
  const firsts = [head, ...stages.map((s) => s.replicas[0]!)];
  const busiest = firsts.reduce((a, b) => (load(b) > load(a) ? b : a));
  const capacity = Math.min(...firsts.map((w) => w.capacity));
  return {
    ...head,
    models: [model],
    inFlight: Math.round(load(busiest) * capacity),
    queueDepth: 0,
    capacity,
    state: firsts.some((w) => w.state === "degraded") ? "degraded" : head.state,
  };
}

/**
 * The pipeline without the workers `skip` names (leased by someone else),
 * and with `prefer` first in its stage: undefined when it cannot run without
 * them — its head is one, or they are every replica of some stage. The plan
 * itself when nothing changes.
 */
export function pipelineWithout(p: PipelinePlan, skip: (workerId: string) => boolean, prefer?: string): PipelinePlan | undefined {
  if (skip(p.head.id)) return undefined;
  let changed = false;
  const stages: PipelineStage[] = [];
  for (const s of p.stages) {
    let replicas = s.replicas.filter((w) => !skip(w.id));
    if (replicas.length === 0) return undefined;
    const at = prefer === undefined ? -1 : replicas.findIndex((w) => w.id === prefer);
    if (at > 0) replicas = [replicas[at]!, ...replicas.slice(0, at), ...replicas.slice(at + 1)];
    if (replicas.length !== s.replicas.length || replicas.some((w, i) => w !== s.replicas[i])) changed = true;
    stages.push({ ...s, replicas });
  }
  return changed ? { ...p, stages, record: pipelineRecord(p.head, p.model, stages) } : p;
}

/** What the head is told (before tickets): the stages after it, replicas in order. */
export function routePlanOf(p: PipelinePlan): RoutePlan {
  return { model: p.model, digest: p.digest, stages: p.stages.map((s) => ({ start: s.start, end: s.end, hops: s.replicas.map((w) => ({ id: w.id, url: w.url })) })) };
}

/** Every worker a pipeline may use (the head and all replicas). */
export function pipelineWorkers(p: PipelinePlan): string[] {
  return [p.head.id, ...p.stages.flatMap((s) => s.replicas.map((w) => w.id))];
}

/** The chain in a few words, for x-switchyard-route: `pipeline[h 0-15 > t1|t2 15-30]`. */
export function describePipeline(p: PipelinePlan): string {
  const parts = [`${p.head.id} 0-${p.headEnd}`, ...p.stages.map((s) => `${s.replicas.map((w) => w.id).join("|")} ${s.start}-${s.end}`)];
  return `pipeline[${parts.join(" > ")}]`;
}
