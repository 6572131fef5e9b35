// The admission gate, between authentication and routing. A request gets its
// priority band (bands.ts) and the worker pool its chain would send it to
// first (the workers serving its model); it is admitted while the pool's
// saturation (pool.ts) is below the band's ceiling. Over it, it waits in a
// bounded per-pool, per-band queue — higher bands first (fair-queue.ts).
// Inside a band, tenants get weighted fair shares of the pool's slots: when
// a slot frees, it goes to the waiting tenant holding the fewest slots per
// unit of weight (`admission.tenants.<t>.weight`), so a tenant over its share
// is served after everyone below theirs; and a request that arrives while
// anyone of its band waits queues behind them, so nobody over its share takes
// a free slot ahead of a waiting tenant. Nobody waiting: one tenant may use
// the whole pool (work-conserving). A tenant with
// `admission.maxQueuedPerTenant` requests waiting on a pool gets 429 for the
// next (its flood never fills the band's shared bound); full band queue →
// 503 with Retry-After; waited past the band's TTL → 504 with Retry-After;
// client gone → out of the queue at once. An admitted request holds its place
// in the pool's load until it ends (stream end, settle, or the response closing).
//
// All of this is per router process: slots held and waiting requests are
// what this router admitted (pool saturation alone includes the others, from
// heartbeats). With N routers, each one's fair share is of the whole pool's
// room as it sees it, so a tenant spread over N routers can hold up to about
// N shares while it competes on each; the per-tenant queue bound is per
// router too (docs/ROUTING.md, Admission).
//
// Paid backends are not worker capacity: a request whose chain reaches a
// paid backend before a worker of the pool, or whose pool has no worker
// accepting work, is not gated; a
// request that falls through to a paid backend gives its pool place back at
// that attempt; and no wait outlasts the band's TTL. Congestion never moves a
// request to a paid API by itself — a tenant that prefers paying to waiting
// puts the paid step first in its chain.
import { onAbort, type AbortLike } from "../abort.ts";
import type { ServerResponse } from "node:http";
import type { Backend } from "../backends/types.ts";
import { priorityBands, type PriorityBand } from "../config.ts";
import { ApiError } from "../errors.ts";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import type { BackendChain } from "../routing/chain.ts";
import type { WorkerDirectory } from "../routing/directory.ts";
import { bandRank, chooseBand, tenantWeight, type AdmissionConfig } from "./bands.ts";
import { FairQueue } from "./fair-queue.ts";
import { PoolLoad } from "./pool.ts";
import { onResponseClose } from "../response-close.ts";

export interface AdmitRequest {
  /** The model the client asked for. */
  model: string;
  tenantName: string;
  /** `x-switchyard-priority` as sent. */
  priority?: string;
  /** The request carries a lease: it runs on its leased worker, so it is counted in the pool's load but never queued. */
  leased?: boolean;
  /** Aborts when the client goes away: a waiting request leaves the queue. */
  signal: AbortLike;
  /** The Node response: an admitted request's place is given back when it closes, whatever else happened. */
  outgoing?: ServerResponse;
}

/** An admitted request's place on its worker pool. */
export interface PoolPlace {
  readonly band: PriorityBand;
  /** The worker pool (its model name) it counts against; undefined when not gated. */
  readonly pool: string | undefined;
  readonly waitedMs: number;
  /** Before each dispatch attempt: a paid backend does not run on the pool, so the place is given back. */
  attempt(backend: Backend): void;
  /** The request ended (idempotent). */
  release(): void;
}

export interface AdmissionGateDeps {
  config: AdmissionConfig;
  /** The longest a request may live (deadlines.totalMs): a place is never held much longer. */
  maxHoldMs: number;
  /** Grace over maxHoldMs before a place nobody gave back is reclaimed (default 10 s). */
  holdGraceMs?: number;
  directory: WorkerDirectory;
  /** Which worker pool a request reaches first (a lookup: resolving would move the scorer's round-robin). */
  chain: Pick<BackendChain, "workerPool">;
  metrics: RouterMetrics;
  log: Logger;
}

type Outcome = { ok: true; place: PoolPlace } | { ok: false; reason: "timeout" | "cancelled" };

interface Waiter {
  readonly tenant: string;
  readonly band: PriorityBand;
  readonly req: AdmitRequest;
  readonly arrivedAt: number;
  done(outcome: Outcome): void;
}

class Pool {
  readonly load: PoolLoad;
  readonly queues: Record<PriorityBand, FairQueue<Waiter>>;
  /** tenant → places it holds on the pool (this router's admissions that have not ended). */
  private readonly held = new Map<string, number>();
  constructor(readonly name: string) {
    this.load = new PoolLoad(name);
    this.queues = { interactive: new FairQueue(), standard: new FairQueue(), batch: new FairQueue() };
  }
  heldBy(tenant: string): number {
    return this.held.get(tenant) ?? 0;
  }
  hold(tenant: string): void {
    this.held.set(tenant, this.heldBy(tenant) + 1);
  }
  unhold(tenant: string): void {
    const left = this.heldBy(tenant) - 1;
    if (left > 0) this.held.set(tenant, left);
    else this.held.delete(tenant);
  }
  /** This tenant's requests waiting on the pool, all bands together. */
  waitingOf(tenant: string): number {
    return priorityBands.reduce((n, b) => n + this.queues[b].countOf(tenant), 0);
  }
  /** Tenants holding or waiting for the pool's slots: the ones its fair shares divide it among. */
  activeTenants(): Set<string> {
    const active = new Set(this.held.keys());
    for (const b of priorityBands) for (const t of this.queues[b].tenants().keys()) active.add(t);
    return active;
  }
  /** The highest band with someone waiting. */
  headBand(): PriorityBand | undefined {
    return priorityBands.find((b) => this.queues[b].size > 0);
  }
  waiting(): number {
    return priorityBands.reduce((n, b) => n + this.queues[b].size, 0);
  }
}

const ungated = (band: PriorityBand): PoolPlace => ({ band, pool: undefined, waitedMs: 0, attempt: () => {}, release: () => {} });

/** Grace over maxHoldMs before a place nobody gave back is reclaimed. */
const HOLD_GRACE_MS = 10_000;

/** How often held places are checked against their deadline (a forgotten one is reclaimed at most this late). */
const SWEEP_MS = 1_000;

export class AdmissionGate {
  private readonly pools = new Map<string, Pool>();
  /** Places not given back yet, in grant order (so in reclaim-deadline order): one sweep for all, not a timer per request. */
  private readonly held = new PlaceList();
  private sweeper: NodeJS.Timeout | undefined;

  constructor(private readonly deps: AdmissionGateDeps) {
    deps.directory.onChange(() => {
      for (const pool of this.pools.values()) {
        pool.load.observe(deps.directory.models().get(pool.name) ?? []);
        this.drain(pool);
      }
    });
  }

  /**
   * Waits for this request's turn; throws the ApiError to answer with when it
   * gets none. A request admitted at once gets its place as it is, not as a
   * promise (every request passes here; only a queued one waits).
   */
  admit(req: AdmitRequest): PoolPlace | Promise<PoolPlace> {
    const cfg = this.deps.config;
    const { metrics } = this.deps;
    if (!cfg.enabled) return ungated(cfg.defaultBand);
    const choice = chooseBand(cfg, req.tenantName, req.priority);
    if (!choice.ok) {
      if (choice.reason === "invalid_priority") {
        metrics.admissionRejections.inc({ band: "none", reason: "invalid_priority" });
        throw new ApiError("invalid_request", `x-switchyard-priority must be one of ${priorityBands.join(", ")} (got '${choice.asked}')`, "x-switchyard-priority");
      }
      metrics.admissionRejections.inc({ band: choice.asked, reason: "priority_not_allowed" });
      throw new ApiError(
        "priority_not_allowed",
        `tenant '${req.tenantName}' may ask for priority up to '${choice.maxBand}'; '${choice.asked}' is above it`,
        "x-switchyard-priority",
      );
    }
    const band = choice.band;
    if (req.signal.aborted) throw this.cancelled(band);
    // The chain walks it: the worker pool this request reaches first, if any.
    const poolName = this.deps.chain.workerPool(req.model, req.tenantName);
    if (poolName === undefined) return ungated(band);
    const pool = this.pool(poolName);
    if (pool.load.capacity <= 0) return ungated(band);
    const arrivedAt = performance.now();
    if (req.leased || this.mayEnterNow(pool, band)) return this.grant(pool, band, req, arrivedAt, false);

    const limits = cfg.bands[band];
    // The tenant's own bound first: its flood is its own excess (429), and it
    // never fills the band's shared bound for everyone else.
    if (pool.waitingOf(req.tenantName) >= cfg.maxQueuedPerTenant) {
      metrics.admissionRejections.inc({ band, reason: "tenant_queue_full" });
      throw new ApiError(
        "tenant_queue_full",
        `tenant '${req.tenantName}' already has ${cfg.maxQueuedPerTenant} requests waiting for ${pool.name} (admission.maxQueuedPerTenant); retry later`,
        null,
        { "retry-after": String(limits.retryAfterS) },
      );
    }
    if (pool.queues[band].size >= limits.maxQueue) {
      metrics.admissionRejections.inc({ band, reason: "queue_full" });
      throw new ApiError("queue_full", `the ${band} queue for ${pool.name} is full (${limits.maxQueue} waiting); retry later`, null, {
        "retry-after": String(limits.retryAfterS),
      });
    }
    return this.wait(pool, band, req, arrivedAt);
  }

  /** In the band's queue until a place frees, the band's TTL passes or the client goes away. */
  private async wait(pool: Pool, band: PriorityBand, req: AdmitRequest, arrivedAt: number): Promise<PoolPlace> {
    const limits = this.deps.config.bands[band];
    const { metrics } = this.deps;
    const outcome = await new Promise<Outcome>((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter: Waiter = {
        tenant: req.tenantName,
        band,
        req,
        arrivedAt,
        done: (o) => {
          clearTimeout(timer);
          offAbort?.();
          resolve(o);
        },
      };
      const leave = (reason: "timeout" | "cancelled") => {
        if (!pool.queues[band].remove(waiter)) return;
        waiter.done({ ok: false, reason });
        // A band that left may have been holding lower bands back.
        this.drain(pool);
      };
      let offAbort: (() => void) | undefined;
      timer = setTimeout(() => leave("timeout"), limits.ttlMs);
      offAbort = onAbort(req.signal, () => leave("cancelled"));
      pool.queues[band].push(waiter);
      this.drain(pool);
    });
    if (outcome.ok) return outcome.place;
    if (outcome.reason === "cancelled") throw this.cancelled(band);
    metrics.admissionRejections.inc({ band, reason: "timeout" });
    throw new ApiError("queue_timeout", `waited ${limits.ttlMs} ms in the ${band} queue for ${pool.name} without room; retry later`, null, {
      "retry-after": String(limits.retryAfterS),
    });
  }

  /** Gives back the places held past their request's longest life (a path that never reported its end). */
  private reclaim(log: Logger): void {
    const now = performance.now();
    // In grant order, so in deadline order: stop at the first one still in time.
    for (let place = this.held.first; place && place.until <= now; place = this.held.first) {
      log.warn("admission place reclaimed: the request never reported its end", { pool: place.pool, band: place.band });
      place.release();
    }
  }

  /** A pool's state, for tests and debugging: per tenant, places held, requests waiting and its fair share of the slots. */
  inspect(model: string):
    | {
        saturation: number;
        capacity: number;
        outstanding: number;
        waiting: Record<PriorityBand, number>;
        tenants: Map<string, { held: number; waiting: number; share: number }>;
      }
    | undefined {
    const pool = this.pools.get(model);
    if (!pool) return undefined;
    const active = [...pool.activeTenants()];
    const totalWeight = active.reduce((sum, t) => sum + this.weight(t), 0);
    return {
      saturation: pool.load.saturation(),
      capacity: pool.load.capacity,
      outstanding: pool.load.outstanding,
      waiting: { interactive: pool.queues.interactive.size, standard: pool.queues.standard.size, batch: pool.queues.batch.size },
      tenants: new Map(active.map((t) => [t, { held: pool.heldBy(t), waiting: pool.waitingOf(t), share: (pool.load.capacity * this.weight(t)) / totalWeight }])),
    };
  }

  private weight(tenant: string): number {
    return tenantWeight(this.deps.config, tenant);
  }

  private cancelled(band: PriorityBand): ApiError {
    this.deps.metrics.admissionRejections.inc({ band, reason: "cancelled" });
    return new ApiError("request_cancelled", "the client went away while the request waited for admission");
  }

  private pool(name: string): Pool {
    let pool = this.pools.get(name);
    if (!pool) {
      pool = new Pool(name);
      pool.load.observe(this.deps.directory.models().get(name) ?? []);
      this.pools.set(name, pool);
      const p = pool;
      const m = this.deps.metrics;
      m.poolSaturation.set({ pool: name }, () => Math.round(p.load.saturation() * 1000) / 1000);
      for (const band of priorityBands) m.admissionQueueDepth.set({ pool: name, band }, () => p.queues[band].size);
    }
    return pool;
  }

  /** Nobody of this band or a higher one is waiting, and the pool is below the band's ceiling. */
  private mayEnterNow(pool: Pool, band: PriorityBand): boolean {
    const head = pool.headBand();
    if (head !== undefined && bandRank(head) <= bandRank(band)) return false;
    return pool.load.saturation() < this.deps.config.bands[band].ceiling;
  }

  /**
   * Admits waiters while the head band is below its ceiling. Strict
   * priority: when the highest waiting band must wait, lower bands (whose
   * ceilings are no higher) wait too. Inside the band, the place goes to the
   * tenant furthest below its fair share (fewest places held per unit of
   * weight; equals take turns). A pool that lost all its workers lets
   * everyone through to the chain, which falls through or answers 503.
   */
  private drain(pool: Pool): void {
    const byShare = (tenant: string) => pool.heldBy(tenant) / this.weight(tenant);
    for (;;) {
      const band = pool.headBand();
      if (band === undefined) return;
      if (pool.load.capacity > 0 && pool.load.saturation() >= this.deps.config.bands[band].ceiling) return;
      const w = pool.queues[band].shiftFairest(byShare)!;
      w.done({ ok: true, place: this.grant(pool, band, w.req, w.arrivedAt, true) });
    }
  }

  private grant(pool: Pool, band: PriorityBand, req: AdmitRequest, arrivedAt: number, queued: boolean): PoolPlace {
    const { metrics, log } = this.deps;
    const now = performance.now();
    const waitedMs = now - arrivedAt;
    pool.load.admitted();
    pool.hold(req.tenantName);
    metrics.admissionWait.observe({ band }, waitedMs / 1000);
    metrics.admissionAdmitted.inc({ band, queued: String(queued) });
    // Every path that ends a request releases (settle, the response closing);
    // the sweep only guards the pool against a path that forgot.
    const place = new HeldPlace(this, pool, band, req.tenantName, waitedMs, now + this.deps.maxHoldMs + (this.deps.holdGraceMs ?? HOLD_GRACE_MS));
    this.held.push(place);
    this.sweeper ??= setInterval(() => this.reclaim(log), SWEEP_MS).unref();
    if (req.outgoing) {
      (req.outgoing as PlaceHolder)[PLACE] = place;
      onResponseClose(req.outgoing, releasePlaceOf);
    }
    return place;
  }

  /** A place's request ended (HeldPlace.release calls it, once): the pool gets its slot back, and the next waiter its turn. */
  released(place: HeldPlace): void {
    this.held.remove(place);
    place.on.load.finished();
    place.on.unhold(place.tenantName);
    this.drain(place.on);
  }
}

/**
 * A place held on a pool, given back once: by the request's settle, by its
 * response closing, or by the sweep. Its own links in the gate's list of
 * held places, not a closure per place as the key of a Map: that Map's
 * insert alone measured 4 % of a whole answer's CPU (switched off in a
 * scratch build, --against, 6 of 6 rounds; issue 14).
 */
class HeldPlace implements PoolPlace {
  prev: HeldPlace | undefined;
  next: HeldPlace | undefined;
  private done = false;

  constructor(
    private readonly gate: AdmissionGate,
    /** The pool it is held on. */
    readonly on: Pool,
    readonly band: PriorityBand,
    readonly tenantName: string,
    readonly waitedMs: number,
    /** Reclaimed by the sweep after this (performance.now() ms). */
    readonly until: number,
  ) {}

  get pool(): string {
    return this.on.name;
  }

  attempt(backend: Backend): void {
    if (backend.paid) this.release();
  }

  release(): void {
    if (this.done) return;
    this.done = true;
    this.gate.released(this);
  }
}

/** Held places, oldest first: added at the end, removed from anywhere, both at once. */
class PlaceList {
  first: HeldPlace | undefined;
  private last: HeldPlace | undefined;

  push(p: HeldPlace): void {
    p.prev = this.last;
    if (this.last) this.last.next = p;
    else this.first = p;
    this.last = p;
  }

  remove(p: HeldPlace): void {
    if (p.prev) p.prev.next = p.next;
    else if (this.first === p) this.first = p.next;
    else return; // not in the list
    if (p.next) p.next.prev = p.prev;
    else this.last = p.prev;
    p.prev = p.next = undefined;
  }
}

/** Where a response keeps the admission place of its request (one per request). */
const PLACE = Symbol("switchyard.admissionPlace");
type PlaceHolder = ServerResponse & { [PLACE]?: HeldPlace };

/** The response closed: its request's place goes back (idempotent). */
function releasePlaceOf(res: PlaceHolder): void {
  res[PLACE]?.release();
}

