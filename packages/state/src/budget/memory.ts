// In-process BudgetStore for single-machine mode: the same semantics as the
// Redis scripts, on Maps. Each method runs to completion without awaiting, so
// concurrent calls are as atomic here as a Lua script is in Redis.
import { systemClock, type Clock } from "../clock.ts";
import {
  checkDayRef,
  checkMicro,
  checkRequestId,
  checkTtl,
  type BudgetHold,
  type BudgetSnapshot,
  type BudgetStore,
  type RebuildInput,
  type RebuildResult,
  type ReleaseInput,
  type ReleaseResult,
  type ReserveInput,
  type ReserveResult,
  type SettleInput,
  type SettleResult,
} from "./store.ts";

interface DayState {
  spent: bigint;
  held: bigint;
  version: number;
  /** Rebuilt from the ledger (budget_rebuild.lua's `checked`). */
  checked: boolean;
  holds: Map<string, { amount: bigint; expiresAt: number }>;
  settled: Set<string>;
  touchedAt: number;
}

export interface MemoryBudgetStoreOptions {
  /** A tenant's day is forgotten this long after its last write (as the Redis keys expire). */
  keyTtlMs?: number;
}

export class MemoryBudgetStore implements BudgetStore {
  private readonly days = new Map<string, DayState>();
  private readonly keyTtlMs: number;
  private lastSweep = 0;

  constructor(
    private readonly clock: Clock = systemClock,
    opts: MemoryBudgetStoreOptions = {},
  ) {
    this.keyTtlMs = opts.keyTtlMs ?? 3 * 24 * 3600_000;
  }

  async reserve(input: ReserveInput): Promise<ReserveResult> {
    checkDayRef(input);
    checkRequestId(input.requestId);
    checkMicro("amountMicro", input.amountMicro);
    checkMicro("limitMicro", input.limitMicro);
    checkTtl(input.ttlMs);
    const now = this.clock.now();
    const s = this.day(input, now);
    if (input.requireChecked && !s.checked) return { ok: false, reason: "day_unchecked", spentMicro: s.spent, heldMicro: s.held };
    const previous = s.holds.get(input.requestId)?.amount ?? 0n;
    const others = s.held - previous;
    if (s.spent + others + input.amountMicro > input.limitMicro) {
      const available = input.limitMicro - s.spent - others;
      return { ok: false, reason: "budget_exhausted", availableMicro: available > 0n ? available : 0n, spentMicro: s.spent, heldMicro: s.held };
    }
    s.holds.set(input.requestId, { amount: input.amountMicro, expiresAt: now + input.ttlMs });
    s.held = others + input.amountMicro;
    this.changed(s, now);
    return { ok: true, spentMicro: s.spent, heldMicro: s.held };
  }

  async settle(input: SettleInput): Promise<SettleResult> {
    checkDayRef(input);
    checkRequestId(input.requestId);
    checkMicro("actualMicro", input.actualMicro);
    const now = this.clock.now();
    const s = this.day(input, now);
    if (s.settled.has(input.requestId)) return { ok: true, alreadySettled: true, spentMicro: s.spent, heldMicro: s.held };
    this.dropHold(s, input.requestId);
    s.spent += input.actualMicro;
    s.settled.add(input.requestId);
    this.changed(s, now);
    return { ok: true, alreadySettled: false, spentMicro: s.spent, heldMicro: s.held };
  }

  async release(input: ReleaseInput): Promise<ReleaseResult> {
    checkDayRef(input);
    checkRequestId(input.requestId);
    const now = this.clock.now();
    const s = this.day(input, now);
    const released = this.dropHold(s, input.requestId);
    if (released) this.changed(s, now);
    return { ok: true, released, spentMicro: s.spent, heldMicro: s.held };
  }

  async snapshot(tenantId: number, day: string): Promise<BudgetSnapshot> {
    checkDayRef({ tenantId, day });
    const s = this.day({ tenantId, day }, this.clock.now());
    return { spentMicro: s.spent, heldMicro: s.held, version: s.version, checked: s.checked };
  }

  async holds(tenantId: number, day: string): Promise<BudgetHold[]> {
    checkDayRef({ tenantId, day });
    const s = this.day({ tenantId, day }, this.clock.now());
    return [...s.holds]
      .map(([requestId, h]) => ({ requestId, amountMicro: h.amount, expiresAtMs: h.expiresAt }))
      .sort((a, b) => a.expiresAtMs - b.expiresAtMs || (a.requestId < b.requestId ? -1 : 1));
  }

  async rebuild(input: RebuildInput): Promise<RebuildResult> {
    checkDayRef(input);
    checkMicro("spentMicro", input.spentMicro);
    for (const h of input.holds) {
      checkRequestId(h.requestId);
      checkMicro("hold amountMicro", h.amountMicro);
    }
    const now = this.clock.now();
    const s = this.day(input, now);
    if (input.ifVersion !== undefined && input.ifVersion !== s.version) return { ok: false, reason: "version_conflict", version: s.version };
    for (const id of input.settledRequestIds ?? []) s.settled.add(id);
    s.holds.clear();
    s.held = 0n;
    s.spent = input.spentMicro;
    s.checked = true;
    for (const h of input.holds) {
      if (h.expiresAtMs <= now || s.settled.has(h.requestId)) continue;
      this.dropHold(s, h.requestId);
      s.holds.set(h.requestId, { amount: h.amountMicro, expiresAt: h.expiresAtMs });
      s.held += h.amountMicro;
    }
    this.changed(s, now);
    return { ok: true, version: s.version };
  }

  /** The day's state with expired holds already dropped. */
  private day(ref: { tenantId: number; day: string }, now: number): DayState {
    this.sweep(now);
    const key = `${ref.tenantId}|${ref.day}`;
    let s = this.days.get(key);
    if (!s) {
      s = { spent: 0n, held: 0n, version: 0, checked: false, holds: new Map(), settled: new Set(), touchedAt: now };
      this.days.set(key, s);
    }
    for (const [id, h] of s.holds) {
      if (h.expiresAt <= now) this.dropHold(s, id);
    }
    return s;
  }

  private dropHold(s: DayState, requestId: string): boolean {
    const h = s.holds.get(requestId);
    if (!h) return false;
    s.holds.delete(requestId);
    s.held -= h.amount;
    return true;
  }

  private changed(s: DayState, now: number): void {
    s.version += 1;
    s.touchedAt = now;
  }

  /** Forget days untouched for keyTtlMs, at most once a minute. */
  private sweep(now: number): void {
    if (now - this.lastSweep < 60_000) return;
    this.lastSweep = now;
    for (const [key, s] of this.days) {
      if (now - s.touchedAt > this.keyTtlMs) this.days.delete(key);
    }
  }
}
