// Money survives a router crash. Before each paid attempt the tab writes an
// intent to the journal (next to the hold, same round trip); the attempt's
// normal end retires it and writes the ledger row in one step. A router that
// dies mid-request leaves its intents pending and, soon, idle: any other
// router takes them over (XAUTOCLAIM) and, once the hold has expired — no
// live router can still be serving the request then, since the hold outlives
// deadlines.totalMs — finishes each one: the provider's own cost where it can
// say (CrashCostLookup, in each provider's folder), else the hold (the worst
// case, never $0); one ledger row (plus one per attempt the request failed
// over from after its provider accepted it), one settle of the tenant's day.
import { attemptRowId, type NewLedgerRow, type TokenPrice } from "@switchyard/db";
import type { ClaimedIntent, RedisIntentJournal } from "@switchyard/state";
import type { Usage } from "../backends/usage.ts";
import type { BudgetGuard } from "./guard.ts";
import { encodeLedgerRow } from "./ledger-stream.ts";

/** The journal as the tab uses it (the Redis journal; absent on one machine without Redis). */
export type IntentJournal = Pick<RedisIntentJournal, "open" | "note" | "finish" | "retire">;

/** What an intent records: enough to write the request's row without its router. */
export interface PaidIntent {
  requestId: string;
  tenantId: number;
  keyId: number | null;
  /** The tenant's budget day the hold was taken on. */
  day: string;
  backend: string;
  /** The upstream's model name (the ledger keeps it). */
  model: string;
  /** The hold's amount (the worst case), micro-cents as a decimal string. */
  holdMicro: string;
  /**
   * Of holdMicro, the estimate owed by earlier attempts of the request that
   * a provider accepted and the router failed over from (RequestTab.release):
   * added to a looked-up cost, which names this attempt's generation only.
   * Absent: none (and in intents written before it existed).
   */
  abandonedMicro?: string;
  /**
   * The same attempts one by one (their sum is abandonedMicro): each gets a
   * row of its own under its backend and model, as the live settle writes
   * it. Absent in intents written before it: abandonedMicro is then added
   * to this attempt's row, as it was.
   */
  abandoned?: AbandonedAttempt[];
  /** Whether a hold was taken (false: the tenant has no limit; the amount is still the worst case). */
  held: boolean;
  /** The request's arrival, epoch ms: the ledger row's started_at (its key, with the request id). */
  startedAtMs: number;
  /** This attempt's start, epoch ms. */
  attemptAtMs: number;
  /** The hold's TTL: the orphan is finished only once it has passed. */
  holdTtlMs: number;
}

/** A paid attempt its provider accepted and the request failed over from, as an intent carries it (its ledger row: abandonedAttemptRow). */
export interface AbandonedAttempt {
  /** Its place among the request's abandoned attempts, from 1: its row's key is `<request id>/a<n>`. */
  n: number;
  backend: string;
  model: string;
  /** Its estimate, micro-cents as a decimal string. */
  micro: string;
  /** The estimate's tokens. */
  prompt: number;
  completion: number;
  /** How it ended. */
  status: "timeout" | "client_cancelled" | "error";
  /** When it ended, epoch ms. */
  endedAtMs: number;
}

/** The row of an abandoned attempt (see RequestTab.attemptRows), as the serving router and an orphan's finisher both write it. */
export function abandonedAttemptRow(requestId: string, tenantId: number, keyId: number | null, startedAtMs: number, a: AbandonedAttempt): NewLedgerRow {
  return {
    requestId: attemptRowId(requestId, a.n),
    tenantId,
    keyId,
    backend: a.backend,
    model: a.model,
    worker: null,
    promptTokens: a.prompt,
    completionTokens: a.completion,
    cachedTokens: 0,
    cacheWriteTokens: 0,
    cacheWrite1hTokens: 0,
    costMicro: BigInt(a.micro),
    costSource: "estimate",
    status: a.status,
    // The request's: the same day (the budget's) and partition, and the same key whoever writes it.
    startedAt: new Date(startedAtMs),
    firstTokenAt: null,
    finishedAt: new Date(Math.max(startedAtMs, a.endedAtMs)),
    ttftMs: null,
    durationMs: Math.max(0, Math.round(a.endedAtMs - startedAtMs)),
    // Cut before its first chunk: the generation's id was never seen.
    providerGenerationId: null,
  };
}

/** The abandoned attempts of an intent, each checked (an intent is read back from Redis); undefined when it has none or one is unreadable. */
function abandonedOf(intent: PaidIntent): AbandonedAttempt[] | undefined {
  const list = intent.abandoned;
  if (!Array.isArray(list) || list.length === 0) return undefined;
  const count = (v: unknown) => Number.isSafeInteger(v) && (v as number) >= 0;
  for (const a of list) {
    if (typeof a !== "object" || a === null) return undefined;
    if (!(Number.isSafeInteger(a.n) && a.n >= 1) || typeof a.backend !== "string" || typeof a.model !== "string") return undefined;
    if (typeof a.micro !== "string" || !/^\d{1,16}$/.test(a.micro) || !count(a.prompt) || !count(a.completion) || !count(a.endedAtMs)) return undefined;
    if (a.status !== "timeout" && a.status !== "client_cancelled" && a.status !== "error") return undefined;
  }
  return list;
}

/** What the attempt revealed as it went (a progress note beside the intent). */
export interface IntentProgress {
  /** The provider's id for the generation, from the first chunk. */
  generationId?: string;
  firstTokenAtMs?: number;
  /** The last usage block seen (OpenRouter's and Anthropic's come with the final chunk). */
  usage?: { prompt: number; completion: number; cached: number; cacheWrite: number; cacheWrite1h?: number; audio?: number; providerCostMicro?: string };
}

/** Progress a relay reports for an attempt (dispatch calls it; see BudgetVerdict.progress). */
export interface AttemptProgress {
  generationId?: string;
  usage?: Usage;
}

export interface CrashCostInput {
  model: string;
  generationId?: string;
  /** The last usage seen before the router died, if any. */
  usage?: Usage;
  /** The price in force for the backend and model. */
  price?: TokenPrice;
  signal: AbortSignal;
}

export interface CrashCost {
  micro: bigint;
  source: "provider_lookup" | "usage_on_crash";
  usage: Usage;
  generationId?: string;
}

/**
 * What a provider says an orphaned attempt cost. Each paid provider has one
 * in its own folder (OpenRouter asks its generation endpoint; Anthropic
 * prices the last usage seen); undefined means "cannot say": the hold.
 */
export interface CrashCostLookup {
  cost(input: CrashCostInput): Promise<CrashCost | undefined>;
}

export function encodeProgressUsage(u: Usage): NonNullable<IntentProgress["usage"]> {
  return {
    prompt: u.prompt,
    completion: u.completion,
    cached: u.cached,
    cacheWrite: u.cacheWrite,
    ...(u.cacheWrite1h ? { cacheWrite1h: u.cacheWrite1h } : {}),
    ...(u.audio ? { audio: u.audio } : {}),
    ...(u.providerCostMicro !== undefined ? { providerCostMicro: u.providerCostMicro.toString() } : {}),
  };
}

function decodeProgressUsage(u: IntentProgress["usage"]): Usage | undefined {
  if (!u) return undefined;
  const n = (v: unknown) => (Number.isSafeInteger(v) && (v as number) >= 0 ? (v as number) : 0);
  const usage: Usage = { prompt: n(u.prompt), completion: n(u.completion), cached: n(u.cached), cacheWrite: n(u.cacheWrite) };
  // Notes written before one-hour writes were counted apart have none: 0.
  const written1h = Math.min(n(u.cacheWrite1h), usage.cacheWrite);
  if (written1h > 0) usage.cacheWrite1h = written1h;
  // Notes written before audio was counted apart have none: 0 (the text price, as then). At most what the prompt's other parts leave, as usageFrom reads it.
  const audio = Math.min(n(u.audio), usage.prompt - usage.cached - usage.cacheWrite);
  if (audio > 0) usage.audio = audio;
  if (typeof u.providerCostMicro === "string" && /^\d{1,16}$/.test(u.providerCostMicro)) usage.providerCostMicro = BigInt(u.providerCostMicro);
  return usage;
}

export interface OrphanFinisherOptions {
  scanMs: number;
  concurrency: number;
  /** A provider lookup gives up after this long (default 10 s): the hold then. */
  lookupTimeoutMs?: number;
}

/** How often a router removes dead routers' empty consumers from the intents group. */
const PRUNE_EVERY_MS = 60_000;

interface Waiting {
  claimed: ClaimedIntent;
  intent: PaidIntent;
  progress: IntentProgress;
}

/** Finishes the paid attempts of routers that died: one row, one settle each. */
export class OrphanFinisher {
  private readonly waiting = new Map<string, Waiting>();
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private closed = false;
  private lastScan = 0;
  private lastPrune = Date.now();

  constructor(
    private readonly journal: RedisIntentJournal,
    private readonly guard: BudgetGuard,
    /** By backend kind. */
    private readonly lookups: Readonly<Partial<Record<string, CrashCostLookup>>>,
    private readonly opts: OrphanFinisherOptions,
  ) {}

  async start(): Promise<void> {
    await this.journal.ensureGroup();
    this.schedule();
  }

  /**
   * Ticks often enough to keep this router's intents fresh (a third of the
   * take-over idle time) and scans for orphans every scanMs.
   */
  private schedule(): void {
    if (this.closed) return;
    const claimIdleMs = this.guard.deps.billing.ledgerClaimIdleMs;
    this.timer = setTimeout(() => {
      const now = Date.now();
      const scan = now - this.lastScan >= this.opts.scanMs * 0.9;
      if (scan) this.lastScan = now;
      this.running = (scan ? this.scan() : this.journal.touch(true))
        .then(() => undefined)
        .catch((err: unknown) => this.guard.deps.log.warn("orphan scan failed; retrying", { error: (err as Error).message }))
        .finally(() => {
          this.running = undefined;
          this.schedule();
        });
    }, Math.min(this.opts.scanMs, claimIdleMs / 3));
    this.timer.unref();
  }

  /** One pass: keep this router's intents fresh, take over silent routers' ones, finish those whose hold expired. */
  async scan(): Promise<{ finished: number }> {
    const { log } = this.guard.deps;
    await this.journal.touch(true);
    const { nowMs, claimed } = await this.journal.claimSilent();
    for (const c of claimed) {
      if (this.journal.isMine(c.id) || this.waiting.has(c.id)) continue;
      let intent: PaidIntent;
      let progress: IntentProgress = {};
      try {
        intent = JSON.parse(c.intent) as PaidIntent;
        if (typeof intent.requestId !== "string" || !Number.isSafeInteger(intent.tenantId) || !/^\d+$/.test(intent.holdMicro)) throw new Error("not an intent");
      } catch (err) {
        log.error("unreadable intent dropped from the journal", { id: c.id, error: (err as Error).message });
        await this.journal.retire(c.id);
        continue;
      }
      try {
        if (c.progress) progress = JSON.parse(c.progress) as IntentProgress;
      } catch {
        progress = {};
      }
      this.waiting.set(c.id, { claimed: c, intent, progress });
      log.info("paid attempt of a silent router taken over", { requestId: intent.requestId, backend: intent.backend, openedAtMs: c.openedAtMs });
    }
    // Dead routers' empty consumers, now and then (restarts leave one each).
    const claimIdleMs = this.guard.deps.billing.ledgerClaimIdleMs;
    if (Date.now() - this.lastPrune >= PRUNE_EVERY_MS) {
      this.lastPrune = Date.now();
      const gone = await this.journal.pruneConsumers(Math.max(PRUNE_EVERY_MS, 4 * claimIdleMs)).catch(() => 0);
      if (gone > 0) log.info("dead routers' empty intent consumers removed", { consumers: gone });
    }
    const due = [...this.waiting.values()].filter((w) => nowMs >= w.claimed.openedAtMs + w.intent.holdTtlMs);
    let finished = 0;
    let next = 0;
    const worker = async () => {
      while (next < due.length && !this.closed) {
        const w = due[next++]!;
        try {
          if (await this.finish(w)) finished++;
        } catch (err) {
          // Left waiting: tried again on the next pass.
          log.warn("orphaned paid attempt not finished yet; retrying", { requestId: w.intent.requestId, error: (err as Error).message });
        }
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.opts.concurrency, due.length) }, worker));
    return { finished };
  }

  /** Finishes one orphan; false when another router finished it first. */
  private async finish(w: Waiting): Promise<boolean> {
    const { deps } = this.guard;
    const { intent, progress, claimed } = w;
    const lastUsage = decodeProgressUsage(progress.usage);
    let cost: CrashCost | undefined;
    const lookup = this.lookups[intent.backend];
    if (lookup) {
      const price = deps.prices.price(intent.backend, intent.model);
      try {
        cost = await lookup.cost({
          model: intent.model,
          ...(progress.generationId ? { generationId: progress.generationId } : {}),
          ...(lastUsage ? { usage: lastUsage } : {}),
          ...(price ? { price } : {}),
          signal: AbortSignal.timeout(this.opts.lookupTimeoutMs ?? 10_000),
        });
      } catch (err) {
        deps.log.warn("cost lookup failed; the orphan is charged at its hold", { requestId: intent.requestId, backend: intent.backend, error: (err as Error).message });
      }
    }
    const usage: Usage = cost?.usage ?? lastUsage ?? { prompt: 0, completion: 0, cached: 0, cacheWrite: 0 };
    // A looked-up cost is this attempt's generation alone: the attempts failed over from are owed too.
    const abandonedMicro = typeof intent.abandonedMicro === "string" && /^\d+$/.test(intent.abandonedMicro) ? BigInt(intent.abandonedMicro) : 0n;
    // Each on a row of its own, under its backend (as the live settle books
    // them), when the intent lists them; an intent from before the list
    // has only their sum, added to this row as it was then.
    const attempts = abandonedOf(intent) ?? [];
    let listed = 0n;
    for (const a of attempts) listed += BigInt(a.micro);
    const apart = attempts.length > 0 && listed === abandonedMicro;
    if (!apart) attempts.length = 0;
    const carried = apart ? 0n : abandonedMicro;
    // The hold covers this attempt's worst case and what the others owe: this row keeps the former.
    const micro = cost ? cost.micro + carried : BigInt(intent.holdMicro) - (apart ? listed : 0n);
    const now = Date.now();
    const row: NewLedgerRow = {
      requestId: intent.requestId,
      tenantId: intent.tenantId,
      keyId: intent.keyId,
      backend: intent.backend,
      model: intent.model,
      worker: null,
      promptTokens: usage.prompt,
      completionTokens: usage.completion,
      cachedTokens: Math.min(usage.cached, usage.prompt),
      cacheWriteTokens: Math.min(usage.cacheWrite, usage.prompt),
      cacheWrite1hTokens: Math.min(usage.cacheWrite1h ?? 0, usage.cacheWrite, usage.prompt),
      costMicro: micro,
      // A looked-up cost with an abandoned attempt's estimate on top (an
      // intent from before the list) is no longer the provider's figure for
      // the invoice line: an estimate. The hold stays the hold.
      costSource: cost ? (carried > 0n ? "estimate" : cost.source) : "hold_on_crash",
      // The client saw its connection drop with the router.
      status: "error",
      startedAt: new Date(intent.startedAtMs),
      firstTokenAt: progress.firstTokenAtMs !== undefined ? new Date(progress.firstTokenAtMs) : null,
      // When it was finished here: its real end is not known.
      finishedAt: new Date(now),
      ttftMs: progress.firstTokenAtMs !== undefined ? Math.max(0, Math.round(progress.firstTokenAtMs - intent.startedAtMs)) : null,
      durationMs: Math.max(0, Math.round(now - intent.startedAtMs)),
      providerGenerationId: cost?.generationId ?? progress.generationId ?? null,
    };
    const attemptRows = attempts.map((a) => abandonedAttemptRow(intent.requestId, intent.tenantId, intent.keyId, intent.startedAtMs, a));
    const total = attemptRows.reduce((sum, r) => sum + (r.costMicro as bigint), micro);
    const won = await this.journal.finish(claimed.id, encodeLedgerRow(row), attemptRows.map(encodeLedgerRow));
    this.waiting.delete(claimed.id);
    if (!won) {
      deps.log.info("orphaned paid attempt already finished elsewhere", { requestId: intent.requestId });
      return false;
    }
    deps.log.warn("paid attempt of a dead router finished", { requestId: intent.requestId, backend: intent.backend, costSource: row.costSource, costMicro: micro.toString(), abandonedAttempts: attemptRows.length, totalMicro: total.toString(), holdMicro: intent.holdMicro });
    let spent: bigint;
    try {
      // Once, with all the request cost (its row and its abandoned attempts' rows).
      spent = (await deps.store.settle({ tenantId: intent.tenantId, day: intent.day, requestId: intent.requestId, actualMicro: total })).spentMicro;
    } catch (err) {
      deps.metrics.billingFailures.inc({ step: "settle" });
      deps.log.warn("budget settle of a finished orphan failed; reconcile restores the spend from the ledger", { requestId: intent.requestId, error: (err as Error).message });
      return true;
    }
    try {
      const budget = await deps.budgets.budgetOf(intent.tenantId);
      if (budget) await this.guard.checkThresholds(intent.tenantId, intent.day, budget, spent);
    } catch {
      // alerts are best effort here; the next settle checks again
    }
    return true;
  }

  /** Orphans taken over and not yet due (tests, the admin page). */
  get pending(): number {
    return this.waiting.size;
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
    await this.journal.close();
  }
}
