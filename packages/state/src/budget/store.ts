// BudgetStore: per-tenant daily money, reserve-then-settle. Before a paid
// call the router holds the worst case against the tenant's day; afterwards
// it writes the ledger row and settles the hold into spend. Real twin: Lua
// scripts in Redis (packages/state/lua/budget_*.lua); in-process twin for
// `switchyard up`. Both pass test/contract/budget.contract.ts.
//
// Money is bigint micro-cents (10⁻⁶ cent). Amounts must stay below 2^53
// (≈ $90M per tenant-day), the range in which Redis' Lua compares exactly.

export interface BudgetDayRef {
  tenantId: number;
  /** The tenant's day, YYYY-MM-DD in its budget time zone (see budgetDay()). */
  day: string;
}

export interface ReserveInput extends BudgetDayRef {
  requestId: string;
  /** Worst-case cost of the request. */
  amountMicro: bigint;
  /** The tenant's daily limit. */
  limitMicro: bigint;
  /** The hold disappears by itself after this long (a crashed router frees its money). */
  ttlMs: number;
  /**
   * Hold nothing on a day whose counters were never rebuilt from the ledger
   * (`checked` false): answer `day_unchecked` instead. A day that is new to
   * the store reads as unspent whether it is a new day or one whose
   * counters were lost (Redis back empty, a key evicted or deleted, a
   * restarted in-process store); only the ledger tells them apart.
   */
  requireChecked?: boolean;
}

export type ReserveResult =
  | { ok: true; spentMicro: bigint; heldMicro: bigint }
  | { ok: false; reason: "budget_exhausted"; availableMicro: bigint; spentMicro: bigint; heldMicro: bigint }
  | { ok: false; reason: "day_unchecked"; spentMicro: bigint; heldMicro: bigint };

export interface SettleInput extends BudgetDayRef {
  requestId: string;
  /** What the request actually cost (0 is allowed). */
  actualMicro: bigint;
}

export interface SettleResult {
  ok: true;
  /** True when this request's spend had already been counted: nothing changed. */
  alreadySettled: boolean;
  spentMicro: bigint;
  heldMicro: bigint;
}

export interface ReleaseInput extends BudgetDayRef {
  requestId: string;
}

export interface ReleaseResult {
  ok: true;
  /** False when there was no live hold (never reserved, expired, settled or released). */
  released: boolean;
  spentMicro: bigint;
  heldMicro: bigint;
}

export interface BudgetSnapshot {
  spentMicro: bigint;
  heldMicro: bigint;
  /** Grows with every change; rebuild({ ifVersion }) refuses to overwrite a newer state. */
  version: number;
  /** The counters were rebuilt from the ledger since the store last lost them (see ReserveInput.requireChecked). */
  checked: boolean;
}

export interface BudgetHold {
  requestId: string;
  amountMicro: bigint;
  /** In the store's clock (Redis time for the Redis twin). */
  expiresAtMs: number;
}

export interface RebuildInput extends BudgetDayRef {
  /** The day's spend as the ledger has it. Replaces the counter. */
  spentMicro: bigint;
  /** The live holds; they replace the current ones (expired ones are dropped). */
  holds: readonly BudgetHold[];
  /** Requests whose ledger row exists: a late settle of one of them is not counted again. */
  settledRequestIds?: readonly string[];
  /** The snapshot version the caller read; when the state moved on since, nothing is written. */
  ifVersion?: number;
}

export type RebuildResult = { ok: true; version: number } | { ok: false; reason: "version_conflict"; version: number };

export interface BudgetStore {
  /** Hold amountMicro only if spent + held + amountMicro ≤ limitMicro. A second reserve for the same request replaces its hold. */
  reserve(input: ReserveInput): Promise<ReserveResult>;
  /** Turn the request's hold into actual spend, once. Without a live hold the spend is still counted once. */
  settle(input: SettleInput): Promise<SettleResult>;
  /** Drop the request's hold without spending. */
  release(input: ReleaseInput): Promise<ReleaseResult>;
  snapshot(tenantId: number, day: string): Promise<BudgetSnapshot>;
  /** The live holds of a tenant's day (for reconcile). */
  holds(tenantId: number, day: string): Promise<BudgetHold[]>;
  /** Reconcile: replace the day's counters from the ledger plus live holds (a versioned set, never additive); the day is `checked` after. */
  rebuild(input: RebuildInput): Promise<RebuildResult>;
}

/** Largest amount a store accepts: Redis' Lua compares doubles, exact below 2^53. */
export const MAX_BUDGET_MICRO = BigInt(Number.MAX_SAFE_INTEGER);

const dayPattern = /^\d{4}-\d{2}-\d{2}$/;

export function checkDayRef(ref: BudgetDayRef): void {
  if (!Number.isSafeInteger(ref.tenantId)) throw new RangeError(`tenantId must be an integer, got ${ref.tenantId}`);
  if (!dayPattern.test(ref.day)) throw new RangeError(`day must be YYYY-MM-DD, got ${JSON.stringify(ref.day)}`);
}

export function checkMicro(what: string, v: bigint): void {
  if (typeof v !== "bigint" || v < 0n || v > MAX_BUDGET_MICRO) throw new RangeError(`${what} must be a bigint in [0, 2^53), got ${String(v)}`);
}

export function checkRequestId(id: string): void {
  if (typeof id !== "string" || id.length === 0 || id.length > 200) throw new RangeError("requestId must be a non-empty string of at most 200 characters");
}

export function checkTtl(ttlMs: number): void {
  if (!Number.isSafeInteger(ttlMs) || ttlMs <= 0) throw new RangeError(`ttlMs must be a positive integer, got ${ttlMs}`);
}
