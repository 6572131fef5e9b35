// Redis BudgetStore: each operation is one Lua script over the tenant-day's
// four keys, `${prefix}{tenant:<id>}:budget:<day>:{state,holds,expiry,settled}`.
// The hash tag puts one tenant's keys in one Cluster slot, so every script
// is atomic; hold expiry uses Redis' own clock.
import type { RedisLike } from "../redis.ts";
import { budgetCommands, type BudgetCommands } from "./scripts.ts";
import {
  checkDayRef,
  checkMicro,
  checkRequestId,
  checkTtl,
  type BudgetDayRef,
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

export function budgetKeys(prefix: string, tenantId: number, day: string): [state: string, holds: string, expiry: string, settled: string] {
  const base = `${prefix}{tenant:${tenantId}}:budget:${day}`;
  return [`${base}:state`, `${base}:holds`, `${base}:expiry`, `${base}:settled`];
}

export interface RedisBudgetStoreOptions {
  /** A tenant's day is forgotten this long after its last write (default 3 days). */
  keyTtlMs?: number;
}

type Str = string | number | Buffer;
const big = (v: unknown): bigint => BigInt(String(v as Str));

export class RedisBudgetStore implements BudgetStore {
  private readonly redis: RedisLike & BudgetCommands;
  private readonly keyTtl: string;

  constructor(
    redis: RedisLike,
    private readonly prefix: string,
    opts: RedisBudgetStoreOptions = {},
  ) {
    this.redis = budgetCommands(redis);
    this.keyTtl = String(opts.keyTtlMs ?? 3 * 24 * 3600_000);
  }

  async reserve(input: ReserveInput): Promise<ReserveResult> {
    checkDayRef(input);
    checkRequestId(input.requestId);
    checkMicro("amountMicro", input.amountMicro);
    checkMicro("limitMicro", input.limitMicro);
    checkTtl(input.ttlMs);
    const [ok, spent, held, previous] = (await this.redis.syBudget_reserve(
      ...this.keys(input),
      this.keyTtl,
      input.requestId,
      input.amountMicro.toString(),
      input.limitMicro.toString(),
      String(input.ttlMs),
      input.requireChecked ? "1" : "0",
    )) as unknown[];
    const spentMicro = big(spent);
    const heldMicro = big(held);
    if (Number(ok) === 1) return { ok: true, spentMicro, heldMicro };
    if (Number(ok) === -1) return { ok: false, reason: "day_unchecked", spentMicro, heldMicro };
    const available = input.limitMicro - spentMicro - heldMicro + big(previous);
    return { ok: false, reason: "budget_exhausted", availableMicro: available > 0n ? available : 0n, spentMicro, heldMicro };
  }

  async settle(input: SettleInput): Promise<SettleResult> {
    checkDayRef(input);
    checkRequestId(input.requestId);
    checkMicro("actualMicro", input.actualMicro);
    const [counted, spent, held] = (await this.redis.syBudget_settle(
      ...this.keys(input),
      this.keyTtl,
      input.requestId,
      input.actualMicro.toString(),
    )) as unknown[];
    return { ok: true, alreadySettled: Number(counted) !== 1, spentMicro: big(spent), heldMicro: big(held) };
  }

  async release(input: ReleaseInput): Promise<ReleaseResult> {
    checkDayRef(input);
    checkRequestId(input.requestId);
    const [released, spent, held] = (await this.redis.syBudget_release(...this.keys(input), this.keyTtl, input.requestId)) as unknown[];
    return { ok: true, released: Number(released) === 1, spentMicro: big(spent), heldMicro: big(held) };
  }

  async snapshot(tenantId: number, day: string): Promise<BudgetSnapshot> {
    checkDayRef({ tenantId, day });
    const [spent, held, version, checked] = (await this.redis.syBudget_snapshot(...this.keys({ tenantId, day }), this.keyTtl)) as unknown[];
    return { spentMicro: big(spent), heldMicro: big(held), version: Number(version), checked: Number(checked) === 1 };
  }

  async holds(tenantId: number, day: string): Promise<BudgetHold[]> {
    checkDayRef({ tenantId, day });
    const flat = (await this.redis.syBudget_holds(...this.keys({ tenantId, day }), this.keyTtl)) as unknown[];
    const out: BudgetHold[] = [];
    for (let i = 0; i + 2 < flat.length; i += 3) {
      out.push({ requestId: String(flat[i]), amountMicro: big(flat[i + 1]), expiresAtMs: Number(flat[i + 2]) });
    }
    return out;
  }

  async rebuild(input: RebuildInput): Promise<RebuildResult> {
    checkDayRef(input);
    checkMicro("spentMicro", input.spentMicro);
    const args: string[] = [this.keyTtl, input.spentMicro.toString(), input.ifVersion === undefined ? "" : String(input.ifVersion), String(input.holds.length)];
    for (const h of input.holds) {
      checkRequestId(h.requestId);
      checkMicro("hold amountMicro", h.amountMicro);
      if (!Number.isSafeInteger(h.expiresAtMs)) throw new RangeError("hold expiresAtMs must be an integer");
      args.push(h.requestId, h.amountMicro.toString(), String(h.expiresAtMs));
    }
    for (const id of input.settledRequestIds ?? []) {
      checkRequestId(id);
      args.push(id);
    }
    const [ok, version] = (await this.redis.syBudget_rebuild(...this.keys(input), ...args)) as unknown[];
    return Number(ok) === 1 ? { ok: true, version: Number(version) } : { ok: false, reason: "version_conflict", version: Number(version) };
  }

  private keys(ref: BudgetDayRef): string[] {
    return budgetKeys(this.prefix, ref.tenantId, ref.day);
  }
}
