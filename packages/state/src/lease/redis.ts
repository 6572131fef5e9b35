// Redis LeaseStore: each operation is one Lua script over the six lease keys
// `${prefix}{leases}:{records,workers,expiry,fence,restored,fenced}` (one hash tag,
// one Cluster slot: atomic across workers, listed in one call). Expiry is
// checked in the scripts against Redis' own clock. A store that lost its data
// refuses every script (UNRESTORED) until the live leases are put back from
// the audit (`restoreFrom`, lease_restore.lua); the store does that itself,
// once for all the calls waiting on it, then runs them. A restore that failed
// is not tried again for `restoreRetryMs`: calls meanwhile get its error.
import type { RedisLike } from "../redis.ts";
import { leaseCommands, type LeaseCommands } from "./scripts.ts";
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

export function leaseKeys(prefix: string): [records: string, workers: string, expiry: string, fence: string, restored: string, fenced: string] {
  const base = `${prefix}{leases}`;
  return [`${base}:records`, `${base}:workers`, `${base}:expiry`, `${base}:fence`, `${base}:restored`, `${base}:fenced`];
}

export interface RedisLeaseStoreOptions {
  /**
   * The leases the audit knows as live, put back when the store has lost its
   * data (the router: PostgresLeaseAudit.liveLeases). Without it a store
   * found without its mark is taken as new (tests, benches).
   */
  restoreFrom?: () => Promise<Lease[]>;
  /** Told of each restore that ran: leases put back, and those found ended meanwhile (also in the next call's `expired`). */
  onRestored?: (restored: number, ended: number) => void;
  /**
   * After a restore that failed (the audit unreadable), how long calls are
   * refused with its error before the source is asked again: a Postgres
   * outage is not met with one query per lease call (default 1000 ms).
   */
  restoreRetryMs?: number;
  /**
   * A worker's fence field (the highest token granted on it) is forgotten
   * by the poll (list) once its last lease has ended this long ago
   * (default DEFAULT_FENCE_IDLE_MS; the router: leases.fenceIdleS).
   */
  fenceIdleMs?: number;
}

const RESTORE_RETRY_MS = 1000;

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

/** A reply refused because the store lost its data (lease_lib.lua's prune). */
function unrestored(err: unknown): boolean {
  return String((err as Error)?.message).startsWith("UNRESTORED");
}

export class RedisLeaseStore implements LeaseStore {
  private readonly redis: RedisLike & LeaseCommands;
  private readonly keys: string[];
  /** The restore in flight: every call refused meanwhile waits on this one. */
  private restoring: Promise<Lease[]> | undefined;
  /** The last restore's failure, given to calls until `restoreRetryMs` after it. */
  private failed: { error: unknown; atMs: number } | undefined;
  /** lease_list.lua's ARGV[1], formatted once. */
  private readonly fenceIdleMs: string;

  constructor(
    redis: RedisLike,
    prefix: string,
    private readonly opts: RedisLeaseStoreOptions = {},
  ) {
    this.redis = leaseCommands(redis);
    this.keys = leaseKeys(prefix);
    this.fenceIdleMs = String(checkFenceIdle(opts.fenceIdleMs ?? DEFAULT_FENCE_IDLE_MS));
  }

  async acquire(input: LeaseAcquireInput): Promise<LeaseAcquireResult> {
    checkAcquire(input);
    const [status, now, payload, expired] = await this.call(() =>
      this.redis.syLease_acquire(...this.keys, input.leaseId, input.workerId, String(input.tenantId), String(input.durationMs), String(input.fencingToken), String(input.maxPerTenant ?? 0)),
    );
    if (status === "ok") return { ok: true, lease: decode(payload[0]), nowMs: now, expired };
    if (status === "held") return { ok: false, reason: "held", holderExpiresAtMs: Number(payload[0]), nowMs: now, expired };
    if (status === "tenant_limit") return { ok: false, reason: "tenant_limit", held: Number(payload[0]), nowMs: now, expired };
    return { ok: false, reason: "stale_token", highestToken: Number(payload[0]), nowMs: now, expired };
  }

  async get(leaseId: string): Promise<LeaseGetResult> {
    checkLeaseId(leaseId);
    const [, now, payload, expired] = await this.call(() => this.redis.syLease_get(...this.keys, leaseId));
    return { lease: payload.length ? decode(payload[0]) : undefined, nowMs: now, expired };
  }

  async extend(input: LeaseExtendInput): Promise<LeaseExtendResult> {
    checkLeaseId(input.leaseId);
    checkTenant(input.tenantId);
    checkDuration(input.durationMs);
    const [status, now, payload, expired] = await this.call(() => this.redis.syLease_extend(...this.keys, input.leaseId, String(input.tenantId), String(input.durationMs)));
    return status === "ok" ? { ok: true, lease: decode(payload[0]), nowMs: now, expired } : { ok: false, reason: "not_found", nowMs: now, expired };
  }

  async release(input: LeaseHolderInput): Promise<LeaseReleaseResult> {
    checkLeaseId(input.leaseId);
    checkTenant(input.tenantId);
    const [status, now, payload, expired] = await this.call(() => this.redis.syLease_release(...this.keys, input.leaseId, String(input.tenantId)));
    return status === "ok" ? { ok: true, lease: decode(payload[0]), nowMs: now, expired } : { ok: false, reason: "not_found", nowMs: now, expired };
  }

  /** The commands a list() sends (a router polls it): one per call, nothing for an auto-pipeline to batch. */
  static readonly pollCommands = ["syLease_list"] as const;

  /** Also prunes the fence fields of workers idle longer than fenceIdleMs (lease_list.lua): every router polls this. */
  async list(): Promise<LeaseList> {
    const [, now, payload, expired] = await this.call(() => this.redis.syLease_list(...this.keys, this.fenceIdleMs));
    return { leases: payload.map(decode).sort((a, b) => a.workerId.localeCompare(b.workerId)), nowMs: now, expired };
  }

  /** Runs a script; refused because the store lost its data, restores it and runs it again (its expired include the restore's). */
  private async call(run: () => Promise<unknown>): Promise<[string, number, unknown[], Lease[]]> {
    let ended: Lease[] = [];
    for (let attempt = 1; ; attempt++) {
      try {
        const [status, now, payload, expired] = (await run()) as Reply;
        return [String(status), Number(now), payload ?? [], [...ended, ...(expired ?? []).map(decode)]];
      } catch (err) {
        if (!unrestored(err) || attempt === 3) throw err;
      }
      ended = ended.concat(await this.restore());
    }
  }

  /**
   * Puts back the audit's live leases, once for every caller waiting on it.
   * Returns those found ended meanwhile to the caller that ran it only (so
   * each is audited as expired once); the others get none.
   */
  private async restore(): Promise<Lease[]> {
    if (this.restoring) {
      await this.restoring.catch(() => {});
      return [];
    }
    if (this.failed && performance.now() - this.failed.atMs < (this.opts.restoreRetryMs ?? RESTORE_RETRY_MS)) throw this.failed.error;
    this.restoring = (async () => {
      try {
        const leases = (await this.opts.restoreFrom?.()) ?? [];
        const args: string[] = [];
        for (const l of leases) args.push(l.id, l.workerId, String(l.tenantId), String(l.fencingToken), String(l.grantedAtMs), String(l.expiresAtMs));
        const [, , payload, expired] = (await this.redis.syLease_restore(...this.keys, ...args)) as Reply;
        const ended = (expired ?? []).map(decode);
        this.opts.onRestored?.(Number(payload?.[0] ?? 0), ended.length);
        this.failed = undefined;
        return ended;
      } catch (error) {
        this.failed = { error, atMs: performance.now() };
        throw error;
      } finally {
        this.restoring = undefined;
      }
    })();
    return this.restoring;
  }
}
