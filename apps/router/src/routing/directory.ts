// The router's view of the worker registry: a snapshot refreshed every
// pollMs from the RegistryStore, so the request path never waits on Redis.
// A worker whose heartbeat expired disappears at the next refresh. Records
// are untrusted: the store refuses those not written under their own id (or
// too large to read); here unsafe URLs, uninvited workers and models a
// worker may not serve are refused too — each logged once, not every poll.
// A registry that lost its records (Redis back empty: the listing's epoch
// changed) is not taken for every worker leaving: the workers known before
// stay routable until they heartbeat again or their TTL has passed. The same
// after the registry was unreachable (a failover, a partition): heartbeats
// could not land either, so a record that expired meanwhile says nothing of
// its worker.
import { acceptsNewWork, DEFAULT_WORKER_TTL_MS, type RegistryListing, type RegistryStore, type WorkerRecord } from "@switchyard/state";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import { placePipelines, type PipelinePlan } from "../pipelines/placement.ts";
import { Poller } from "./poller.ts";
import { defaultRequestClass, type RequestClass } from "./request-class.ts";
import { defaultScorerConfig, RouteScorer, type Ranked } from "./scorer.ts";
import { hostOf, type WorkerUrlPolicy } from "./worker-url.ts";

/** What a record must pass, beyond the store's checks, to become routable. */
export interface DirectoryPolicy {
  /** Worker URLs (SSRF): scheme, refused and allowed networks, resolved addresses. */
  urls?: WorkerUrlPolicy;
  /** Invite mode: only models on a worker's invite count, and a worker without one is not routable. */
  requireInvites?: boolean;
  /** Whether workers may be routed for an advertised model name at all (aliases, paid-name conventions). */
  mayServe?: (model: string) => boolean;
  metrics?: RouterMetrics;
}

/** How long a worker is kept after the registry lost its records when its record names no TTL (the agent's default TTL). */
export const LOST_REGISTRY_KEEP_MS = DEFAULT_WORKER_TTL_MS;

export class WorkerDirectory {
  private snapshot: WorkerRecord[] = [];
  /** The registry's epoch at the last refresh (undefined before the first). */
  private epoch: string | undefined;
  /** A refresh failed since the last one that read the registry. */
  private unreached = false;
  /**
   * Workers the registry lost: their last records, kept until their worker
   * heartbeats again or `until` (the loss + its TTL). Without them, a Redis
   * restarted empty would answer every request model_not_found until each
   * worker's next beat, though no worker stopped.
   */
  private readonly kept = new Map<string, { record: WorkerRecord; until: number }>();
  /** model → workers serving it, derived once per refresh (read on every request). */
  private byModel = new Map<string, WorkerRecord[]>();
  /** Split models: the pipelines placed at the last refresh, and the plan behind each pipeline's record in byModel. */
  private plans = new Map<string, PipelinePlan[]>();
  private planOf = new WeakMap<WorkerRecord, PipelinePlan>();
  private readonly poller: Poller;
  private readonly listeners = new Set<(workers: WorkerRecord[]) => void>();
  private readonly lossListeners = new Set<() => void>();

  constructor(
    private readonly store: RegistryStore,
    private readonly pollMs: number,
    private readonly log: Logger,
    /** Orders candidates (and, through its health tracker, ejects failing workers). */
    readonly scorer: RouteScorer = new RouteScorer(defaultScorerConfig()),
    private readonly policy: DirectoryPolicy = {},
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

  /** Called when the registry is found to have lost its records (its epoch changed): Redis came back empty, and whatever else it held is gone too. */
  onLoss(fn: () => void): void {
    this.lossListeners.add(fn);
  }

  refresh(): Promise<void> {
    return this.poller.refresh();
  }

  /** Refusals seen at the last refresh (worker id + reason): each is logged when it first appears. */
  private refusals = new Set<string>();

  private async load(): Promise<void> {
    let listing: RegistryListing;
    try {
      listing = await this.store.listing();
    } catch (err) {
      this.unreached = true;
      throw err;
    }
    const listed = await this.vet(listing);
    // Workers the registry holds a record of, routable or refused (none of them is kept from before): built only when something is kept or may be.
    let ids: Set<string> | undefined;
    const present = () => (ids ??= new Set([...listing.workers.map((w) => w.id), ...listing.rejected.map((r) => r.workerId)]));
    if (this.epoch !== undefined && listing.epoch !== this.epoch) this.lost(present(), listed.length);
    else if (this.unreached) this.reached(present(), listed.length);
    this.unreached = false;
    this.epoch = listing.epoch;
    this.snapshot = this.kept.size > 0 ? this.withKept(listed, present()) : listed;
    // A kept worker's host stays approved for its connections.
    const hosts = new Set(listing.workers.map((w) => hostOf(w.url) ?? ""));
    for (const { record } of this.kept.values()) hosts.add(hostOf(record.url) ?? "");
    this.policy.urls?.retainHosts(hosts);
    const byModel = new Map<string, WorkerRecord[]>();
    // Appended in place: copying each model's list per worker made a refresh quadratic in the workers.
    const add = (m: string, w: WorkerRecord) => {
      const list = byModel.get(m);
      if (list) list.push(w);
      else byModel.set(m, [w]);
    };
    for (const w of this.snapshot) for (const m of w.models) add(m, w);
    // A split model is served wherever a complete pipeline of its shards is:
    // each pipeline joins the model's workers as one record (its head's).
    const order = (replicas: readonly WorkerRecord[]) => this.scorer.rankWorkers(replicas, defaultRequestClass, "", false).map((r) => r.item);
    this.plans = placePipelines(this.snapshot, order);
    const planOf = new WeakMap<WorkerRecord, PipelinePlan>();
    for (const [model, plans] of this.plans) {
      for (const p of plans) {
        planOf.set(p.record, p);
        add(model, p.record);
      }
    }
    this.planOf = planOf;
    this.byModel = byModel;
    for (const fn of this.listeners) fn(this.snapshot);
  }

  /** The routable part of a listing: workers whose records, URLs and invites pass, with only the models they may serve. */
  private async vet(listing: RegistryListing): Promise<WorkerRecord[]> {
    const seen = new Set<string>();
    const refuse = (workerId: string, reason: string, detail: string) => {
      const key = `${workerId}\u0000${reason}`;
      seen.add(key);
      if (this.refusals.has(key)) return;
      this.log.warn("worker record refused", { worker: workerId, reason, detail });
      this.policy.metrics?.registryRefusals.inc({ reason });
    };
    for (const r of listing.rejected) refuse(r.workerId, r.reason, r.detail);
    const { urls, requireInvites, mayServe } = this.policy;
    const verdicts = urls ? await Promise.all(listing.workers.map((w) => urls.check(w.url))) : [];
    const out: WorkerRecord[] = [];
    listing.workers.forEach((w, i) => {
      const verdict = verdicts[i];
      if (verdict?.ok === "pending") return; // its host is still resolving: not routable yet
      if (verdict && !verdict.ok) return refuse(w.id, "unsafe_url", `${w.url.slice(0, 200)}: ${verdict.reason}`);
      const invite = listing.invites.get(w.id);
      if (requireInvites && !invite) return refuse(w.id, "not_invited", "no invite for this worker (switchyard workers invite)");
      const allowed = invite && requireInvites ? new Set(invite.models) : undefined;
      const models = w.models.filter((m) => (!allowed || allowed.has(m)) && (!mayServe || mayServe(m)));
      if (models.length < w.models.length) {
        const kept = new Set(models);
        const dropped = w.models.filter((m) => !kept.has(m));
        refuse(w.id, "model_not_allowed", `advertised ${dropped.slice(0, 8).map((m) => JSON.stringify(m.slice(0, 80))).join(", ")}${dropped.length > 8 ? ", …" : ""}: not on its invite, or the name of a paid backend`);
      }
      // The same bound on the blocks it offers to pipelines of split models.
      const layerRanges = w.layerRanges.filter((r) => (!allowed || allowed.has(r.model)) && (!mayServe || mayServe(r.model)));
      out.push(models.length === w.models.length && layerRanges.length === w.layerRanges.length ? w : { ...w, models, layerRanges });
    });
    this.refusals = seen;
    return out;
  }

  /** The registry lost its records: keep the workers routed to before that are not listed now. */
  private lost(present: Set<string>, listed: number): void {
    this.keepAbsent(present);
    this.policy.metrics?.registryLosses.inc();
    this.log.warn("worker registry lost its records (Redis back empty?): routing to the workers known before until they heartbeat again", {
      kept: this.kept.size,
      listed,
    });
    for (const fn of this.lossListeners) fn();
  }

  /** The registry answers again after failed refreshes: workers whose records expired meanwhile are kept too. */
  private reached(present: Set<string>, listed: number): void {
    const before = this.kept.size;
    this.keepAbsent(present);
    if (this.kept.size > before) {
      this.log.warn("worker registry reachable again; workers whose heartbeats expired while it was not are kept until they heartbeat again", { kept: this.kept.size, listed });
    }
  }

  private keepAbsent(present: Set<string>): void {
    const now = Date.now();
    for (const w of this.snapshot) {
      if (present.has(w.id) || this.kept.has(w.id)) continue;
      this.kept.set(w.id, { record: w, until: now + (w.ttlMs ?? LOST_REGISTRY_KEEP_MS) });
    }
  }

  /** The listed workers and, after them, the kept ones (a kept worker leaves once the registry has a record of it again, or past its time). */
  private withKept(listed: WorkerRecord[], present: Set<string>): WorkerRecord[] {
    const now = Date.now();
    const out = [...listed];
    for (const [id, k] of this.kept) {
      if (present.has(id) || now >= k.until) this.kept.delete(id);
      else out.push(k.record);
    }
    return out;
  }

  all(): WorkerRecord[] {
    return this.snapshot;
  }

  /**
   * Whether the registry still lists this worker (or keeps it while the
   * registry is unreachable): a worker that stopped heartbeating (a cut
   * cable, a dead host) is gone from it within its TTL and a poll. Asked
   * rarely (a whole answer's headers deadline passing), so a scan.
   */
  listed(workerId: string): boolean {
    return this.snapshot.some((w) => w.id === workerId);
  }

  /** The pipeline behind a record of models() / rank(), when it is one (a split model). */
  pipelineOf(w: WorkerRecord): PipelinePlan | undefined {
    return this.planOf.get(w);
  }

  /** The pipelines a split model has now (placed at the last refresh). */
  pipelines(model: string): readonly PipelinePlan[] {
    return this.plans.get(model) ?? [];
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
