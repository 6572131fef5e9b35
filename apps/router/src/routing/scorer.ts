// Orders the candidates of one chain step by what this router has seen:
//
//   score = p95 × (1 + loadWeight × load) × (1 + failureWeight × failures) + costMsPerCent × cents
//
//   p95       rolling p95 latency of this backend for this request class
//             (time to first token for streams, duration otherwise), over
//             the last `windowSize` samples younger than `windowMs`; until a
//             backend has `minSamples`, the median of its peers' (new
//             workers get a fair trial), or `defaultLatencyMs`
//   load      (in flight + queued) / capacity — in flight is the larger of
//             the heartbeat's count and this router's own live attempts,
//             plus the picks of this turn of the event loop whose attempts
//             have not begun (pick(): a burst ranked at once spreads)
//   failures  recent failure rate, failures / (attempts + 2)
//   cents     expected cost of this request on a paid backend (price book)
//
// Prefix affinity: a request whose first message (or prompt) is long goes,
// if it is not saturated, to a worker whose engine holds that prefix's keys
// and values — one that advertises the prefix in its heartbeat, or that this
// router last saw serve it well — since its time to first token is a
// fraction of another's. Its score is multiplied by `prefixAffinity` (1
// turns it off). Prefix names are per tenant (registry/prefix.ts): another
// tenant's identical prompt has another name, so affinity, its explanation
// and what workers advertise never tell one tenant what another sent.
//
// A worker with no free slot (in flight + queued ≥ capacity) goes after
// every one with room, whatever its score: it would queue the request, and
// a p95 lifted by such queueing must not send everything to its peer until
// that one queues in turn. Among full ones the score decides.
//
// Lower is better. With probability `epsilon` a random other healthy
// candidate goes first, so a backend that was slow once gets measured again.
// Every ranking can explain itself (the x-switchyard-route header, a debug log line).
import { priceForPrompt } from "@switchyard/db";
import { PREFIX_NAME_FIELD, type WorkerRecord } from "@switchyard/state";
import { priceBefore } from "../backends/anthropic/betas.ts";
import type { Backend, UpstreamFailure } from "../backends/types.ts";
import type { BudgetVerdict } from "../billing/guard.ts";
import type { PriceBook } from "../billing/prices.ts";
import { configSchema, type Config } from "../config.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import type { AttemptOutcome, WorkerHealth } from "./health.ts";
import { CACHE_SCOPE_FIELD, type RequestClass } from "./request-class.ts";
import { Window } from "./window.ts";

export type ScorerConfig = Config["routing"]["scorer"];

/** The defaults, for callers built without a config (embedders, tests). */
export function defaultScorerConfig(): ScorerConfig {
  return configSchema.parse({}).routing.scorer;
}

/**
 * An attempt's body fields for a worker: the request's tenant-scoped prefix
 * name (null when it has none), which the worker advertises once its engine
 * has the prefix cached, and the tenant's prefix-cache scope (null without a
 * tenant). Set by the router on every worker attempt, over whatever the
 * client put in those fields; paid backends never get them.
 */
export function withPrefixName(admission: BudgetVerdict, backend: Pick<Backend, "workerId">, cls: RequestClass): BudgetVerdict {
  if (!admission.ok || backend.workerId === undefined) return admission;
  return { ...admission, patch: { ...admission.patch, [PREFIX_NAME_FIELD]: cls.prefixKey ?? null, [CACHE_SCOPE_FIELD]: cls.cacheScope ?? null } };
}

/** How one candidate scored, for ordering and for the explanation. */
export interface Score {
  /** Backend id, e.g. "worker:w2" or "openrouter:vendor/model". */
  id: string;
  score: number;
  p95Ms: number;
  /** Latency samples behind p95 (0: a prior was used). */
  samples: number;
  inFlight: number;
  queued: number;
  capacity?: number;
  failureRate: number;
  costCents: number;
  paid: boolean;
  degraded: boolean;
  /** Held out by the health tracker, kept only because nothing else serves the model. */
  ejected: boolean;
  /** Put first by exploration rather than by its score. */
  explored: boolean;
  /** Its score got the prefix-affinity discount (it last served this prompt's prefix). */
  affinity?: boolean;
}

export interface Ranked<T> {
  item: T;
  score: Score;
}

/** Reports one attempt's end; called once. */
export type AttemptReporter = (r: AttemptReport) => void;

export interface AttemptReport {
  outcome: AttemptOutcome;
  /** Attempt start → first streamed event. */
  ttftMs?: number;
  /** Attempt start → end. */
  durationMs: number;
  failure?: UpstreamFailure["kind"];
  status?: number;
}

const fmt = (x: number) => (Number.isFinite(x) ? (x >= 100 ? x.toFixed(0) : x.toFixed(1)) : "?");

export function explainScore(s: Score): string {
  const parts = [`${s.id} score=${fmt(s.score)}`, `p95=${fmt(s.p95Ms)}ms${s.samples === 0 ? "(prior)" : `(n=${s.samples})`}`, `inflight=${s.inFlight}${s.capacity ? `/${s.capacity}` : ""}`];
  if (s.queued > 0) parts.push(`queued=${s.queued}`);
  if (s.failureRate > 0) parts.push(`fail=${(s.failureRate * 100).toFixed(0)}%`);
  if (s.paid) parts.push(`cost=${s.costCents.toFixed(4)}c`);
  if (s.degraded) parts.push("degraded");
  if (s.ejected) parts.push("ejected");
  if (s.explored) parts.push("explore");
  if (s.affinity) parts.push("prefix");
  return parts.join(" ");
}

export function explainRanking(scores: readonly Score[]): string {
  return scores.map(explainScore).join("; ");
}

export interface ScorerOptions {
  prices?: PriceBook;
  health?: WorkerHealth;
  metrics?: RouterMetrics;
  random?: () => number;
  now?: () => number;
}

/** Prefixes remembered per router (oldest forgotten first). */
const AFFINITY_ENTRIES = 10_000;

export class RouteScorer {
  /** `${backendId}\0${class}` → latency samples. */
  private readonly latency = new Map<string, Window>();
  /** backendId → outcomes (1 failed, 0 ok). */
  private readonly outcomes = new Map<string, Window>();
  /** backendId → attempts this router has in flight. */
  private readonly live = new Map<string, number>();
  private readonly turns = new Map<string, number>();
  /** backendId → routing picks made this turn of the event loop whose attempts have not begun. */
  private readonly picked = new Map<string, number>();
  /** Counts the turns in which picks were made: a pick from an ended turn is not counted down again. */
  private pickTurn = 0;
  private pickClearScheduled = false;
  /** prefix key → the worker backend that last served it well (insertion order = age). */
  private readonly affinity = new Map<string, string>();
  private readonly random: () => number;

  constructor(
    readonly cfg: ScorerConfig,
    private readonly opts: ScorerOptions = {},
  ) {
    this.random = opts.random ?? Math.random;
  }

  get health(): WorkerHealth | undefined {
    return this.opts.health;
  }

  private now(): number {
    return this.opts.now ? this.opts.now() : performance.now();
  }

  /** Attempts this router has in flight on a backend. */
  inFlight(backendId: string): number {
    return this.live.get(backendId) ?? 0;
  }

  /**
   * A routing decision's first candidate: it counts as in flight on that
   * backend until its attempt begins (the returned function, idempotent) or
   * this turn of the event loop ends. Requests ranked in one turn — a burst
   * the admission gate lets through at once, or one whose waits all ended on
   * the same promise — then see each other's picks: without this they all
   * saw the same counts and took the same best worker, queueing on it while
   * its peer sat idle.
   */
  pick(backendId: string): () => void {
    if (!this.pickClearScheduled) {
      this.pickClearScheduled = true;
      setImmediate(() => {
        this.pickClearScheduled = false;
        this.picked.clear();
        this.pickTurn++;
      });
    }
    this.picked.set(backendId, (this.picked.get(backendId) ?? 0) + 1);
    const turn = this.pickTurn;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      if (turn !== this.pickTurn) return;
      const left = (this.picked.get(backendId) ?? 0) - 1;
      if (left > 0) this.picked.set(backendId, left);
      else this.picked.delete(backendId);
    };
  }

  /** Picks on a backend whose attempts have not begun yet (see pick). */
  picks(backendId: string): number {
    return this.picked.get(backendId) ?? 0;
  }

  private p95Of(backendId: string, cls: RequestClass, now: number): { p95: number; n: number } {
    const w = this.latency.get(`${backendId}\u0000${cls.key}`);
    if (!w) return { p95: NaN, n: 0 };
    const r = w.p95(now, this.cfg.windowMs);
    return r.n >= this.cfg.minSamples ? r : { p95: NaN, n: 0 };
  }

  private failureRate(backendId: string, now: number): number {
    const w = this.outcomes.get(backendId);
    if (!w) return 0;
    const { sum: failed, n } = w.sum(now, this.cfg.windowMs);
    return failed / (n + 2);
  }

  private costCents(backend: Backend | undefined, cls: RequestClass): number {
    if (!backend?.paid) return 0;
    const book = this.opts.prices?.price(backend.kind, backend.model);
    if (!book) return 0;
    // A prompt over a long-context threshold costs the tier's rates (Anthropic's only with its 1M beta).
    const price = priceForPrompt(priceBefore(backend.kind, book, cls.contextOneM === true), cls.promptTokens);
    const out = cls.path === "/v1/embeddings" ? 0 : (cls.maxOutput ?? this.cfg.expectedOutputTokens);
    // Scoring only: a float is fine here, money itself never is one.
    const micro = (cls.promptTokens * Number(price.inputMicroPerMtok) + out * Number(price.outputMicroPerMtok)) / 1e6;
    return micro / 1e6;
  }

  private baseScore(p95: number, load: number, failureRate: number, cents: number): number {
    return p95 * (1 + this.cfg.loadWeight * load) * (1 + this.cfg.failureWeight * failureRate) + this.cfg.costMsPerCent * cents;
  }

  /** Median of the known p95s among these ids, for backends not yet measured. */
  private prior(known: number[]): number {
    if (known.length === 0) return this.cfg.defaultLatencyMs;
    const s = [...known].sort((a, b) => a - b);
    return s[Math.floor((s.length - 1) / 2)]!;
  }

  /**
   * Workers that may take this request, best first. `workers` are already
   * filtered to those accepting work; ejected ones are dropped unless every
   * one is ejected (then they are all kept, least recently ejected first:
   * better a try than a certain 503). Degraded workers go after healthy ones.
   * `decide`: this ranking routes a request (explores, takes a round-robin
   * turn); false for lookups that only look.
   */
  rankWorkers(workers: readonly WorkerRecord[], cls: RequestClass, modelKey: string, decide = true): Ranked<WorkerRecord>[] {
    const now = this.now();
    const health = this.opts.health;
    let pool = health ? workers.filter((w) => !health.isEjected(w.id)) : [...workers];
    const panic = pool.length === 0 && workers.length > 0;
    if (panic) pool = [...workers];
    const measured = pool.map((w) => ({ w, id: `worker:${w.id}`, lat: this.p95Of(`worker:${w.id}`, cls, now) }));
    const prior = this.prior(measured.filter((m) => m.lat.n > 0).map((m) => m.lat.p95));
    const ranked: Ranked<WorkerRecord>[] = measured.map(({ w, id, lat }) => {
      const inFlight = Math.max(w.inFlight, this.inFlight(id)) + this.picks(id);
      const load = (inFlight + w.queueDepth) / Math.max(1, w.capacity);
      const failureRate = this.failureRate(id, now);
      const p95 = lat.n > 0 ? lat.p95 : prior;
      // A saturated worker would queue the request: its cache is no help then.
      const affinity =
        cls.prefixKey !== undefined &&
        this.cfg.prefixAffinity < 1 &&
        load < 1 &&
        (this.affinity.get(cls.prefixKey) === id || w.prefixes.includes(cls.prefixKey));
      return {
        item: w,
        score: {
          id,
          score: this.baseScore(p95, load, failureRate, 0) * (affinity ? this.cfg.prefixAffinity : 1),
          p95Ms: p95,
          samples: lat.n,
          inFlight,
          queued: w.queueDepth,
          capacity: w.capacity,
          failureRate,
          costCents: 0,
          paid: false,
          degraded: w.state === "degraded",
          ejected: panic,
          explored: false,
          ...(affinity ? { affinity } : {}),
        },
      };
    });
    if (this.cfg.mode === "round_robin") return this.rotate(ranked, modelKey, decide);
    // Shuffle first so equal scores spread, then a stable sort.
    for (let i = ranked.length - 1; i > 0; i--) {
      const j = Math.floor(this.random() * (i + 1));
      [ranked[i], ranked[j]] = [ranked[j]!, ranked[i]!];
    }
    // A worker with no free slot queues the request behind the ones it runs:
    // one with room goes first, whatever the p95s say (a p95 lifted by such
    // queueing would otherwise send every next request to the other worker
    // until it queues too, and back).
    const full = (s: Score) => s.capacity !== undefined && s.inFlight + s.queued >= s.capacity;
    ranked.sort((a, b) => Number(a.score.degraded) - Number(b.score.degraded) || Number(full(a.score)) - Number(full(b.score)) || a.score.score - b.score.score);
    if (decide) this.explore(ranked);
    return ranked;
  }

  /** Round-robin baseline: rotate over the workers (by id), degraded last. */
  private rotate(ranked: Ranked<WorkerRecord>[], modelKey: string, decide: boolean): Ranked<WorkerRecord>[] {
    ranked.sort((a, b) => (a.item.id < b.item.id ? -1 : a.item.id > b.item.id ? 1 : 0));
    const healthy = ranked.filter((r) => !r.score.degraded);
    const degraded = ranked.filter((r) => r.score.degraded);
    const turn = this.turns.get(modelKey) ?? 0;
    if (decide) this.turns.set(modelKey, turn + 1);
    const k = healthy.length > 0 ? turn % healthy.length : 0;
    return [...healthy.slice(k), ...healthy.slice(0, k), ...degraded];
  }

  /** With probability epsilon, a random other healthy candidate goes first. */
  private explore<T>(ranked: Ranked<T>[]): void {
    const healthy = ranked.filter((r) => !r.score.degraded && !r.score.ejected).length;
    if (healthy < 2 || this.cfg.epsilon <= 0 || this.random() >= this.cfg.epsilon) return;
    const j = 1 + Math.floor(this.random() * (healthy - 1));
    const [picked] = ranked.splice(j, 1);
    picked!.score.explored = true;
    ranked.unshift(picked!);
    this.opts.metrics?.routeExplorations.inc();
  }

  /** A non-worker backend's score (paid APIs: no heartbeat, load from this router's own attempts). */
  scoreBackend(backend: Backend, cls: RequestClass): Score {
    const now = this.now();
    const lat = this.p95Of(backend.id, cls, now);
    const p95 = lat.n > 0 ? lat.p95 : this.cfg.defaultLatencyMs;
    const inFlight = this.inFlight(backend.id);
    const failureRate = this.failureRate(backend.id, now);
    const costCents = this.costCents(backend, cls);
    return {
      id: backend.id,
      // A provider's capacity is not ours to know: its latency samples carry its load.
      score: this.baseScore(p95, 0, failureRate, costCents),
      p95Ms: p95,
      samples: lat.n,
      inFlight,
      queued: 0,
      failureRate,
      costCents,
      paid: backend.paid,
      degraded: false,
      ejected: false,
      explored: false,
    };
  }

  /**
   * An attempt on `backend` starts now; the returned reporter ends it (once):
   * a latency sample for the class on success, the outcome for the failure
   * rate and the health tracker, and this router's in-flight count.
   */
  begin(backend: Backend, cls: RequestClass): AttemptReporter {
    const id = backend.id;
    this.live.set(id, this.inFlight(id) + 1);
    let ended = false;
    return (r) => {
      if (ended) return;
      ended = true;
      const left = this.inFlight(id) - 1;
      if (left > 0) this.live.set(id, left);
      else this.live.delete(id);
      this.record(backend, cls, r);
    };
  }

  /** Records an attempt's outcome (also used directly by tests and benches). */
  record(backend: Pick<Backend, "id" | "workerId">, cls: RequestClass, r: AttemptReport): void {
    const now = this.now();
    if (cls.prefixKey !== undefined && r.outcome === "ok" && backend.id.startsWith("worker:")) {
      this.affinity.delete(cls.prefixKey);
      this.affinity.set(cls.prefixKey, backend.id);
      if (this.affinity.size > AFFINITY_ENTRIES) this.affinity.delete(this.affinity.keys().next().value!);
    }
    const sample = cls.stream ? r.ttftMs : r.outcome === "ok" ? r.durationMs : undefined;
    // A stream's first token is a fair sample even when its client left later.
    if (sample !== undefined && (r.outcome !== "neutral" || cls.stream)) {
      const key = `${backend.id}\u0000${cls.key}`;
      let w = this.latency.get(key);
      if (!w) {
        w = new Window(this.cfg.windowSize);
        this.latency.set(key, w);
      }
      w.add(now, sample);
    }
    if (r.outcome !== "neutral") {
      let o = this.outcomes.get(backend.id);
      if (!o) {
        o = new Window(32);
        this.outcomes.set(backend.id, o);
      }
      o.add(now, r.outcome === "failed" ? 1 : 0);
    }
    if (backend.workerId) this.opts.health?.record(backend.workerId, r.outcome, r.failure, r.status);
  }

  /** Forget the statistics of workers that left the registry (bounded memory). */
  retainWorkers(ids: ReadonlySet<string>): void {
    const keep = (backendId: string) => !backendId.startsWith("worker:") || ids.has(backendId.slice("worker:".length));
    for (const k of this.latency.keys()) if (!keep(k.slice(0, k.indexOf("\u0000")))) this.latency.delete(k);
    for (const k of this.outcomes.keys()) if (!keep(k)) this.outcomes.delete(k);
  }
}

/**
 * Orders one resolution's candidates across chain steps: the chain stays the
 * outer order, but a free backend whose score is comparable to (at most
 * `ratio` × ) a paid one's ahead of it moves in front of it. Never the reverse.
 */
export function promoteFree<T extends { score: Score }>(list: T[], ratio: number): T[] {
  const out = [...list];
  for (let i = 1; i < out.length; i++) {
    const cur = out[i]!;
    if (cur.score.paid) continue;
    let j = i;
    while (j > 0 && out[j - 1]!.score.paid && cur.score.score <= out[j - 1]!.score.score * ratio) j--;
    if (j < i) {
      out.splice(i, 1);
      out.splice(j, 0, cur);
    }
  }
  return out;
}
