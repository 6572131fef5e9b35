// LeaseStore: who holds a GPU worker right now. A lease gives one tenant a
// worker for a while; it carries a fencing token (from a Postgres sequence,
// passed in) that only grows per worker, and it ends by itself at its expiry.
// Real twin: Lua scripts in Redis (packages/state/lua/lease_*.lua); in-process
// twin for `switchyard up`. Both pass test/contract/lease.contract.ts.
//
// Times are the store's clock (Redis TIME for the Redis twin), in ms. Every
// call first drops the leases it finds expired and returns them in `expired`,
// so exactly one caller sees each expiry (the router audits it).
import { randomBytes } from "node:crypto";

export interface Lease {
  id: string;
  workerId: string;
  tenantId: number;
  /** Larger than every token granted on this worker before (while the store kept its memory). */
  fencingToken: number;
  grantedAtMs: number;
  expiresAtMs: number;
}

export interface LeaseAcquireInput {
  leaseId: string;
  workerId: string;
  tenantId: number;
  durationMs: number;
  /** A fresh token (nextval of the Postgres sequence). */
  fencingToken: number;
  /** Live leases one tenant may hold at once; this grant is refused at it (0 or absent: no cap). */
  maxPerTenant?: number;
}

export type LeaseAcquireResult =
  | { ok: true; lease: Lease; nowMs: number; expired: Lease[] }
  /** Another live lease holds the worker until holderExpiresAtMs (it may be extended). */
  | { ok: false; reason: "held"; holderExpiresAtMs: number; nowMs: number; expired: Lease[] }
  /** The worker already saw a token ≥ this one: take a fresh token and try again. */
  | { ok: false; reason: "stale_token"; highestToken: number; nowMs: number; expired: Lease[] }
  /** The tenant already holds maxPerTenant live leases (`held` of them). */
  | { ok: false; reason: "tenant_limit"; held: number; nowMs: number; expired: Lease[] };

export interface LeaseHolderInput {
  leaseId: string;
  /** Only the tenant holding the lease may extend or release it. */
  tenantId: number;
}

export interface LeaseExtendInput extends LeaseHolderInput {
  /** The lease then ends this long from now (never earlier than it already did). */
  durationMs: number;
}

export type LeaseExtendResult =
  | { ok: true; lease: Lease; nowMs: number; expired: Lease[] }
  /** No live lease with this id held by this tenant (unknown, ended, or someone else's). */
  | { ok: false; reason: "not_found"; nowMs: number; expired: Lease[] };

export type LeaseReleaseResult =
  | { ok: true; lease: Lease; nowMs: number; expired: Lease[] }
  | { ok: false; reason: "not_found"; nowMs: number; expired: Lease[] };

export interface LeaseGetResult {
  /** The live lease, whoever holds it (callers check the tenant). */
  lease: Lease | undefined;
  nowMs: number;
  expired: Lease[];
}

export interface LeaseList {
  /** Every live lease. */
  leases: Lease[];
  /** The store's clock when the list was taken (routers derive their offset from it). */
  nowMs: number;
  expired: Lease[];
}

export interface LeaseStore {
  /** Atomically: grant the worker if no live lease holds it and the token is newer than any it got. */
  acquire(input: LeaseAcquireInput): Promise<LeaseAcquireResult>;
  get(leaseId: string): Promise<LeaseGetResult>;
  /** Only the holder, only while live. */
  extend(input: LeaseExtendInput): Promise<LeaseExtendResult>;
  /** Only the holder; the worker is free at once. */
  release(input: LeaseHolderInput): Promise<LeaseReleaseResult>;
  /**
   * Live leases (a router's snapshot). Every router polls it, so it also
   * forgets the fence (highest token) of workers whose last lease ended
   * longer than the store's fenceIdleMs ago.
   */
  list(): Promise<LeaseList>;
}

/**
 * How long a worker's fence field (the highest token granted on it) outlives
 * its last lease: a week. Far above any lease a client can ask for or any
 * wait for one, so no router still holds a token from before it; below the
 * life of a fabric whose workers come and go under new ids.
 */
export const DEFAULT_FENCE_IDLE_MS = 7 * 24 * 3_600_000;

export function checkFenceIdle(ms: number): number {
  if (!Number.isSafeInteger(ms) || ms <= 0) throw new RangeError(`fenceIdleMs must be a positive integer, got ${ms}`);
  return ms;
}

/** 24 random bytes, url-safe: unguessable, so an id alone never reveals another tenant's lease. */
export function newLeaseId(): string {
  return `lease_${randomBytes(18).toString("base64url")}`;
}

const leaseIdPattern = /^lease_[A-Za-z0-9_-]{1,64}$/;
const workerIdPattern = /^[A-Za-z0-9._-]{1,64}$/;

export function isLeaseId(id: string): boolean {
  return typeof id === "string" && leaseIdPattern.test(id);
}

export function checkLeaseId(id: string): void {
  if (!isLeaseId(id)) throw new RangeError(`lease id must match ${leaseIdPattern}, got ${JSON.stringify(id)}`);
}

export function checkAcquire(input: LeaseAcquireInput): void {
  checkLeaseId(input.leaseId);
  if (typeof input.workerId !== "string" || !workerIdPattern.test(input.workerId)) throw new RangeError(`bad worker id ${JSON.stringify(input.workerId)}`);
  checkTenant(input.tenantId);
  checkDuration(input.durationMs);
  if (!Number.isSafeInteger(input.fencingToken) || input.fencingToken <= 0) throw new RangeError(`fencingToken must be a positive safe integer, got ${input.fencingToken}`);
  if (input.maxPerTenant !== undefined && (!Number.isSafeInteger(input.maxPerTenant) || input.maxPerTenant < 0)) throw new RangeError(`maxPerTenant must be a non-negative integer, got ${input.maxPerTenant}`);
}

export function checkTenant(tenantId: number): void {
  if (!Number.isSafeInteger(tenantId)) throw new RangeError(`tenantId must be an integer, got ${tenantId}`);
}

export function checkDuration(ms: number): void {
  if (!Number.isSafeInteger(ms) || ms <= 0) throw new RangeError(`durationMs must be a positive integer, got ${ms}`);
}
