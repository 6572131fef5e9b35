// The router's view of the worker registry: a snapshot refreshed every
// pollMs from the RegistryStore, so the request path never waits on Redis.
// A worker whose heartbeat expired disappears at the next refresh.
import { acceptsNewWork, type RegistryStore, type WorkerRecord } from "@switchyard/state";
import type { Logger } from "../observability/log.ts";

export class WorkerDirectory {
  private snapshot: WorkerRecord[] = [];
  /** model → workers serving it, derived once per refresh (read on every request). */
  private byModel = new Map<string, WorkerRecord[]>();
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  private lastOk = 0;
  private readonly listeners = new Set<(workers: WorkerRecord[]) => void>();

  constructor(
    private readonly store: RegistryStore,
    private readonly pollMs: number,
    private readonly log: Logger,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => void this.refresh(), this.pollMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  onChange(fn: (workers: WorkerRecord[]) => void): void {
    this.listeners.add(fn);
  }

  refresh(): Promise<void> {
    // Coalesce overlapping refreshes when Redis is slow.
    this.refreshing ??= (async () => {
      try {
        this.snapshot = await this.store.list();
        const byModel = new Map<string, WorkerRecord[]>();
        for (const w of this.snapshot) for (const m of w.models) byModel.set(m, [...(byModel.get(m) ?? []), w]);
        this.byModel = byModel;
        this.lastOk = Date.now();
        for (const fn of this.listeners) fn(this.snapshot);
      } catch (err) {
        this.log.warn("registry refresh failed", { error: (err as Error).message });
      }
    })().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  all(): WorkerRecord[] {
    return this.snapshot;
  }

  /** Models served by any live worker (in any state). */
  models(): ReadonlyMap<string, readonly WorkerRecord[]> {
    return this.byModel;
  }

  /** Workers that may take a new request for `model`, least loaded first. */
  candidates(model: string): WorkerRecord[] {
    const eligible = (this.byModel.get(model) ?? []).filter(acceptsNewWork);
    const load = (w: WorkerRecord) => (w.inFlight + w.queueDepth) / w.capacity;
    // Shuffle first so equal loads spread across workers, then a stable sort.
    for (let i = eligible.length - 1; i > 0; i--) {
      const j = Math.floor(Math.random() * (i + 1));
      [eligible[i], eligible[j]] = [eligible[j]!, eligible[i]!];
    }
    // Degraded workers (CPU fallback) go after healthy ones.
    return eligible.sort((a, b) => Number(a.state === "degraded") - Number(b.state === "degraded") || load(a) - load(b));
  }

  lastRefreshAgeMs(): number {
    return this.lastOk === 0 ? Infinity : Date.now() - this.lastOk;
  }
}
