// Reconcile: rebuild a tenant-day's live budget counters from the ledger.
// What `switchyard budgets reconcile` runs when Redis drifted (a settle that
// failed, a lost key, a hand edit).
import { listBudgets, tenantDaySpend, type Db } from "@switchyard/db";
import { budgetDay, type BudgetHold, type BudgetStore } from "@switchyard/state";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";

export interface ReconcileOptions {
  /** Reads-and-rebuilds tried before giving up on a busy day (default 5). */
  maxAttempts?: number;
  /**
   * Brings every ledger row still in the Redis stream into Postgres. Run
   * after each snapshot, before the ledger is read: a settle that landed
   * before the snapshot (so the version does not move) may have its row in
   * the stream still, a flush interval behind, and the sum would miss it.
   */
  drainLedger?: () => Promise<unknown>;
}

export interface ReconcileResult {
  /** The counters as rebuilt. */
  spentMicro: bigint;
  heldMicro: bigint;
  /** Live holds kept (held requests with no ledger row yet). */
  holds: number;
  /** The store's version after the rebuild. */
  version: number;
  attempts: number;
  /** The counters as they were read, before the rebuild. */
  before: { spentMicro: bigint; heldMicro: bigint };
}

export class ReconcileConflictError extends Error {
  override name = "ReconcileConflictError";
}

/**
 * Sets the day's counters to what they should be: spent = the ledger's sum,
 * held = the live holds whose request has no ledger row yet. Held requests
 * that do have a row are dropped from the holds and marked settled, so their
 * late settle is not counted on top of the ledger.
 *
 * The rebuild is a versioned SET, never an increment: it carries the version
 * read before the ledger was queried, and the store refuses it if anything
 * (a reserve, a settle, a release) changed the day since. Then everything is
 * read again. So a settle racing with reconcile is never lost or counted
 * twice: either it landed before our read (and its ledger row, written
 * first and drained into Postgres by `drainLedger` after the snapshot, is
 * in our sum) or it bumps the version and we start over.
 */
export async function reconcileBudgetDay(db: Db, store: BudgetStore, tenantId: number, day: string, opts: ReconcileOptions = {}): Promise<ReconcileResult> {
  return (await rebuildDay(db, store, tenantId, day, opts, false))!;
}

/**
 * What the router runs when a reserve found the day `day_unchecked` (a new
 * day, or counters the store lost): reconcileBudgetDay, unless the day is
 * checked by the time it is read — another router (or request) rebuilt it
 * first, and rebuilding again would only move the version under the
 * reserves already admitted. Returns the rebuild, or undefined when it was
 * checked already.
 */
export function checkBudgetDay(db: Db, store: BudgetStore, tenantId: number, day: string, opts: ReconcileOptions = {}): Promise<ReconcileResult | undefined> {
  return rebuildDay(db, store, tenantId, day, opts, true);
}

/** Reads and rebuilds until a rebuild lands (or, `unlessChecked`, the day reads as checked: undefined). */
async function rebuildDay(db: Db, store: BudgetStore, tenantId: number, day: string, opts: ReconcileOptions, unlessChecked: boolean): Promise<ReconcileResult | undefined> {
  const maxAttempts = opts.maxAttempts ?? 5;
  if (!Number.isSafeInteger(maxAttempts) || maxAttempts < 1) throw new RangeError(`maxAttempts must be a positive integer, got ${maxAttempts}`);
  let lastVersion = 0;
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    // Snapshot first: its version guards everything read after it.
    const snap = await store.snapshot(tenantId, day);
    if (unlessChecked && snap.checked) return undefined;
    await opts.drainLedger?.();
    const live = await store.holds(tenantId, day);
    const ledger = await tenantDaySpend(
      db,
      tenantId,
      day,
      live.map((h) => h.requestId),
    );
    const ledgered = new Set(ledger.ledgeredRequestIds);
    const holds: BudgetHold[] = live.filter((h) => !ledgered.has(h.requestId));
    const r = await store.rebuild({
      tenantId,
      day,
      spentMicro: ledger.spentMicro,
      holds,
      settledRequestIds: [...ledgered],
      ifVersion: snap.version,
    });
    if (r.ok) {
      return {
        spentMicro: ledger.spentMicro,
        heldMicro: holds.reduce((sum, h) => sum + h.amountMicro, 0n),
        holds: holds.length,
        version: r.version,
        attempts: attempt,
        before: { spentMicro: snap.spentMicro, heldMicro: snap.heldMicro },
      };
    }
    lastVersion = r.version;
  }
  throw new ReconcileConflictError(
    `budget of tenant ${tenantId} on ${day} kept changing during reconcile (${maxAttempts} attempts, last version ${lastVersion}); run it again`,
  );
}

export interface TenantReconcileResult extends ReconcileResult {
  day: string;
}

/**
 * Reconciles several days of one tenant (default: today in its zone — and
 * yesterday is worth passing just after midnight, when holds taken late on
 * the previous day may still be settling).
 */
export async function reconcileTenant(
  db: Db,
  store: BudgetStore,
  tenantId: number,
  timeZone: string,
  days: readonly string[] = [budgetDay(Date.now(), timeZone)],
  opts: ReconcileOptions = {},
): Promise<TenantReconcileResult[]> {
  const out: TenantReconcileResult[] = [];
  for (const day of days) out.push({ day, ...(await reconcileBudgetDay(db, store, tenantId, day, opts)) });
  return out;
}

export interface AllBudgetsResult {
  /** Tenant-days rebuilt. */
  reconciled: number;
  /** Tenant-days that could not be (each with why), after every round. */
  failed: Array<{ tenantId: number; day: string; error: string }>;
}

export interface AllBudgetsOptions extends ReconcileOptions {
  /** Rounds over the days that failed (another router rebuilding the same day, a busy day's settles): default 3. */
  rounds?: number;
  /** Pause before each round after the first, ms (default 500). */
  pauseMs?: number;
}

/**
 * Rebuilds today's counters (in each tenant's zone) of every tenant with a
 * budget: what a router runs by itself when Redis came back empty (the
 * registry's epoch changed), since a day whose counters are gone would read
 * as unspent and admit a whole day's budget again. Every router does it at
 * the same moment, and a busy day's settles move its version on: a day that
 * kept changing is tried again in a later round.
 */
export async function reconcileAllBudgets(db: Db, store: BudgetStore, now = Date.now(), opts: AllBudgetsOptions = {}): Promise<AllBudgetsResult> {
  const rounds = opts.rounds ?? 3;
  let todo = (await listBudgets(db)).map((b) => ({ tenantId: b.tenantId, day: budgetDay(now, b.timeZone) }));
  const out: AllBudgetsResult = { reconciled: 0, failed: [] };
  for (let round = 1; round <= rounds && todo.length > 0; round++) {
    if (round > 1) await new Promise((r) => setTimeout(r, opts.pauseMs ?? 500));
    out.failed = [];
    for (const t of todo) {
      try {
        await reconcileBudgetDay(db, store, t.tenantId, t.day, opts);
        out.reconciled++;
      } catch (err) {
        out.failed.push({ ...t, error: (err as Error).message });
      }
    }
    todo = out.failed.map(({ tenantId, day }) => ({ tenantId, day }));
  }
  return out;
}

/**
 * reconcileAllBudgets when the registry's epoch changed (the router's own
 * hook), logged and counted; never throws: what it could not rebuild it
 * says to rebuild by hand.
 */
export async function rebuildBudgetsAfterLoss(db: Db, store: BudgetStore, out: { log: Logger; metrics: RouterMetrics }): Promise<void> {
  const t0 = Date.now();
  try {
    const r = await reconcileAllBudgets(db, store);
    const fields = { reconciled: r.reconciled, failed: r.failed.length, ms: Date.now() - t0 };
    if (r.failed.length === 0) out.log.info("budgets rebuilt from the ledger after Redis lost its data", fields);
    else out.log.warn("budgets rebuilt from the ledger after Redis lost its data, some failed: run switchyard budgets reconcile", { ...fields, errors: r.failed.slice(0, 5) });
    out.metrics.budgetRebuilds.inc({ outcome: "rebuilt" }, r.reconciled);
    if (r.failed.length > 0) out.metrics.budgetRebuilds.inc({ outcome: "failed" }, r.failed.length);
  } catch (err) {
    out.log.warn("budgets could not be rebuilt after Redis lost its data: run switchyard budgets reconcile", { error: (err as Error).message });
    // Which tenant-days it would have rebuilt is unknown: the failed pass counts once.
    out.metrics.budgetRebuilds.inc({ outcome: "failed" });
  }
}
