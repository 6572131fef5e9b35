// The router's view of the worker registry: a snapshot refreshed every
// pollMs from the RegistryStore, so the request path never waits on Redis.
// A worker whose heartbeat expired disappears at the next refresh.
import { acceptsNewWork, type RegistryStore, type WorkerRecord } from "@switchyard/state";
import type { Logger } from "../observability/log.ts";
import { Poller } from "./poller.ts";
import { defaultRequestClass, defaultScorerConfig, RouteScorer, type Ranked, type RequestClass } from "./scorer.ts";

export class WorkerDirectory {
  private snapshot: WorkerRecord[] = [];
  /** model → workers serving it, derived once per refresh (read on every request). */
  private byModel = new Map<string, WorkerRecord[]>();
  private readonly poller: Poller;
  private readonly listeners = new Set<(workers: WorkerRecord[]) => void>();

  constructor(
    private readonly store: RegistryStore,
    private readonly pollMs: number,
    private readonly log: Logger,
    /** Orders candidates (and, through its health tracker, ejects failing workers). */
    readonly scorer: RouteScorer = new RouteScorer(defaultScorerConfig()),
  ) {
    this.poller = new Poller(pollMs, () => this.load(), log, "registry refresh failed");
    this.onChange((workers) => {
      scorer.health?.observeHeartbeats(workers);
      scorer.retainWorkers(new Set(workers.map((w) => w.id)));
    });
  }

  start(): Promise<void> {
    return this.poller.start();
  }

  stop(): void {
    this.poller.stop();
  }

  onChange(fn: (workers: WorkerRecord[]) => void): void {
    this.listeners.add(fn);
  }

  refresh(): Promise<void> {
    return this.poller.refresh();
  }

  private async load(): Promise<void> {
    this.snapshot = await this.store.list();
    const byModel = new Map<string, WorkerRecord[]>();
    for (const w of this.snapshot) for (const m of w.models) byModel.set(m, [...(byModel.get(m) ?? []), w]);
    this.byModel = byModel;
    for (const fn of this.listeners) fn(this.snapshot);
  }

  all(): WorkerRecord[] {
    return this.snapshot;
  }

  /** Models served by any live worker (in any state). */
  models(): ReadonlyMap<string, readonly WorkerRecord[]> {
    return this.byModel;
  }

  /** Workers that may take a new request for `model`, best first (see rank); a look, not a routing decision. */
  candidates(model: string, cls: RequestClass = defaultRequestClass): WorkerRecord[] {
    return this.rank(model, cls, false).map((r) => r.item);
  }

  /**
   * Workers that may take a new request for `model`, ordered by the scorer
   * with how each scored: warming and draining workers excluded, ejected
   * ones too (unless all are), degraded ones (CPU fallback) after the rest.
   */
  rank(model: string, cls: RequestClass = defaultRequestClass, decide = true): Ranked<WorkerRecord>[] {
    const eligible = (this.byModel.get(model) ?? []).filter(acceptsNewWork);
    return this.scorer.rankWorkers(eligible, cls, model, decide);
  }

  lastRefreshAgeMs(): number {
    return this.poller.lastRefreshAgeMs();
  }
}
