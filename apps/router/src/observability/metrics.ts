// A small Prometheus text-format registry: counters and histograms with
// labels. Enough for /metrics without pulling a client library into the hot path.
import { EVENT_LOOP_BUCKETS, GC_BUCKETS } from "./runtime.ts";

type Labels = Record<string, string>;

const needsEscape = /[\\"\n]/;
const escapeValue = (v: string) => (needsEscape.test(v) ? v.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n") : v);

/** `a="x",b="y"`, names sorted. Called on every observation: one pass, no arrays beyond the key list, no regex replace unless a value needs escaping. */
function labelKey(labels: Labels): string {
  // Call sites mostly write their labels in name order already: then one
  // pass over them, without the key array and its sort.
  let out = "";
  let prev = "";
  let n = 0;
  for (const k in labels) {
    if (n > 0 && k < prev) return sortedLabelKey(labels);
    out += `${n ? "," : ""}${k}="${escapeValue(String(labels[k]))}"`;
    prev = k;
    n++;
  }
  return out;
}

function sortedLabelKey(labels: Labels): string {
  const keys = Object.keys(labels);
  if (keys.length === 0) return "";
  if (keys.length > 1) keys.sort();
  let out = "";
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    out += `${i ? "," : ""}${k}="${escapeValue(String(labels[k]))}"`;
  }
  return out;
}

/**
 * A metric's series, found by its label values. An observation walks one
 * Map level per label (its name, then its value), whose keys are strings
 * the call sites already hold (route patterns, kinds, status codes), and
 * reaches the series itself: no key string built and hashed per observation
 * (issue 14: every request makes half a dozen). The label key is built
 * once, when a path is first seen; every path with the same labels leads
 * to one series, whatever order a call site writes them in.
 */
class SeriesIndex<T> {
  private readonly root: LabelNode<T> = { names: new Map() };
  /** Series by label key, in the order first observed (what /metrics renders). */
  readonly byKey = new Map<string, T>();
  constructor(private readonly make: () => T) {}

  of(labels: Labels): T {
    let node = this.root;
    for (const name in labels) {
      let values = node.names.get(name);
      if (!values) node.names.set(name, (values = new Map()));
      const value = labels[name]!;
      let next = values.get(value);
      if (!next) values.set(value, (next = { names: new Map() }));
      node = next;
    }
    return (node.series ??= this.byKeyOf(labelKey(labels)));
  }

  private byKeyOf(key: string): T {
    let series = this.byKey.get(key);
    if (!series) this.byKey.set(key, (series = this.make()));
    return series;
  }
}

type LabelNode<T> = { names: Map<string, Map<string, LabelNode<T>>>; series?: T };

export class Counter {
  private readonly index = new SeriesIndex<{ v: number }>(() => ({ v: 0 }));
  private read: (() => number) | undefined;
  /**
   * How the router's processes' values add up on the aggregated /metrics:
   * each process's own events sum; a count every process reads of the same
   * host (the kernel's listen overflows) takes the max.
   */
  constructor(readonly name: string, readonly help: string, readonly merge: "sum" | "max" = "sum") {}
  inc(labels: Labels = {}, by = 1): void {
    this.index.of(labels).v += by;
  }
  get(labels: Labels = {}): number {
    return this.index.byKey.get(labelKey(labels))?.v ?? 0;
  }
  /** Every series added up. */
  total(): number {
    let n = 0;
    for (const s of this.index.byKey.values()) n += s.v;
    return n;
  }
  /** An unlabelled counter read when rendered (CPU seconds), instead of inc(). */
  source(read: () => number): void {
    this.read = read;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} counter`];
    if (this.read) lines.push(`${this.name} ${this.read()}`);
    for (const [k, s] of this.index.byKey) lines.push(`${this.name}${k ? `{${k}}` : ""} ${s.v}`);
    return lines.join("\n");
  }
}

export class Gauge {
  private readonly values = new Map<string, () => number>();
  /**
   * How the router's processes' values add up on the aggregated /metrics
   * (`router.processes` > 1): queue depths sum, what each process sees of
   * shared state (workers by state) or its worst stall takes the max.
   */
  constructor(readonly name: string, readonly help: string, readonly merge: "sum" | "max" = "sum") {}
  set(labels: Labels, read: () => number): void {
    this.values.set(labelKey(labels), read);
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} gauge`];
    for (const [k, read] of this.values) lines.push(`${this.name}${k ? `{${k}}` : ""} ${read()}`);
    return lines.join("\n");
  }
}

export class Histogram {
  private readonly index = new SeriesIndex(() => ({ counts: this.buckets.map(() => 0), sum: 0, count: 0 }));
  private read: (() => { counts: number[]; sum: number; count: number }) | undefined;
  constructor(
    readonly name: string,
    readonly help: string,
    readonly buckets: number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60],
  ) {}
  observe(labels: Labels, value: number): void {
    const s = this.index.of(labels);
    for (let i = 0; i < this.buckets.length; i++) if (value <= this.buckets[i]!) s.counts[i]!++;
    s.sum += value;
    s.count++;
  }
  count(labels: Labels = {}): number {
    return this.index.byKey.get(labelKey(labels))?.count ?? 0;
  }
  /** Shows the series at zero before its first observation (a fixed set of label values, so /metrics does not grow later). */
  touch(labels: Labels): void {
    this.index.of(labels);
  }
  /** An unlabelled histogram whose cumulative counts are read when rendered (the event loop's), instead of observe(). */
  source(read: () => { counts: number[]; sum: number; count: number }): void {
    this.read = read;
  }
  render(): string {
    const lines = [`# HELP ${this.name} ${this.help}`, `# TYPE ${this.name} histogram`];
    const series: Iterable<[string, { counts: number[]; sum: number; count: number }]> = this.read ? [["", this.read()], ...this.index.byKey] : this.index.byKey;
    for (const [k, s] of series) {
      const sep = k ? "," : "";
      this.buckets.forEach((b, i) => lines.push(`${this.name}_bucket{${k}${sep}le="${b}"} ${s.counts[i]}`));
      lines.push(`${this.name}_bucket{${k}${sep}le="+Inf"} ${s.count}`);
      lines.push(`${this.name}_sum${k ? `{${k}}` : ""} ${s.sum}`);
      lines.push(`${this.name}_count${k ? `{${k}}` : ""} ${s.count}`);
    }
    return lines.join("\n");
  }
}

/** A worker call's wait before its write: tens of µs when the loop is quiet, milliseconds behind a busy loop turn. */
export const UPSTREAM_HELD_BUCKETS = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1];

export class RouterMetrics {
  readonly requests = new Counter("switchyard_requests_total", "Requests answered, by route and status.");
  readonly duration = new Histogram("switchyard_request_duration_seconds", "Request duration from arrival to last byte.");
  readonly ttft = new Histogram("switchyard_time_to_first_token_seconds", "Arrival to first streamed token.");
  readonly tokens = new Counter("switchyard_tokens_total", "Tokens reported by backends, by kind (prompt|completion).");
  readonly errors = new Counter("switchyard_errors_total", "Errors answered, by error code.");
  readonly upstreamAttempts = new Counter("switchyard_upstream_attempts_total", "Backend attempts, by backend and outcome.");
  readonly budgetHolds = new Counter("switchyard_budget_holds_total", "Budget holds asked for paid backends, by outcome (held|refused|unpriced|unlimited|unchecked: the day could not be checked against the ledger|unavailable: the budget could not be read).");
  readonly budgetAlerts = new Counter("switchyard_budget_alerts_total", "Budget thresholds crossed (once per tenant, day and threshold), by threshold.");
  readonly ledgerRows = new Counter("switchyard_ledger_rows_total", "Ledger rows by outcome: drained into Postgres (committed|duplicate|dropped: a row Postgres could not read, logged); appended again after Redis lost them (replayed); let go unkept past the most a router keeps against such a loss (unkept); a paid attempt's row written by its router with its intent lost (intent_lost).");
  readonly ledgerLag = new Histogram("switchyard_ledger_lag_seconds", "Request end (its row appended to the ledger stream) to its ledger row committed in Postgres.", [0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300]);
  readonly billingFailures = new Counter("switchyard_billing_failures_total", "Settle steps that failed (and were left to the hold's expiry and reconcile), by step.");
  readonly leaseEvents = new Counter("switchyard_lease_events_total", "Lease changes audited by this router, by event (granted|extended|released|expired).");
  readonly leaseRestores = new Counter("switchyard_lease_restores_total", "Leases this router put back from the audit into a lease store that had lost its data (restored), and those found ended by then (ended, audited as expired).");
  readonly workers = new Gauge("switchyard_workers", "Workers in the registry, by state.", "max");
  readonly registryRefusals = new Counter("switchyard_registry_refusals_total", "Worker records (or advertised models) routers refused, once per worker and reason while it lasts (id_mismatch|too_large|invalid_record|invalid_key|no_ttl|unsafe_url|not_invited|model_not_allowed).");
  readonly inviteRepairs = new Counter(
    "switchyard_worker_invite_repairs_total",
    "What this router put back in Redis from the invites Postgres records (Redis drops ACL users at every restart), or took away after a revoke, by repair (user_restored: an ACL user, per node | invite_restored | user_removed | invite_removed | adopted: a Redis-only invite recorded in Postgres).",
  );
  readonly registryLosses = new Counter("switchyard_registry_losses_total", "Times the worker registry lost its records (Redis back empty: the registry's epoch changed); routers kept the workers known before until they heartbeat again.");
  readonly budgetDayChecks = new Counter(
    "switchyard_budget_day_checks_total",
    "Tenant-days a hold found never checked against the ledger (a new day, or counters the store lost: Redis back empty, a key evicted or deleted, a restarted in-process store), by outcome (rebuilt: this router rebuilt it from the ledger | already: checked by then | failed: the ledger could not be read, paid backends skipped).",
  );
  readonly budgetRebuilds = new Counter("switchyard_budget_rebuilds_total", "Tenant-days whose budget counters a router rebuilt from the ledger by itself after Redis lost its data, by outcome (rebuilt|failed; a pass that failed as a whole counts once).");
  readonly ejections = new Counter("switchyard_worker_ejections_total", "Workers ejected from rotation after consecutive failures, by reason (failing|unreachable).");
  readonly ejectedWorkers = new Gauge("switchyard_workers_ejected", "Workers this router holds out of rotation now.", "max");
  readonly routeExplorations = new Counter("switchyard_route_explorations_total", "Requests sent to a candidate other than the best-scored one, to keep learning.");
  readonly upstreamHeld = new Histogram(
    "switchyard_upstream_send_wait_seconds",
    "Worker calls answered as a stream or as JSON (not the hidden-states route's raw bytes), from the call to its headers being written: the HTTP client's pick of a connection, a new connection's connect, and a reused idle connection's check for unasked bytes (written after the event loop's check phase).",
    UPSTREAM_HELD_BUCKETS,
  );
  readonly streamResumes = new Counter("switchyard_stream_resumes_total", "Streams broken mid-way and continued on another worker, by outcome (resumed|failed).");

  readonly admissionQueueDepth = new Gauge("switchyard_admission_queue_depth", "Requests waiting for admission, by worker pool and priority band.");
  readonly admissionWait = new Histogram("switchyard_admission_wait_seconds", "Arrival at the admission gate to admission, by band (admitted requests).", [0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300]);
  readonly admissionAdmitted = new Counter("switchyard_admission_admitted_total", "Requests admitted onto a worker pool, by band and whether they queued first.");
  readonly admissionRejections = new Counter("switchyard_admission_rejections_total", "Requests refused by admission, by band and reason (queue_full|tenant_queue_full|timeout|cancelled|priority_not_allowed|invalid_priority).");
  readonly poolSaturation = new Gauge("switchyard_pool_saturation", "Worker pool saturation as admission sees it (worse of slot occupancy and queue depth, over capacity), by pool.", "max");

  // The process itself (observability/runtime.ts): stalls and CPU.
  readonly eventLoopDelay = new Histogram("switchyard_event_loop_delay_seconds", "Event-loop delay since start: how late each tick of a 10 ms timer ran (perf_hooks.monitorEventLoopDelay).", EVENT_LOOP_BUCKETS);
  readonly eventLoopDelayP99 = new Gauge("switchyard_event_loop_delay_p99_seconds", "Event-loop delay, 99th percentile since start.", "max");
  readonly eventLoopDelayMax = new Gauge("switchyard_event_loop_delay_max_seconds", "Longest event-loop delay since start.", "max");
  readonly gcPauses = new Counter("switchyard_gc_pauses_total", "Garbage-collection pauses, by kind (minor|major|incremental|weakcb|other).");
  readonly gcPause = new Histogram("switchyard_gc_pause_seconds", "Garbage-collection pause durations, by kind (minor|major|incremental|weakcb|other).", GC_BUCKETS);
  readonly cpuSeconds = new Counter("process_cpu_seconds_total", "User and system CPU time the router process used.");
  readonly cpuPerRequest = new Gauge("switchyard_cpu_seconds_per_request", "Router CPU seconds (user + system) per request answered, since start.", "max");
  readonly listenOverflows = new Counter(
    "switchyard_listen_overflows_total",
    "Connections the kernel dropped since the router started because a listener's accept queue was full (router.listenBacklog, capped by net.core.somaxconn): each client waits 1 s or more for a retransmit before the router sees it. Counted for the router's network namespace (in a pod, the pod's listeners), from /proc/net/netstat.",
    "max",
  );
  readonly cpuWait = new Counter("switchyard_event_loop_cpu_wait_seconds_total", "Seconds the event loop's thread was ready to run and waited for a CPU (Linux schedstat run delay): loop delay the host adds, not the router's work.");

  /** Every metric, in the order /metrics renders them. */
  all(): Array<Counter | Gauge | Histogram> {
    return [this.requests, this.duration, this.ttft, this.tokens, this.errors, this.upstreamAttempts, this.workers, this.registryRefusals, this.registryLosses, this.inviteRepairs, this.leaseEvents, this.leaseRestores, this.budgetHolds, this.budgetAlerts, this.budgetDayChecks, this.budgetRebuilds, this.ledgerRows, this.ledgerLag, this.billingFailures, this.ejections, this.ejectedWorkers, this.routeExplorations, this.upstreamHeld, this.streamResumes, this.admissionQueueDepth, this.admissionWait, this.admissionAdmitted, this.admissionRejections, this.poolSaturation, this.eventLoopDelay, this.eventLoopDelayP99, this.eventLoopDelayMax, this.gcPauses, this.gcPause, this.cpuSeconds, this.cpuPerRequest, this.cpuWait, this.listenOverflows];
  }

  render(): string {
    return this.all().map((m) => m.render()).join("\n") + "\n";
  }
}
