// Redis LeaseStore: each operation is one Lua script over the four lease keys
// `${prefix}{leases}:{records,workers,expiry,fence}` (one hash tag, one
// Cluster slot: atomic across workers, listed in one call). Expiry is checked
// in the scripts against Redis' own clock.
import type { RedisLike } from "../redis.ts";
import { leaseCommands, type LeaseCommands } from "./scripts.ts";
import {
  checkAcquire,
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

export function leaseKeys(prefix: string): [records: string, workers: string, expiry: string, fence: string] {
  const base = `${prefix}{leases}`;
  return [`${base}:records`, `${base}:workers`, `${base}:expiry`, `${base}:fence`];
}

type Reply = [status: string, now: number | string, payload: unknown[], expired: unknown[]];

/** "id|worker|tenant|token|granted|expires" → Lease. */
function decode(raw: unknown): Lease {
  const [id, workerId, tenant, token, granted, expires] = String(raw).split("|");
  return {
    id: id!,
    workerId: workerId!,
    tenantId: Number(tenant),
    fencingToken: Number(token),
    grantedAtMs: Number(granted),
    expiresAtMs: Number(expires),
  };
}

export class RedisLeaseStore implements LeaseStore {
  private readonly redis: RedisLike & LeaseCommands;
  private readonly keys: string[];

  constructor(redis: RedisLike, prefix: string) {
    this.redis = leaseCommands(redis);
    this.keys = leaseKeys(prefix);
  }

  async acquire(input: LeaseAcquireInput): Promise<LeaseAcquireResult> {
    checkAcquire(input);
    const [status, now, payload, expired] = await this.call(
      this.redis.syLease_acquire(...this.keys, input.leaseId, input.workerId, String(input.tenantId), String(input.durationMs), String(input.fencingToken)),
    );
    if (status === "ok") return { ok: true, lease: decode(payload[0]), nowMs: now, expired };
    if (status === "held") return { ok: false, reason: "held", holderExpiresAtMs: Number(payload[0]), nowMs: now, expired };
    return { ok: false, reason: "stale_token", highestToken: Number(payload[0]), nowMs: now, expired };
  }

  async get(leaseId: string): Promise<LeaseGetResult> {
    checkLeaseId(leaseId);
    const [, now, payload, expired] = await this.call(this.redis.syLease_get(...this.keys, leaseId));
    return { lease: payload.length ? decode(payload[0]) : undefined, nowMs: now, expired };
  }

  async extend(input: LeaseExtendInput): Promise<LeaseExtendResult> {
    checkLeaseId(input.leaseId);
    checkTenant(input.tenantId);
    checkDuration(input.durationMs);
    const [status, now, payload, expired] = await this.call(this.redis.syLease_extend(...this.keys, input.leaseId, String(input.tenantId), String(input.durationMs)));
    return status === "ok" ? { ok: true, lease: decode(payload[0]), nowMs: now, expired } : { ok: false, reason: "not_found", nowMs: now, expired };
  }

  async release(input: LeaseHolderInput): Promise<LeaseReleaseResult> {
    checkLeaseId(input.leaseId);
    checkTenant(input.tenantId);
    const [status, now, payload, expired] = await this.call(this.redis.syLease_release(...this.keys, input.leaseId, String(input.tenantId)));
    return status === "ok" ? { ok: true, lease: decode(payload[0]), nowMs: now, expired } : { ok: false, reason: "not_found", nowMs: now, expired };
  }

  /** The commands a list() sends (a router polls it): one per call, nothing for an auto-pipeline to batch. */
  static readonly pollCommands = ["syLease_list"] as const;

  async list(): Promise<LeaseList> {
    const [, now, payload, expired] = await this.call(this.redis.syLease_list(...this.keys));
    return { leases: payload.map(decode).sort((a, b) => a.workerId.localeCompare(b.workerId)), nowMs: now, expired };
  }

  private async call(reply: Promise<unknown>): Promise<[string, number, unknown[], Lease[]]> {
    const [status, now, payload, expired] = (await reply) as Reply;
    return [String(status), Number(now), payload ?? [], (expired ?? []).map(decode)];
  }
}
