// In-process LeaseStore for single-machine mode: the same semantics as the
// Redis scripts, on Maps. Each method runs to completion without awaiting, so
// concurrent calls are as atomic here as a Lua script is in Redis.
import { systemClock, type Clock } from "../clock.ts";
import {
  DEFAULT_FENCE_IDLE_MS,
  checkAcquire,
  checkFenceIdle,
  checkDuration,
  checkLeaseId,
  checkTenant,
  type LeaseAcquireInput,
  type LeaseAcquireResult,
  type LeaseExtendInput,
  type LeaseExtendResult,
  type LeaseGetResult,
  type LeaseHolderInput,
  type Lease,
  type LeaseList,
  type LeaseStore,
  type LeaseReleaseResult,
} from "./store.ts";

export class MemoryLeaseStore implements LeaseStore {
  private readonly leases = new Map<string, Lease>();
  /** worker id → id of its lease */
  private readonly byWorker = new Map<string, string>();
  /** worker id → highest token granted on it */
  private readonly fence = new Map<string, number>();
  /** worker id → expiry of the last lease granted or extended on it (its fence field goes fenceIdleMs after) */
  private readonly fencedUntil = new Map<string, number>();
  /** No fence field is due to be forgotten before this: list() skips the scan until then. */
  private nextFencePruneMs = Infinity;
  private readonly fenceIdleMs: number;

  constructor(
    private readonly clock: Clock = systemClock,
    opts: { fenceIdleMs?: number } = {},
  ) {
    this.fenceIdleMs = checkFenceIdle(opts.fenceIdleMs ?? DEFAULT_FENCE_IDLE_MS);
  }

  async acquire(input: LeaseAcquireInput): Promise<LeaseAcquireResult> {
    checkAcquire(input);
    const now = this.clock.now();
    const expired = this.prune(now);
    const current = this.byWorker.get(input.workerId);
    const holder = current ? this.leases.get(current) : undefined;
    // This very grant asked again (a command resent after a lost reply): answered as granted.
    if (holder && holder.id === input.leaseId && holder.tenantId === input.tenantId && holder.fencingToken === input.fencingToken) return { ok: true, lease: { ...holder }, nowMs: now, expired };
    if (holder) return { ok: false, reason: "held", holderExpiresAtMs: holder.expiresAtMs, nowMs: now, expired };
    const highest = this.fence.get(input.workerId);
    if (highest !== undefined && input.fencingToken <= highest) return { ok: false, reason: "stale_token", highestToken: highest, nowMs: now, expired };
    if (input.maxPerTenant) {
      let held = 0;
      for (const l of this.leases.values()) if (l.tenantId === input.tenantId) held++;
      if (held >= input.maxPerTenant) return { ok: false, reason: "tenant_limit", held, nowMs: now, expired };
    }
    if (this.leases.has(input.leaseId)) throw new Error("lease id already in use");
    const lease: Lease = {
      id: input.leaseId,
      workerId: input.workerId,
      tenantId: input.tenantId,
      fencingToken: input.fencingToken,
      grantedAtMs: now,
      expiresAtMs: now + input.durationMs,
    };
    this.leases.set(lease.id, lease);
    this.byWorker.set(lease.workerId, lease.id);
    this.fence.set(lease.workerId, lease.fencingToken);
    this.fenceUntil(lease);
    return { ok: true, lease: { ...lease }, nowMs: now, expired };
  }

  async get(leaseId: string): Promise<LeaseGetResult> {
    checkLeaseId(leaseId);
    const now = this.clock.now();
    const expired = this.prune(now);
    const lease = this.leases.get(leaseId);
    return { lease: lease ? { ...lease } : undefined, nowMs: now, expired };
  }

  async extend(input: LeaseExtendInput): Promise<LeaseExtendResult> {
    checkLeaseId(input.leaseId);
    checkTenant(input.tenantId);
    checkDuration(input.durationMs);
    const now = this.clock.now();
    const expired = this.prune(now);
    const lease = this.leases.get(input.leaseId);
    if (!lease || lease.tenantId !== input.tenantId) return { ok: false, reason: "not_found", nowMs: now, expired };
    lease.expiresAtMs = Math.max(lease.expiresAtMs, now + input.durationMs);
    this.fenceUntil(lease);
    return { ok: true, lease: { ...lease }, nowMs: now, expired };
  }

  async release(input: LeaseHolderInput): Promise<LeaseReleaseResult> {
    checkLeaseId(input.leaseId);
    checkTenant(input.tenantId);
    const now = this.clock.now();
    const expired = this.prune(now);
    const lease = this.leases.get(input.leaseId);
    if (!lease || lease.tenantId !== input.tenantId) return { ok: false, reason: "not_found", nowMs: now, expired };
    this.drop(lease);
    return { ok: true, lease: { ...lease }, nowMs: now, expired };
  }

  async list(): Promise<LeaseList> {
    const now = this.clock.now();
    const expired = this.prune(now);
    this.pruneFence(now);
    const leases = [...this.leases.values()].map((l) => ({ ...l })).sort((a, b) => a.workerId.localeCompare(b.workerId));
    return { leases, nowMs: now, expired };
  }

  private fenceUntil(lease: Lease): void {
    this.fencedUntil.set(lease.workerId, lease.expiresAtMs);
    this.nextFencePruneMs = Math.min(this.nextFencePruneMs, lease.expiresAtMs + this.fenceIdleMs);
  }

  /** Forgets the fence of workers whose last lease ended more than fenceIdleMs ago (as lease_list.lua does). */
  private pruneFence(now: number): void {
    if (now < this.nextFencePruneMs) return;
    this.nextFencePruneMs = Infinity;
    for (const [worker, until] of this.fencedUntil) {
      const current = this.byWorker.get(worker);
      if (until + this.fenceIdleMs <= now && !(current && this.leases.has(current))) {
        this.fence.delete(worker);
        this.fencedUntil.delete(worker);
      } else {
        this.nextFencePruneMs = Math.min(this.nextFencePruneMs, Math.max(until, now) + this.fenceIdleMs);
      }
    }
  }

  private drop(lease: Lease): void {
    this.leases.delete(lease.id);
    if (this.byWorker.get(lease.workerId) === lease.id) this.byWorker.delete(lease.workerId);
  }

  /** Expired leases leave the store; the caller gets them once. */
  private prune(now: number): Lease[] {
    const out: Lease[] = [];
    for (const lease of this.leases.values()) {
      if (lease.expiresAtMs <= now) {
        this.drop(lease);
        out.push({ ...lease });
      }
    }
    return out.sort((a, b) => a.expiresAtMs - b.expiresAtMs);
  }
}
