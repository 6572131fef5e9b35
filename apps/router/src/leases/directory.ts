// The router's view of live GPU leases: a snapshot refreshed every pollMs from
// the LeaseStore (like WorkerDirectory for the registry), so requests without
// a lease skip leased workers without asking Redis. Requests that find every
// worker leased wait here, a bounded number per worker, for a lease to end.
import { onAbort, type AbortLike } from "../abort.ts";
import type { Lease, LeaseStore } from "@switchyard/state";
import type { Backend } from "../backends/types.ts";
import type { Logger } from "../observability/log.ts";
import { Poller } from "../routing/poller.ts";

export interface LeaseQueueOptions {
  /** Waiters per leased worker (in this router) at most; 0: never wait. */
  depthPerWorker: number;
  /** How long a waiter waits for a lease to end. */
  waitMs: number;
}

export interface SkipResult {
  /** The candidates without leased workers (possibly no worker at all, or nothing). */
  backends: Backend[];
  /** Workers skipped because they are leased. */
  leasedWorkers: string[];
  /** When the first of them frees up at the earliest (ms from now), if known. */
  earliestFreeMs?: number;
}

export class LeaseDirectory {
  private byWorker = new Map<string, Lease>();
  private byId = new Map<string, Lease>();
  /** Store clock − local clock, measured at the last refresh. */
  private offsetMs = 0;
  private readonly poller: Poller;
  private readonly waiters = new Set<() => void>();
  private readonly queued = new Map<string, number>();

  constructor(
    private readonly store: LeaseStore,
    private readonly pollMs: number,
    private readonly log: Logger,
    /** Leases the store reported expired during a refresh (the audit). */
    private readonly onExpired: (expired: Lease[], seenAtMs: number) => void = () => {},
  ) {
    this.poller = new Poller(pollMs, () => this.load(), log, "lease refresh failed");
  }

  start(): Promise<void> {
    return this.poller.start();
  }

  stop(): void {
    this.poller.stop();
    this.wake();
  }

  refresh(): Promise<void> {
    return this.poller.refresh();
  }

  private async load(): Promise<void> {
    const sentAt = Date.now();
    const list = await this.store.list();
    // The store's clock at the reply, against ours halfway through the call.
    this.offsetMs = list.nowMs - Math.round((sentAt + Date.now()) / 2);
    if (list.expired.length) this.onExpired(list.expired, list.nowMs);
    const previous = this.byWorker;
    this.byWorker = new Map(list.leases.map((l) => [l.workerId, l]));
    this.byId = new Map(list.leases.map((l) => [l.id, l]));
    for (const [worker, l] of previous) {
      if (this.byWorker.get(worker)?.id !== l.id) {
        this.wake();
        break;
      }
    }
  }

  /** The store's clock now, as far as this router can tell. */
  storeNow(): number {
    return Date.now() + this.offsetMs;
  }

  /** The live lease on a worker, if any (an expired one no longer counts, refresh or not). */
  leaseOf(workerId: string): Lease | undefined {
    const l = this.byWorker.get(workerId);
    return l && l.expiresAtMs > this.storeNow() ? l : undefined;
  }

  /** The live lease with this id, if this router knows it. */
  get(leaseId: string): Lease | undefined {
    const l = this.byId.get(leaseId);
    return l && l.expiresAtMs > this.storeNow() ? l : undefined;
  }

  live(): Lease[] {
    const now = this.storeNow();
    return [...this.byWorker.values()].filter((l) => l.expiresAtMs > now);
  }

  /** A lease this router just granted or extended: routable at once, not after the next poll. */
  note(lease: Lease): void {
    const old = this.byWorker.get(lease.workerId);
    if (old && old.id !== lease.id) this.byId.delete(old.id);
    this.byWorker.set(lease.workerId, lease);
    this.byId.set(lease.id, lease);
  }

  /** A lease this router saw end (released or expired): its worker is free now. */
  forget(lease: Pick<Lease, "id" | "workerId">): void {
    this.byId.delete(lease.id);
    if (this.byWorker.get(lease.workerId)?.id === lease.id) this.byWorker.delete(lease.workerId);
    this.wake();
  }

  lastRefreshAgeMs(): number {
    return this.poller.lastRefreshAgeMs();
  }

  /**
   * Resolves when a lease ends (seen by a refresh, a local release, or its
   * expiry passing), after `timeoutMs`, or when `signal` aborts; whichever is
   * first. Callers re-check what they wait for.
   */
  waitForChange(timeoutMs: number, signal?: AbortLike): Promise<void> {
    return new Promise((resolve) => {
      const now = this.storeNow();
      let soonest = Infinity;
      for (const l of this.byWorker.values()) if (l.expiresAtMs > now) soonest = Math.min(soonest, l.expiresAtMs - now);
      let off: (() => void) | undefined;
      const done = () => {
        clearTimeout(timer);
        this.waiters.delete(done);
        off?.();
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, Math.min(timeoutMs, soonest + 1)));
      this.waiters.add(done);
      if (signal) off = onAbort(signal, done);
      if (signal?.aborted) done();
    });
  }

  private wake(): void {
    for (const w of [...this.waiters]) w();
  }

  /**
   * For a request without a lease: the candidates minus leased workers. When
   * that leaves no worker but some were only leased, the request waits (at
   * most `depthPerWorker` per leased worker in this router, at most `waitMs`)
   * for one to free up; after that the rest of the chain (paid backends) is
   * all it gets.
   */
  async skipLeased(backends: Backend[], queue: LeaseQueueOptions, signal?: AbortLike): Promise<SkipResult> {
    // A lease reserves that GPU for its holder. A pipeline goes without its
    // leased replicas (narrowed for this request), and is leased only when it
    // cannot: its head is, or every replica of some stage.
    const leasedNow = (id: string) => this.leaseOf(id) !== undefined;
    const leasedIn = (list: Backend[]) => list.filter((b) => (b.narrow ? !b.narrow(leasedNow) : b.workerId !== undefined && leasedNow(b.workerId)));
    let leased = leasedIn(backends);
    if (leased.length === 0) return { backends, leasedWorkers: [] };
    const without = (skip: Backend[]) => backends.filter((b) => !skip.includes(b));
    let rest = without(leased);
    if (rest.some((b) => b.kind === "worker")) return { backends: rest, leasedWorkers: leased.map((b) => b.workerId!) };
    // Every worker candidate is leased: queue behind the one freeing first, if it has room.
    const deadline = Date.now() + queue.waitMs;
    const leaseIn = (b: Backend) => (b.pipelineWorkers ?? [b.workerId!]).map((id) => this.leaseOf(id)).find((l) => l !== undefined);
    const byExpiry = leased.map((b) => leaseIn(b)!).sort((a, b) => a.expiresAtMs - b.expiresAtMs);
    const target = byExpiry.find((l) => (this.queued.get(l.workerId) ?? 0) < queue.depthPerWorker);
    if (target && queue.waitMs > 0) {
      this.queued.set(target.workerId, (this.queued.get(target.workerId) ?? 0) + 1);
      try {
        while (!signal?.aborted && Date.now() < deadline) {
          await this.waitForChange(deadline - Date.now(), signal);
          leased = leasedIn(backends);
          rest = without(leased);
          if (rest.some((b) => b.kind === "worker")) break;
        }
      } finally {
        const n = (this.queued.get(target.workerId) ?? 1) - 1;
        if (n > 0) this.queued.set(target.workerId, n);
        else this.queued.delete(target.workerId);
      }
    }
    const still = leased.map((b) => leaseIn(b)).filter((l): l is Lease => l !== undefined);
    const earliest = still.length ? Math.min(...still.map((l) => l.expiresAtMs)) - this.storeNow() : undefined;
    return { backends: rest, leasedWorkers: leased.map((b) => b.workerId!), ...(earliest !== undefined ? { earliestFreeMs: earliest } : {}) };
  }

  /** Requests waiting in this router for a worker's lease to end. */
  waiting(workerId: string): number {
    return this.queued.get(workerId) ?? 0;
  }
}
