// GPU leases on the request path: granting (with a fresh fencing token from
// Postgres, optionally waiting for a worker to free up), reading, extending
// and releasing a tenant's own leases, auditing every change, and routing
// requests that carry `x-switchyard-lease` to their leased worker only.
import type { AbortLike } from "../abort.ts";
import { acceptsNewWork, isLeaseId, newLeaseId, type Lease, type LeaseStore, type WorkerRecord } from "@switchyard/state";
import type { Backend } from "../backends/types.ts";
import type { Config } from "../config.ts";
import { ApiError } from "../errors.ts";
import type { Logger } from "../observability/log.ts";
import type { WorkerDirectory } from "../routing/directory.ts";
import type { LeaseDirectory } from "./directory.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import type { LeaseAudit, LeaseAuditEvent } from "./audit.ts";

export type LeaseStatus = "active" | "released" | "expired";

export interface LeaseView {
  lease: Lease;
  status: LeaseStatus;
  /** When it ended (store clock), for released and expired leases. */
  endedAtMs?: number;
}

export type LeaseTarget = { model: string } | { worker: string };

export interface AcquireRequest {
  tenantId: number;
  target: LeaseTarget;
  durationMs: number;
  /** Wait up to this long for a matching worker to free up (0: answer at once). */
  waitMs: number;
  signal?: AbortLike;
}

export interface LeaseRouting {
  backends: Backend[];
  /** Sent to the worker with every attempt of a lease holder's request. */
  fencingToken?: number;
  /** The leased worker the token belongs to. */
  fencingWorker?: string;
}

export interface LeaseServiceOptions {
  store: LeaseStore;
  audit: LeaseAudit;
  directory: LeaseDirectory;
  workers: WorkerDirectory;
  /** The worker name a model means (BackendChain.upstreamName: the chain owns the aliases); undefined: no worker serves it. */
  workerName: (model: string) => string | undefined;
  config: Pick<Config, "leases" | "router">;
  log: Logger;
  metrics?: RouterMetrics;
}

/** A grant that lost a race for a token retries with a fresh one this many times. */
const TOKEN_TRIES = 5;

export class LeaseService {
  readonly directory: LeaseDirectory;
  private readonly store: LeaseStore;
  private readonly audit: LeaseAudit;
  private readonly workers: WorkerDirectory;
  private readonly log: Logger;
  private readonly pending = new Set<Promise<void>>();

  constructor(private readonly opts: LeaseServiceOptions) {
    this.directory = opts.directory;
    this.store = opts.store;
    this.audit = opts.audit;
    this.workers = opts.workers;
    this.log = opts.log;
  }

  /** Grants a lease on the named worker, or on a ready worker serving the model that nobody holds. */
  async acquire(req: AcquireRequest): Promise<Lease> {
    const deadline = Date.now() + req.waitMs;
    // A token not used by a grant (the worker was held) serves the next try.
    const token: { value?: number } = {};
    for (let pass = 0; ; pass++) {
      const ready = this.readyTargets(req.target);
      // Free-looking workers first; on the first pass every candidate is
      // asked (the snapshot may be behind), later only those that look free.
      const ordered = [...ready].sort((a, b) => Number(this.directory.leaseOf(a.id) !== undefined) - Number(this.directory.leaseOf(b.id) !== undefined));
      let earliestMs: number | undefined;
      for (const w of ordered) {
        const held = this.directory.leaseOf(w.id);
        if (pass > 0 && held) {
          earliestMs = Math.min(earliestMs ?? Infinity, held.expiresAtMs - this.directory.storeNow());
          continue;
        }
        const r = await this.tryAcquire(w.id, req.tenantId, req.durationMs, token);
        if ("lease" in r) return r.lease;
        earliestMs = Math.min(earliestMs ?? Infinity, r.freeInMs);
      }
      const left = deadline - Date.now();
      if (left <= 0 || req.signal?.aborted) {
        const what = "worker" in req.target ? `worker '${req.target.worker}'` : `model '${req.target.model}'`;
        if (ready.length === 0) {
          throw new ApiError("no_healthy_backend", `no ready worker for ${what} (warming, draining or down)`, null, { "retry-after": String(this.opts.config.router.retryAfterS) });
        }
        const inS = Math.max(1, Math.ceil((earliestMs ?? 1000) / 1000));
        throw new ApiError("lease_conflict", `every ready worker for ${what} is leased; the first frees up in about ${inS} s`, null, { "retry-after": String(inS) });
      }
      // A token is reused within a pass only: while this one waited, a newer
      // grant on a worker may have been lost with Redis' data, and the
      // restore knows only the live leases' tokens (the worker knows more).
      token.value = undefined;
      // Wake when a lease ends, and look at the registry again at least every second.
      await this.directory.waitForChange(Math.min(left, 1_000), req.signal);
    }
  }

  /** The tenant's lease: live, or ended (from the audit). Someone else's is "not found". */
  async get(tenantId: number, leaseId: string): Promise<LeaseView> {
    if (!isLeaseId(leaseId)) throw notFound(leaseId);
    const r = await this.store.get(leaseId);
    this.sawExpired(r.expired, r.nowMs);
    if (r.lease) {
      if (r.lease.tenantId !== tenantId) throw notFound(leaseId);
      return { lease: r.lease, status: "active" };
    }
    return this.ended(tenantId, leaseId);
  }

  /** Only the holder, only while live: the lease then ends durationMs from now (never earlier than it did). */
  async extend(tenantId: number, leaseId: string, durationMs: number): Promise<Lease> {
    if (!isLeaseId(leaseId)) throw notFound(leaseId);
    const r = await this.store.extend({ leaseId, tenantId, durationMs });
    this.sawExpired(r.expired, r.nowMs);
    if (!r.ok) {
      const view = await this.ended(tenantId, leaseId);
      throw new ApiError("lease_expired", `lease ${leaseId} has ${view.status === "released" ? "been released" : "expired"}; acquire a new one`);
    }
    await this.record([event(r.lease, "extended", r.nowMs)]);
    this.directory.note(r.lease);
    return r.lease;
  }

  /** Only the holder; the worker is free at once. Releasing an ended lease answers how it ended. */
  async release(tenantId: number, leaseId: string): Promise<LeaseView> {
    if (!isLeaseId(leaseId)) throw notFound(leaseId);
    const r = await this.store.release({ leaseId, tenantId });
    this.sawExpired(r.expired, r.nowMs);
    if (!r.ok) return this.ended(tenantId, leaseId);
    this.directory.forget(r.lease);
    await this.record([event(r.lease, "released", r.nowMs)]);
    return { lease: r.lease, status: "released", endedAtMs: r.nowMs };
  }

  /**
   * Where a request may run as far as leases go. With a lease id: only on the
   * leased worker, carrying its fencing token (404 unknown or someone else's,
   * 409 ended). Without: leased workers are skipped; when that leaves no
   * worker the request waits, bounded, for a lease to end, then falls through
   * the chain (or gets a 503 when nothing is left).
   */
  route(backends: Backend[], req: { leaseId?: string; tenantId: number; model: string; signal?: AbortLike }): LeaseRouting | Promise<LeaseRouting> {
    if (req.leaseId !== undefined) return this.routeHolder(backends, req.leaseId, req.tenantId, req.model);
    // No lease anywhere (the common case): answered at once, not as a promise.
    if (this.directory.live().length === 0) return { backends };
    return this.routeAround(backends, req);
  }

  /** A request without a lease while some workers are leased: around them, or waiting (bounded) for one to free. */
  private async routeAround(backends: Backend[], req: { model: string; signal?: AbortLike }): Promise<LeaseRouting> {
    const cfg = this.opts.config.leases;
    const r = await this.directory.skipLeased(backends, { depthPerWorker: cfg.queueDepthPerWorker, waitMs: cfg.queueWaitMs }, req.signal);
    if (r.backends.length === 0) {
      const inS = Math.max(1, Math.ceil((r.earliestFreeMs ?? 1000) / 1000));
      throw new ApiError("no_healthy_backend", `every worker serving model '${req.model}' is leased by another tenant; the first frees up in about ${inS} s`, null, {
        "retry-after": String(inS),
      });
    }
    return { backends: r.backends };
  }

  /** Audit writes still in flight (expiries seen in the background). */
  async drain(): Promise<void> {
    await Promise.all([...this.pending]);
  }

  /** The directory's refresh reported these expired. */
  sawExpired(expired: Lease[], seenAtMs: number): void {
    if (expired.length === 0) return;
    for (const l of expired) this.directory.forget(l);
    const p = this.record(expired.map((l) => event(l, "expired", seenAtMs))).catch((err: unknown) => {
      this.log.error("lease expiry audit failed", { leases: expired.map((l) => l.id), error: (err as Error).message });
    });
    this.pending.add(p);
    void p.finally(() => this.pending.delete(p));
  }

  private async routeHolder(backends: Backend[], leaseId: string, tenantId: number, model: string): Promise<LeaseRouting> {
    const lease = await this.holderLease(tenantId, leaseId);
    // A split model's pipeline is the holder's when it uses the leased worker
    // (any of its shards): the leased replica first in its stage, without
    // replicas someone else leased.
    const othersLease = (id: string) => id !== lease.workerId && this.directory.leaseOf(id) !== undefined;
    const mine = backends.filter((b) => (b.workerId === lease.workerId || b.pipelineWorkers?.includes(lease.workerId)) && b.narrow?.(othersLease, lease.workerId) !== false);
    if (mine.length === 0) {
      const w = this.workers.all().find((x) => x.id === lease.workerId);
      if (w && acceptsNewWork(w)) throw new ApiError("invalid_request", `leased worker ${lease.workerId} does not serve model '${model}'`, "model");
      throw new ApiError("no_healthy_backend", `leased worker ${lease.workerId} is not ready (${w ? w.state : "not in the registry"})`, null, {
        "retry-after": String(this.opts.config.router.retryAfterS),
      });
    }
    return { backends: mine, fencingToken: lease.fencingToken, fencingWorker: lease.workerId };
  }

  /** The tenant's live lease by id: Redis when it answers, this router's snapshot when it doesn't. */
  private async holderLease(tenantId: number, leaseId: string): Promise<Lease> {
    if (!isLeaseId(leaseId)) throw notFound(leaseId);
    let lease: Lease | undefined;
    try {
      const r = await this.store.get(leaseId);
      this.sawExpired(r.expired, r.nowMs);
      lease = r.lease;
    } catch (err) {
      lease = this.directory.get(leaseId);
      this.log.warn("lease store unreachable: using the snapshot", { lease: leaseId, found: lease !== undefined, error: (err as Error).message });
      if (!lease) throw new ApiError("lease_store_unavailable", "the lease store is unreachable; retry shortly", null, { "retry-after": String(this.opts.config.router.retryAfterS) });
    }
    if (lease) {
      if (lease.tenantId !== tenantId) throw notFound(leaseId);
      return lease;
    }
    const view = await this.ended(tenantId, leaseId);
    throw new ApiError("lease_expired", `lease ${leaseId} has ${view.status === "released" ? "been released" : "expired"}; acquire a new one`);
  }

  /** An id the store no longer knows: how the tenant's lease ended, or 404. */
  private async ended(tenantId: number, leaseId: string): Promise<LeaseView> {
    const history = await this.audit.history(leaseId);
    const first = history[0];
    if (!first || first.tenantId !== tenantId) throw notFound(leaseId);
    const released = history.find((e) => e.event === "released");
    const lastExpiry = Math.max(...history.map((e) => e.expiresAtMs));
    const lease: Lease = { id: leaseId, workerId: first.worker, tenantId, fencingToken: first.fencingToken, grantedAtMs: first.atMs, expiresAtMs: lastExpiry };
    return released ? { lease, status: "released", endedAtMs: released.atMs } : { lease, status: "expired", endedAtMs: lastExpiry };
  }

  /** Ready workers the target names; 404 when no worker (in any state) matches. */
  private readyTargets(target: LeaseTarget): WorkerRecord[] {
    if ("worker" in target) {
      const w = this.workers.all().find((x) => x.id === target.worker);
      if (!w) throw new ApiError("worker_not_found", `worker '${target.worker}' is not in the registry`, "worker");
      return acceptsNewWork(w) ? [w] : [];
    }
    const workerModel = this.opts.workerName(target.model);
    if (!workerModel || !this.workers.models().get(workerModel)?.length) {
      throw new ApiError("model_not_found", `model '${target.model}' is not served by any live worker`, "model");
    }
    return this.workers.candidates(workerModel);
  }

  /**
   * One worker: the atomic grant with an unused token (a fresh one from
   * Postgres unless `token` holds one no grant consumed); a token that lost
   * the race against a newer grant is replaced.
   */
  private async tryAcquire(workerId: string, tenantId: number, durationMs: number, token: { value?: number }): Promise<{ lease: Lease } | { freeInMs: number }> {
    for (let i = 0; i < TOKEN_TRIES; i++) {
      try {
        token.value ??= await this.audit.nextToken();
      } catch (err) {
        this.log.error("fencing token unavailable", { error: (err as Error).message });
        throw new ApiError("lease_store_unavailable", "cannot take a fencing token (Postgres unreachable); retry shortly", null, { "retry-after": String(this.opts.config.router.retryAfterS) });
      }
      const maxPerTenant = this.opts.config.leases.maxPerTenant;
      const r = await this.store.acquire({ leaseId: newLeaseId(), workerId, tenantId, durationMs, fencingToken: token.value, maxPerTenant });
      this.sawExpired(r.expired, r.nowMs);
      if (r.ok) {
        token.value = undefined;
        try {
          await this.record([event(r.lease, "granted", r.lease.grantedAtMs)]);
        } catch (err) {
          // A lease nobody audited must not be handed out.
          await this.store.release({ leaseId: r.lease.id, tenantId }).catch(() => {});
          this.log.error("lease grant audit failed: released it", { lease: r.lease.id, error: (err as Error).message });
          throw new ApiError("lease_store_unavailable", "cannot audit the lease grant (Postgres unreachable); retry shortly", null, { "retry-after": String(this.opts.config.router.retryAfterS) });
        }
        this.directory.note(r.lease);
        return { lease: r.lease };
      }
      if (r.reason === "held") return { freeInMs: r.holderExpiresAtMs - r.nowMs };
      if (r.reason === "tenant_limit") {
        throw new ApiError("lease_limit_reached", `this tenant holds ${r.held} live leases, the most leases.maxPerTenant allows (${maxPerTenant}); release one first`);
      }
      // stale_token: a newer token was granted on this worker meanwhile.
      token.value = undefined;
    }
    throw new Error(`no fresh fencing token for worker ${workerId} after ${TOKEN_TRIES} tries`);
  }

  private async record(events: LeaseAuditEvent[]): Promise<void> {
    await this.audit.record(events);
    for (const e of events) this.opts.metrics?.leaseEvents.inc({ event: e.event });
  }
}

function event(l: Lease, kind: LeaseAuditEvent["event"], atMs: number): LeaseAuditEvent {
  return { tenantId: l.tenantId, leaseId: l.id, worker: l.workerId, fencingToken: l.fencingToken, event: kind, atMs, expiresAtMs: l.expiresAtMs };
}

function notFound(leaseId: string): ApiError {
  return new ApiError("lease_not_found", `no lease ${leaseId.slice(0, 80)} for this tenant`, "id");
}

/** Lease routing for the inference routes; a router without leases refuses a lease header rather than ignoring it. */
export function routeWithLeases(
  leases: LeaseService | undefined,
  backends: Backend[],
  req: { leaseId?: string; tenantId: number; model: string; signal?: AbortLike },
): LeaseRouting | Promise<LeaseRouting> {
  if (leases) return leases.route(backends, req);
  if (req.leaseId !== undefined) throw new ApiError("lease_not_found", "this router serves no leases", "x-switchyard-lease");
  return { backends };
}
