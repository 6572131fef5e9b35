// Money on the request path. For each request the router opens a tab:
//   admit(backend)  before each attempt — a paid backend is held against the
//                   tenant's day for the worst case (prompt upper bound ×
//                   input price + max output × output price), or skipped;
//   release(backend) when that attempt failed before its first byte (no
//                   provider charges for a refused call) — unless the
//                   provider had accepted it (2xx headers): then it bills the
//                   prompt it processed, and the request owes an estimate of
//                   that, booked on a row of its own under that backend
//                   (abandoned attempts, below);
//   settle(outcome) once, when the request ended — the ledger row first
//                   (durable, idempotent), then the hold turns into spend
//                   (idempotent), then alert thresholds.
// Self-hosted workers are never held or charged, but get their ledger row.
// Anything that fails after the answer left is logged and counted: the hold
// expires by itself and `switchyard budgets reconcile` rebuilds the counters.
// With Redis, each paid attempt also writes an intent next to its hold (same
// round trip) and the settle retires it while writing the row, in one step:
// if this router dies mid-request, another finishes the request from the
// intent (orphans.ts) — and if this one was only paused and comes back, it
// finds the request finished and does nothing.
import { budgetDay, INTENT_RESEND_WINDOW_MS, type BudgetStore, type ReserveResult } from "@switchyard/state";
import { heldImageTokens, usageCostMicro, worstCaseMicro, type CostSource, type KeyOwner, type NewLedgerRow, type TokenPrice } from "@switchyard/db";
import { CONTEXT_1M_BETA, priceBefore } from "../backends/anthropic/betas.ts";
import { MIN_THINKING_BUDGET } from "../backends/reasoning.ts";
import type { Backend, InferencePath } from "../backends/types.ts";
import type { Usage } from "../backends/usage.ts";
import type { Config } from "../config.ts";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import type { BudgetDirectory, TenantBudget } from "./budgets.ts";
import { outputLimitField, promptBound, requestedMaxOutput, type PromptBound } from "./estimate.ts";
import type { LedgerSink } from "./ledger.ts";
import { encodeLedgerRow } from "./ledger-stream.ts";
import { abandonedAttemptRow, encodeProgressUsage, type AbandonedAttempt, type AttemptProgress, type IntentJournal, type IntentProgress, type PaidIntent } from "./orphans.ts";
import type { PriceBook } from "./prices.ts";
import type { ReconcileResult } from "./reconcile.ts";

/** The tab's answer before an attempt on one backend: run it (a paid one held against the budget), or skip it and why. */
export type BudgetVerdict =
  | {
      ok: true;
      /** Body fields this attempt must send (the output cap the hold assumed). */
      patch?: Record<string, unknown>;
      /** For a paid attempt with an intent: the relay reports the generation id (first chunk) and usage seen, so a router that outlives this one can finish it. */
      progress?: (p: AttemptProgress) => void;
    }
  | { ok: false; reason: "budget_exhausted" | "unpriced" | "budget_unavailable" };

/** How a dispatched request ended, as the relay reports it (the ledger row is made from it). */
export interface SettleOutcome {
  backend: Backend;
  status: "ok" | "error" | "client_cancelled" | "timeout";
  usage?: Usage;
  /** performance.now() of the first streamed event. */
  firstTokenAt?: number;
  /** Stream events relayed (a usage estimate when the provider reports none). */
  chunks?: number;
  /**
   * The upstream accepted the attempt (2xx headers came) but it ended before
   * anything reached the client (first-token deadline, client gone, router
   * shutdown). A paid provider has been processing the prompt since, and
   * bills it for an aborted stream: it is charged an estimate, not $0.
   */
  accepted?: boolean;
}

/** Records an alert row; true only for the one caller that inserted it (once per tenant × day × threshold). */
export type AlertRecorder = (tenantId: number, day: string, threshold: number) => Promise<boolean>;

export interface GuardDeps {
  store: BudgetStore;
  budgets: BudgetDirectory;
  prices: PriceBook;
  ledger: LedgerSink;
  alerts: AlertRecorder;
  billing: Config["billing"];
  log: Logger;
  metrics: RouterMetrics;
  /** The intents journal (with Redis): a paid attempt's intent, so that another router can finish it if this one dies. */
  intents?: IntentJournal;
  /**
   * Rebuilds a tenant's day from the ledger unless it is checked already
   * (checkBudgetDay). With it, every hold asks the store for a checked day
   * (ReserveInput.requireChecked): counters the store lost are never read
   * as a day with nothing spent.
   */
  checkDay?: (tenantId: number, day: string) => Promise<ReconcileResult | undefined>;
}

export interface TabInput {
  /** The id the router minted for this request (never a client's x-request-id): holds, settles and the ledger key on it. */
  requestId: string;
  tenant: KeyOwner;
  path: InferencePath;
  /** The model the client asked for (the ledger keeps the upstream's name). */
  model: string;
  /** Epoch ms of arrival: fixes the budget day and the ledger row's started_at for every retry. */
  arrivedAtMs: number;
  /** performance.now() at arrival, to turn relay timings into instants. */
  startedAtPerf: number;
  /**
   * What the tab needs of the body (bodyFacts), not the body: a stream's tab
   * lives as long as the stream, and a body is a whole conversation (issue 14).
   */
  facts: BodyFacts;
}

/**
 * What a request's tab needs of its body: the prompt's token bound (with its
 * images' and audio's share: promptBound; the request class has worked it
 * out already) and the output limit as the client set it.
 */
export interface BodyFacts extends PromptBound {
  /** The client's output limit (requestedMaxOutput): undefined when it set none, 0 for embeddings. */
  askedOutput: number | undefined;
  /** The one field the body carries its output limit in (outputLimitField) … */
  limitField: "max_tokens" | "max_completion_tokens";
  /** … and whether it has the other one too (a paid upstream is told to leave it out). */
  bothLimits: boolean;
  /** Whether the answer is streamed: a non-streamed one is generated whole even when its client leaves. */
  stream: boolean;
  /** Whether it asks a provider for a one-hour cache write anywhere (the hold then prices the prompt at that rate). */
  hourCache: boolean;
  /** OpenRouter's `reasoning` object when it names a thinking budget (`max_tokens`), which the output cap may have to scale (Tab.reasoningPatch). */
  reasoning: Record<string, unknown> | undefined;
  /**
   * Whether Anthropic is sent the 1M-context beta: only then may it bill a
   * prompt at a price row's long-context tier (without it, it refuses a
   * prompt past 200k tokens), so only then is an Anthropic hold priced there.
   */
  contextOneM: boolean;
}

/** The body's `reasoning` when it sets a numeric thinking budget; else undefined (most bodies: one property read). */
function budgetedReasoning(body: Record<string, unknown>): Record<string, unknown> | undefined {
  const r = body.reasoning;
  return r !== null && typeof r === "object" && typeof (r as Record<string, unknown>).max_tokens === "number" ? (r as Record<string, unknown>) : undefined;
}

/**
 * Whether a body asks for a one-hour prompt cache anywhere: a
 * `cache_control` with `ttl: "1h"` on a system block, a message, a content
 * part or a tool (Anthropic's places, which OpenRouter passes on). Walked a
 * few levels deep only: that is where they sit.
 */
export function asksHourCache(v: unknown, depth = 0): boolean {
  if (depth > 5 || v === null || typeof v !== "object") return false;
  if (Array.isArray(v)) {
    for (const x of v) if (typeof x === "object" && asksHourCache(x, depth + 1)) return true;
    return false;
  }
  const o = v as Record<string, unknown>;
  const cc = o.cache_control;
  if (cc !== null && typeof cc === "object" && (cc as Record<string, unknown>).ttl === "1h") return true;
  for (const k in o) {
    const x = o[k];
    if (k !== "cache_control" && typeof x === "object" && asksHourCache(x, depth + 1)) return true;
  }
  return false;
}

/** The facts of a body a tab keeps (bound: pass the request class's to save the walk). */
export function bodyFacts(path: InferencePath, body: Record<string, unknown>, bound: PromptBound = promptBound(path, body), betas?: readonly string[]): BodyFacts {
  const limitField = outputLimitField(path, body);
  return {
    promptTokens: bound.promptTokens,
    imageTokens: bound.imageTokens,
    imageTileTokens: bound.imageTileTokens,
    audioTokens: bound.audioTokens,
    askedOutput: requestedMaxOutput(path, body),
    limitField,
    bothLimits: body[limitField === "max_tokens" ? "max_completion_tokens" : "max_tokens"] !== undefined,
    stream: body.stream === true,
    hourCache: asksHourCache(body),
    reasoning: budgetedReasoning(body),
    contextOneM: betas?.includes(CONTEXT_1M_BETA) === true,
  };
}

/** Typical bytes per token, for estimates when a provider reports no usage (the upper bound uses 1). */
const ESTIMATE_BYTES_PER_TOKEN = 3;

/**
 * Audio tokens a second, typical over the bound's: the bound counts Gemini's
 * 32 a second (media.ts), the dearest rate; OpenAI's audio models, the ones
 * that price audio apart, count 10.
 */
const ESTIMATE_AUDIO_RATE = { typical: 10, bound: 32 };

/** Pauses before a failed budget settle is tried again (about 5 s in all: a Redis failover's span). */
const SETTLE_RETRY_MS = [250, 1_000, 4_000];

/** After a day's check failed (Postgres away), its paid attempts are skipped this long before the ledger is asked again. */
const CHECK_RETRY_MS = 1_000;

export class BudgetGuard {
  /** Settles started and not yet ended (a counter, not a promise set: one per request). */
  private inflight = 0;
  /** Settles waiting for the next turn of the loop (later()). */
  private queued: Array<() => Promise<void>> = [];
  /** drain() callers waiting for both to empty. */
  private idle: Array<() => void> = [];
  /** tenant:day:threshold already alerted by (or known to) this router. */
  private readonly alerted = new Set<string>();
  private readonly unpricedLogged = new Set<string>();
  /** tenant|day checks in flight (one ledger read per day, however many requests found it unchecked) … */
  private readonly checking = new Map<string, Promise<boolean>>();
  /** … and when each failed last (performance.now()), so a Postgres outage is not asked per request. */
  private readonly checkFailedAt = new Map<string, number>();

  constructor(readonly deps: GuardDeps) {}

  /**
   * The day was found `day_unchecked`: rebuilds it from the ledger (once for
   * every request of this router that waits on it). True when the day is
   * checked now, by this router or another; false when the ledger could not
   * be read, and for CHECK_RETRY_MS after.
   */
  checkDay(tenantId: number, day: string): Promise<boolean> {
    const check = this.deps.checkDay;
    if (!check) return Promise.resolve(false);
    const k = `${tenantId}|${day}`;
    const failedAt = this.checkFailedAt.get(k);
    if (failedAt !== undefined && performance.now() - failedAt < CHECK_RETRY_MS) return Promise.resolve(false);
    let p = this.checking.get(k);
    if (p) return p;
    p = check(tenantId, day).then(
      (r) => {
        this.checkFailedAt.delete(k);
        this.deps.metrics.budgetDayChecks.inc({ outcome: r ? "rebuilt" : "already" });
        // A new day rebuilds from nothing to nothing; counters that
        // disagree with the ledger were lost (or never written).
        if (r && r.spentMicro !== r.before.spentMicro) {
          this.deps.log.warn("budget counters disagreed with the ledger: rebuilt from it before holding", { tenantId, day, spentMicro: r.spentMicro.toString(), countedMicro: r.before.spentMicro.toString() });
        }
        return true;
      },
      (err: unknown) => {
        // Bounded: a long outage across many tenants and days forgets the oldest pauses, not the checks.
        if (this.checkFailedAt.size >= 10_000) this.checkFailedAt.clear();
        this.checkFailedAt.set(k, performance.now());
        this.deps.metrics.budgetDayChecks.inc({ outcome: "failed" });
        this.deps.log.warn("budget day not checked against the ledger: its paid backends are skipped until it is", { tenantId, day, error: (err as Error).message });
        return false;
      },
    );
    this.checking.set(k, p);
    void p.finally(() => this.checking.delete(k));
    return p;
  }

  open(input: TabInput): RequestTab {
    return new RequestTab(this, input);
  }

  /** Runs a settle off the request path, tracked so shutdown can wait for it. */
  track(p: Promise<void>): void {
    this.inflight++;
    p.then(this.untrack, this.untrackFailed);
  }

  private readonly untrack = (): void => {
    this.inflight--;
    this.wakeIfIdle();
  };

  private wakeIfIdle(): void {
    if (this.inflight === 0 && this.queued.length === 0) for (const w of this.idle.splice(0)) w();
  }

  private readonly untrackFailed = (err: unknown): void => {
    this.deps.log.error("settle failed", { error: (err as Error)?.message ?? String(err) });
    this.untrack();
  };

  /**
   * Runs `settle` on the next turn of the loop (after the answer's last bytes
   * were handed to the socket), then tracks it. One setImmediate per turn
   * for all the settles of that turn, not one per request.
   */
  later(settle: () => Promise<void>): void {
    if (this.queued.push(settle) === 1) setImmediate(this.runQueued);
  }

  private readonly runQueued = (): void => {
    const batch = this.queued;
    this.queued = [];
    for (const settle of batch) {
      let p: Promise<void>;
      try {
        p = settle();
      } catch (err) {
        p = Promise.reject(err as Error);
      }
      this.track(p);
    }
    this.wakeIfIdle();
  };

  /** Waits for every settle in flight (router shutdown). */
  async drain(): Promise<void> {
    while (this.inflight > 0 || this.queued.length > 0) await new Promise<void>((r) => this.idle.push(r));
  }

  /** Settles in flight done and their ledger rows written through to Postgres (tests, shutdown). */
  async flush(): Promise<void> {
    await this.drain();
    await this.deps.ledger.flush();
  }

  noteUnpriced(backend: Backend): void {
    const k = `${backend.kind}/${backend.model}`;
    if (this.unpricedLogged.has(k)) return;
    this.unpricedLogged.add(k);
    this.deps.log.warn("paid backend skipped: no price set, its cost cannot be bounded", { backend: backend.kind, model: backend.model, fix: `switchyard prices set ${backend.kind} ${backend.model} …` });
  }

  async checkThresholds(tenantId: number, day: string, budget: TenantBudget, spentMicro: bigint): Promise<void> {
    if (spentMicro <= 0n) return;
    for (const t of budget.thresholds) {
      if (spentMicro * 100n < budget.limitMicro * BigInt(t)) break;
      const k = `${tenantId}:${day}:${t}`;
      if (this.alerted.has(k)) continue;
      this.alerted.add(k);
      try {
        if (await this.deps.alerts(tenantId, day, t)) {
          this.deps.metrics.budgetAlerts.inc({ threshold: String(t) });
          this.deps.log.warn("budget threshold crossed", { tenantId, day, threshold: t, spentMicro: spentMicro.toString(), limitMicro: budget.limitMicro.toString() });
        }
      } catch (err) {
        this.alerted.delete(k); // try again on the next settle
        this.deps.log.warn("budget alert not recorded", { tenantId, day, threshold: t, error: (err as Error).message });
      }
    }
  }
}

/** A free backend's verdict: the same object for every request (nothing in it varies). */
const FREE: BudgetVerdict = Object.freeze({ ok: true as const });

export class RequestTab {
  private budget: Promise<TenantBudget | null> | undefined;
  /** The tenant's day; UTC until its budget (and zone) is known. Fixed at arrival. */
  private dayCache: string | undefined;
  /** The backend whose hold is live, if any. */
  private holder: Backend | undefined;
  private settled = false;
  /** The paid attempt's intent: its id once written (undefined if the write failed), what it revealed so far. */
  private intent: { backend: Backend; id: Promise<string | undefined>; progress: IntentProgress } | undefined;
  /**
   * Paid attempts the provider accepted (2xx headers) that ended before any
   * token reached the client, and the estimate of the prompt it billed for
   * each. The request owes them: each one the request failed over from gets
   * a row of its own under its backend and model (attemptRows), written with
   * the request's row in one step; the day is settled with the total. While
   * there is one, the hold and the intent stay until the request settles
   * (release()).
   */
  private readonly abandoned: Array<{ backend: Backend; micro: bigint; usage: Usage; status: AbandonedAttempt["status"]; endedAtPerf: number }> = [];
  /** Paid attempts that wrote (or tried to write) an intent: each intent is opened once per attempt number. */
  private paidAttempts = 0;

  constructor(
    private readonly guard: BudgetGuard,
    readonly input: TabInput,
  ) {}

  // Most requests go to free workers and never need these: they are worked
  // out on first use (a paid attempt, an estimate), not for every request.
  private get day(): string {
    return (this.dayCache ??= budgetDay(this.input.arrivedAtMs, "UTC"));
  }

  /** Output tokens held for, and sent to, a paid backend: the client's ask, capped. */
  private get maxOutput(): number {
    const asked = this.input.facts.askedOutput;
    const cap = this.guard.deps.billing.maxOutputTokens;
    return asked === undefined ? cap : Math.min(asked, cap);
  }

  /** The one output-limit field the upstream gets: the body's own (normalizeMaxOutput), the other dropped. */
  private get outputPatch(): Record<string, unknown> {
    const { limitField: key, bothLimits } = this.input.facts;
    const other = key === "max_tokens" ? "max_completion_tokens" : "max_tokens";
    // undefined leaves the field out of the JSON the backend sends.
    const patch: Record<string, unknown> = bothLimits ? { [key]: this.maxOutput, [other]: undefined } : { [key]: this.maxOutput };
    const reasoning = this.reasoningPatch();
    if (reasoning) patch.reasoning = reasoning;
    return patch;
  }

  /**
   * A thinking budget (`reasoning.max_tokens`) that fit under the client's
   * own limit but not under the cap that lowered it, scaled with the limit:
   * thinking is output, held and billed within the capped limit, and
   * Anthropic refuses a budget at or above max_tokens. The client's share of
   * its limit is kept (Claude Code asks 31,999 of 32,000); with no limit of
   * its own, half the cap. Never below Anthropic's 1,024 floor while the cap
   * leaves room for it; a budget the client's own limit could not hold is
   * left for the backend to refuse.
   */
  private reasoningPatch(): Record<string, unknown> | undefined {
    const r = this.input.facts.reasoning;
    if (!r) return undefined;
    const budget = r.max_tokens as number;
    const out = this.maxOutput;
    const asked = this.input.facts.askedOutput;
    if (budget < out || (asked !== undefined && (asked <= out || budget >= asked))) return undefined;
    const scaled = asked === undefined ? Math.floor(out / 2) : Math.floor((budget * out) / asked);
    return { ...r, max_tokens: Math.min(out - 1, Math.max(MIN_THINKING_BUDGET, scaled)) };
  }

  private tenantBudget(): Promise<TenantBudget | null> {
    this.budget ??= this.guard.deps.budgets.budgetOf(this.input.tenant.tenantId).then((b) => {
      // The day is the tenant's: it rolls over at the budget zone's midnight.
      if (b) this.dayCache = budgetDay(this.input.arrivedAtMs, b.timeZone);
      return b;
    });
    return this.budget;
  }

  private priceOf(backend: Backend): TokenPrice | undefined {
    return this.guard.deps.prices.price(backend.kind, backend.model);
  }

  /** A free backend is admitted at once (not as a promise): only a paid one is held against the budget. */
  admit(backend: Backend): BudgetVerdict | Promise<BudgetVerdict> {
    if (!backend.paid) return FREE;
    return this.hold(backend);
  }

  private async hold(backend: Backend): Promise<BudgetVerdict> {
    const { deps } = this.guard;
    const price = this.priceOf(backend);
    if (!price) {
      deps.metrics.budgetHolds.inc({ outcome: "unpriced" });
      this.guard.noteUnpriced(backend);
      return { ok: false, reason: "unpriced" };
    }
    // The hold assumes this many output tokens: the upstream is told the same.
    const patch = this.input.path === "/v1/embeddings" || this.input.path === "/v1/hidden_states" ? undefined : this.outputPatch;
    let budget: TenantBudget | null;
    try {
      budget = await this.tenantBudget();
    } catch (err) {
      deps.log.warn("budget unknown (Postgres unreachable, nothing cached): paid backend skipped", { error: (err as Error).message });
      deps.metrics.budgetHolds.inc({ outcome: "unavailable" });
      return { ok: false, reason: "budget_unavailable" };
    }
    if (!budget && !deps.intents) {
      deps.metrics.budgetHolds.inc({ outcome: "unlimited" });
      return { ok: true, ...(patch ? { patch } : {}) };
    }
    const { facts } = this.input;
    // An earlier attempt failed over from after its provider accepted it is
    // owed too: this attempt's hold (which replaces the request's hold) and
    // intent cover both, so the budget and a crash-finish still count it.
    const carried = this.carriedMicro(backend);
    // The prompt's images and audio at this model's rates for them (its price row's image multiplier, on the images' tile tokens, and audio price).
    const worst = worstCaseMicro(facts.promptTokens, this.maxOutput, priceBefore(backend.kind, price, facts.contextOneM), facts) + carried;
    // That earlier attempt's intent is retired once this one, which carries its cost, stands.
    const previous = this.intent;
    // Written before the reserve is sent, in the same tick: auto-pipelining
    // puts both in one round trip, and the intent is in Redis before the hold.
    const intent = this.openIntent(backend, worst, carried, budget !== null);
    const progress = intent && ((p: AttemptProgress) => this.progress(backend, p));
    if (!budget) {
      deps.metrics.budgetHolds.inc({ outcome: "unlimited" });
      await this.retirePreviousOnce(intent, previous);
      return { ok: true, ...(patch ? { patch } : {}), ...(progress ? { progress } : {}) };
    }
    let r: ReserveResult;
    try {
      r = await this.reserve(worst, budget.limitMicro);
      // A day the store holds no check of: a new day, or counters it lost.
      // The ledger tells which; until it has, nothing is held.
      if (!r.ok && r.reason === "day_unchecked" && (await this.guard.checkDay(this.input.tenant.tenantId, this.day))) r = await this.reserve(worst, budget.limitMicro);
    } catch (err) {
      this.retireIntent(previous);
      throw err;
    }
    if (!r.ok && r.reason === "day_unchecked") {
      this.retireIntent(previous);
      deps.metrics.budgetHolds.inc({ outcome: "unchecked" });
      return { ok: false, reason: "budget_unavailable" };
    }
    if (!r.ok) {
      this.retireIntent(previous);
      deps.metrics.budgetHolds.inc({ outcome: "refused" });
      deps.log.info("paid backend skipped: budget would be exceeded", {
        backend: backend.id,
        holdMicro: worst.toString(),
        availableMicro: r.availableMicro.toString(),
      });
      return { ok: false, reason: "budget_exhausted" };
    }
    deps.metrics.budgetHolds.inc({ outcome: "held" });
    this.holder = backend;
    await this.retirePreviousOnce(intent, previous);
    return { ok: true, ...(patch ? { patch } : {}), ...(progress ? { progress } : {}) };
  }

  private reserve(amountMicro: bigint, limitMicro: bigint): Promise<ReserveResult> {
    const { deps } = this.guard;
    return deps.store.reserve({
      tenantId: this.input.tenant.tenantId,
      day: this.day,
      requestId: this.input.requestId,
      amountMicro,
      limitMicro,
      ttlMs: deps.billing.holdTtlMs,
      requireChecked: deps.checkDay !== undefined,
    });
  }

  /**
   * The earlier attempt's intent goes once this attempt's, which carries its
   * cost, is written — not when that write failed: then the earlier one is
   * the only crash record of what is owed, and stays the request's intent,
   * retired with its row (left aside, it would stay pending on this router,
   * touched for as long as it lives, and be finished as an orphan after).
   */
  private async retirePreviousOnce(intent: RequestTab["intent"], previous: RequestTab["intent"]): Promise<void> {
    const written = await intent?.id;
    if (!intent || written !== undefined) this.retireIntentOf(previous);
    else if (previous && this.intent === intent) this.intent = previous;
  }

  /** Starts writing the attempt's intent (with Redis); its id resolves undefined if Redis refused it. `carried`: of `worst`, what abandoned attempts owe. */
  private openIntent(backend: Backend, worst: bigint, carried: bigint, held: boolean): RequestTab["intent"] {
    const { deps } = this.guard;
    if (!deps.intents) return undefined;
    const { input } = this;
    const record: PaidIntent = {
      requestId: input.requestId,
      tenantId: input.tenant.tenantId,
      keyId: input.tenant.keyId ?? null,
      day: this.day,
      backend: backend.kind,
      model: backend.model,
      holdMicro: worst.toString(),
      // The sum (what a router from before the list reads), and each attempt, so a crash-finish books them apart.
      ...(carried > 0n ? { abandonedMicro: carried.toString(), abandoned: this.abandonedOf(backend) } : {}),
      held,
      startedAtMs: input.arrivedAtMs,
      attemptAtMs: Date.now(),
      holdTtlMs: deps.billing.holdTtlMs,
    };
    // Keyed by the attempt: the script resent after a lost reply (ioredis, on reconnecting) writes no second intent.
    const id = deps.intents.open(JSON.stringify(record), `${input.requestId}:${++this.paidAttempts}`, Math.min(deps.billing.holdTtlMs, INTENT_RESEND_WINDOW_MS)).catch((err: unknown) => {
      deps.metrics.billingFailures.inc({ step: "intent" });
      deps.log.warn("intent not written; if this router dies mid-request, the request has no ledger row", { requestId: input.requestId, error: (err as Error).message });
      return undefined;
    });
    this.intent = { backend, id, progress: {} };
    return this.intent;
  }

  /**
   * The attempt ended without charge (refused, failed before its first byte):
   * its intent goes, off the request path. `restore`: the intent to keep in
   * its place (an abandoned attempt's, which still carries a cost).
   */
  private retireIntent(restore?: RequestTab["intent"]): void {
    const intent = this.intent;
    this.intent = restore;
    this.retireIntentOf(intent);
  }

  private retireIntentOf(intent: RequestTab["intent"]): void {
    const journal = this.guard.deps.intents;
    if (!intent || !journal) return;
    this.guard.track(
      intent.id.then(async (id) => {
        if (id) await journal.retire(id);
      }),
    );
  }

  /** What the relay saw of the paid attempt on `backend`: noted beside its intent, off the request path. */
  progress(backend: Backend, p: AttemptProgress): void {
    const intent = this.intent;
    const journal = this.guard.deps.intents;
    if (!intent || intent.backend !== backend || !journal) return;
    const pr = intent.progress;
    let changed = false;
    if (p.generationId && pr.generationId === undefined && p.generationId.length <= 200) {
      pr.generationId = p.generationId;
      pr.firstTokenAtMs = Date.now();
      changed = true;
    }
    if (p.usage) {
      pr.usage = encodeProgressUsage(p.usage);
      changed = true;
    }
    if (!changed) return;
    const text = JSON.stringify(pr);
    void intent.id
      .then((id) => (id ? journal.note(id, text) : undefined))
      .catch((err: unknown) => this.guard.deps.log.warn("intent progress not noted", { requestId: this.input.requestId, error: (err as Error).message }));
  }

  /**
   * The attempt on `backend` failed before its first byte reached the
   * client: give its hold back — unless its provider had accepted it
   * (`accepted`: 2xx headers came), which bills the prompt it processed. Then
   * its estimate is owed by the request (cost()), and from then on the hold
   * and the intent stay until the request settles: the day keeps counting
   * that money, and a router dying later still leaves an intent covering it.
   */
  release(backend: Backend, accepted = false, status: AbandonedAttempt["status"] = "error"): void {
    if (accepted && backend.paid) this.abandon(backend, status);
    if (this.abandoned.length > 0) return;
    if (this.intent?.backend === backend) this.retireIntent();
    if (this.holder !== backend) return;
    this.holder = undefined;
    const { deps } = this.guard;
    this.guard.track(
      deps.store.release({ tenantId: this.input.tenant.tenantId, day: this.day, requestId: this.input.requestId }).then(
        () => undefined,
        (err: unknown) => {
          deps.metrics.billingFailures.inc({ step: "release" });
          deps.log.warn("hold release failed; it expires by itself", { error: (err as Error).message });
        },
      ),
    );
  }

  /** Books an accepted paid attempt's estimate (the prompt, nothing generated reached anyone) as owed by the request. */
  private abandon(backend: Backend, status: AbandonedAttempt["status"]): void {
    if (this.abandoned.some((a) => a.backend === backend)) return;
    const price = this.priceOf(backend);
    if (!price) return; // cannot happen: unpriced backends are never admitted
    const usage = this.estimatedUsage({ backend, status: "error", accepted: true }, price);
    const micro = usageCostMicro({ promptTokens: usage.prompt, completionTokens: usage.completion, audioTokens: usage.audio ?? 0 }, price);
    this.abandoned.push({ backend, micro: micro > 0n ? micro : 1n, usage, status, endedAtPerf: performance.now() });
  }

  /** What attempts abandoned after their provider accepted them owe, apart from the one on `backend` (its own outcome prices it). */
  private carriedMicro(backend: Backend): bigint {
    let sum = 0n;
    for (const a of this.abandoned) if (a.backend !== backend) sum += a.micro;
    return sum;
  }

  /** The abandoned attempts apart from the one on `backend`, as an intent carries them (n: the place of the row, attemptRowId). */
  private abandonedOf(backend: Backend): AbandonedAttempt[] {
    const out: AbandonedAttempt[] = [];
    this.abandoned.forEach((a, i) => {
      if (a.backend === backend) return;
      out.push({ n: i + 1, backend: a.backend.kind, model: a.backend.model, micro: a.micro.toString(), prompt: a.usage.prompt, completion: a.usage.completion, status: a.status, endedAtMs: Math.round(this.input.arrivedAtMs + (a.endedAtPerf - this.input.startedAtPerf)) });
    });
    return out;
  }

  /**
   * The rows of the paid attempts the request failed over from after their
   * provider accepted them (all but one on `ended`, the backend it ended on,
   * whose own outcome is the request's row): each under its own backend and
   * model, keyed `<request id>/a<n>` (attemptRowId), an `estimate`, on the
   * request's started_at (its day, its partition). Written with the
   * request's row, in one step; orphans.ts writes the same rows from the
   * intent when another router finishes the request.
   */
  attemptRows(ended: Backend): NewLedgerRow[] {
    const rows: NewLedgerRow[] = [];
    for (const a of this.abandonedOf(ended)) rows.push(abandonedAttemptRow(this.input.requestId, this.input.tenant.tenantId, this.input.tenant.keyId ?? null, this.input.arrivedAtMs, a));
    return rows;
  }

  /**
   * What the attempt the request ended on cost and how we know it (its row).
   * The paid attempts failed over from after their provider accepted them
   * are not in it: each has its own row (attemptRows), so that spend per
   * backend and model is what each provider bills, and this row keeps the
   * provider's own figure when it has one.
   */
  cost(backend: Backend, o: SettleOutcome): { micro: bigint; source: CostSource; usage: Usage } {
    const usage: Usage = o.usage ?? { prompt: 0, completion: 0, cached: 0, cacheWrite: 0 };
    if (!backend.paid) {
      // A worker stream cut short (failed or cancelled) reports no usage: the
      // row still counts what reached the client, flagged as an estimate.
      if (o.usage || o.firstTokenAt === undefined) return { micro: 0n, source: "price_table", usage };
      return { micro: 0n, source: "estimate", usage: this.estimatedUsage(o) };
    }
    if (o.usage?.providerCostMicro !== undefined) return { micro: o.usage.providerCostMicro, source: "provider", usage };
    const price = this.priceOf(backend);
    if (!price) return { micro: 0n, source: "estimate", usage }; // cannot happen: unpriced backends are never admitted
    if (o.usage) {
      return {
        micro: usageCostMicro(
          { promptTokens: usage.prompt, completionTokens: usage.completion, cachedTokens: usage.cached, cacheWriteTokens: usage.cacheWrite, cacheWrite1hTokens: usage.cacheWrite1h ?? 0, audioTokens: usage.audio ?? 0 },
          price,
        ),
        source: "price_table",
        usage,
      };
    }
    // No usage reported. If the upstream produced anything, or accepted the
    // request (it processed and bills the prompt even when the stream is cut
    // before its first token), it charged: estimate, never $0. Refused
    // before any response (connect error, 5xx/429, headers deadline): $0.
    const consumed = o.status === "ok" || o.firstTokenAt !== undefined || o.status === "client_cancelled" || o.accepted === true;
    if (!consumed) return { micro: 0n, source: "price_table", usage };
    const estimated = this.estimatedUsage(o, price);
    const micro = usageCostMicro({ promptTokens: estimated.prompt, completionTokens: estimated.completion, audioTokens: estimated.audio ?? 0 }, price);
    return { micro: micro > 0n ? micro : 1n, source: "estimate", usage: estimated };
  }

  /**
   * Usage when none was reported: prompt ≈ its text's byte bound ÷ 3, plus
   * its images' tokens as the hold counts them from their sizes (with the
   * price row's image multiplier, times their OpenAI tile tokens:
   * gpt-4o-mini counts an image 33× gpt-4o — ÷ 3 and at 1× it was charged a
   * hundredth of it; heldImageTokens), plus its audio's
   * at the typical rate, kept apart so that it is priced at the row's audio
   * price (`price`: the paid backend's row; none for a worker); completion =
   * events relayed (≥ 1), or for a paid answer that was not streamed and
   * whose client left before it came (or whose body, once generated, never
   * reached the client), all the output its hold assumed (and the provider
   * was told): providers generate and bill a non-streamed answer whole
   * whether or not its client stayed for it. A stream accepted but cut
   * before its first token: the prompt alone (nothing generated reached
   * anyone).
   */
  private estimatedUsage(o: SettleOutcome, price?: TokenPrice): Usage {
    const { facts } = this.input;
    const { stream, promptTokens, imageTokens, audioTokens } = facts;
    const whole = (o.status === "client_cancelled" || o.accepted === true) && o.backend.paid && !stream && o.chunks === undefined;
    const untouched = o.accepted === true && stream && o.firstTokenAt === undefined;
    const completion = whole ? Math.max(1, this.maxOutput) : untouched ? 0 : Math.max(1, o.chunks ?? 0);
    const text = Math.ceil((promptTokens - imageTokens - audioTokens) / ESTIMATE_BYTES_PER_TOKEN);
    const images = price ? Number(heldImageTokens(price, facts)) : imageTokens;
    const audio = Math.ceil((audioTokens * ESTIMATE_AUDIO_RATE.typical) / ESTIMATE_AUDIO_RATE.bound);
    return { prompt: text + images + audio, completion, cached: 0, cacheWrite: 0, ...(audio > 0 ? { audio } : {}) };
  }

  /**
   * Called once by the relay when the request ended; runs off the request
   * path: the row is built and written after the answer's last bytes are
   * handed to the socket (next turn of the loop), its end time taken now.
   * Tracked at once, so a drain waits for it.
   */
  settle(o: SettleOutcome): void {
    if (this.settled) return;
    this.settled = true;
    const finishedAtPerf = performance.now();
    this.guard.later(() => this.settleNow(o, finishedAtPerf));
  }

  /** The row for this outcome (exposed for the idempotency tests: a retried settle writes the same row). */
  row(o: SettleOutcome, finishedAtPerf: number): NewLedgerRow {
    const { input } = this;
    const c = this.cost(o.backend, o);
    const at = (perf: number) => new Date(input.arrivedAtMs + (perf - input.startedAtPerf));
    return {
      requestId: input.requestId,
      tenantId: input.tenant.tenantId,
      keyId: input.tenant.keyId,
      backend: o.backend.kind,
      model: o.backend.paid ? o.backend.model : input.model,
      worker: o.backend.workerId ?? null,
      promptTokens: c.usage.prompt,
      completionTokens: c.usage.completion,
      cachedTokens: Math.min(c.usage.cached, c.usage.prompt),
      cacheWriteTokens: Math.min(c.usage.cacheWrite, c.usage.prompt),
      cacheWrite1hTokens: Math.min(c.usage.cacheWrite1h ?? 0, c.usage.cacheWrite, c.usage.prompt),
      costMicro: c.micro,
      costSource: c.source,
      status: o.status,
      startedAt: new Date(input.arrivedAtMs),
      firstTokenAt: o.firstTokenAt !== undefined ? at(o.firstTokenAt) : null,
      finishedAt: at(finishedAtPerf),
      ttftMs: o.firstTokenAt !== undefined ? Math.round(o.firstTokenAt - input.startedAtPerf) : null,
      durationMs: Math.round(finishedAtPerf - input.startedAtPerf),
      // Self-hosted responses' ids name nothing on an invoice.
      providerGenerationId: o.backend.paid ? (o.usage?.generationId ?? null) : null,
    };
  }

  /** Ledger row first, then spend, then alerts. Idempotent: safe to run again with the same outcome. */
  settleNow(o: SettleOutcome, finishedAtPerf = performance.now()): Promise<void> {
    // A free backend with no hold, no intent and no abandoned paid attempt left: its settle is its ledger row and nothing after it.
    if (!o.backend.paid && !this.holder && !this.intent && this.abandoned.length === 0) return this.guard.deps.ledger.record(this.row(o, finishedAtPerf));
    return this.settleHeld(o, finishedAtPerf);
  }

  private async settleHeld(o: SettleOutcome, finishedAtPerf: number): Promise<void> {
    const { deps } = this.guard;
    const row = this.row(o, finishedAtPerf);
    const attempts = this.abandoned.length > 0 ? this.attemptRows(o.backend) : [];
    if (!(await this.recordRow(row, attempts))) {
      // Another router finished this request from its intent while this one
      // was silent past the hold's TTL (paused, partitioned): its row and
      // settle stand; this one adds nothing.
      this.holder = undefined;
      deps.log.warn("request already finished by another router (this one was silent past its hold's TTL); nothing recorded or settled here", { requestId: this.input.requestId, backend: o.backend.id });
      return;
    }
    // Free backends touch no budget unless a paid attempt's hold is still live, or one is owed.
    if (!o.backend.paid && !this.holder && this.abandoned.length === 0) return;
    let budget: TenantBudget | null = null;
    try {
      budget = await this.tenantBudget();
    } catch {
      budget = null;
    }
    const ref = { tenantId: this.input.tenant.tenantId, day: this.day, requestId: this.input.requestId };
    // The day is settled once, with all the request cost: its row and its abandoned attempts' rows.
    let actualMicro = row.costMicro as bigint;
    for (const a of attempts) actualMicro += a.costMicro as bigint;
    let spent: bigint | undefined;
    // Tried again (it is idempotent per request id) across a failover's
    // few seconds: a settle lost leaves the day's spend short by this cost
    // until someone reconciles, while its hold expires on its own.
    for (let attempt = 0; spent === undefined; attempt++) {
      try {
        spent = (await deps.store.settle({ ...ref, actualMicro })).spentMicro;
      } catch (err) {
        const wait = SETTLE_RETRY_MS[attempt];
        if (wait === undefined) {
          deps.metrics.billingFailures.inc({ step: "settle" });
          deps.log.warn("budget settle failed; the hold expires and `budgets reconcile` restores the spend from the ledger", { requestId: ref.requestId, error: (err as Error).message });
          return;
        }
        await new Promise((r) => setTimeout(r, wait));
      }
    }
    this.holder = undefined;
    if (budget) await this.guard.checkThresholds(ref.tenantId, this.day, budget, spent);
  }

  /**
   * Writes the request's row and its abandoned attempts' rows, in one step:
   * for a paid attempt with an intent, atomically with retiring the intent.
   * False when the intent was already gone — the request was finished by
   * another router — and nothing was written.
   */
  private async recordRow(row: NewLedgerRow, attempts: NewLedgerRow[]): Promise<boolean> {
    const { deps } = this.guard;
    const intent = this.intent;
    if (intent) this.intent = undefined;
    const id = intent && deps.intents ? await intent.id : undefined;
    // The intent may be an earlier attempt's on another backend: one the
    // provider accepted and the request failed over from (release kept it,
    // its cost is on its attempt row). It is this request's all the same:
    // retired with the rows, once, like any other.
    if (!id) {
      await deps.ledger.record(row, attempts);
      return true;
    }
    try {
      return await deps.intents!.finish(id, encodeLedgerRow(row), attempts.map(encodeLedgerRow));
    } catch (err) {
      // Redis away: the row goes through the sink's own retry; the intent
      // stays this router's (touched) until Redis answers again.
      deps.metrics.billingFailures.inc({ step: "intent" });
      deps.log.warn("intent not retired; row written without it", { requestId: row.requestId, error: (err as Error).message });
      await deps.ledger.record(row, attempts);
      void deps.intents!.retire(id).catch(() => {});
      return true;
    }
  }
}

