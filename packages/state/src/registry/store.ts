// RegistryStore: where workers announce themselves and routers look them up.
// Real twin: Redis keys with a TTL. In-process twin: a Map with deadlines, for
// `switchyard up`. Both pass test/contract/registry.contract.ts.
import type { WorkerRecord } from "./record.ts";

export type PublishResult = { ok: true } | { ok: false; reason: "invalid_record" | "owned_by_other" };

/** Records over this many bytes are refused unread (a worker must not make routers parse megabytes per poll). */
export const DEFAULT_MAX_RECORD_BYTES = 16 * 1024;

/** Why a stored record was not listed. */
export type RecordRefusal =
  /** The record's `id` is not the id its key belongs to (a worker writing its own key in another's name). */
  | "id_mismatch"
  /** Over maxRecordBytes: refused before parsing. */
  | "too_large"
  /** Written without a TTL: it would never expire, so the worker could never leave rotation by dying. */
  | "no_ttl"
  /** Not JSON, or not a worker record. */
  | "invalid_record"
  /** The key's suffix is not a worker id. */
  | "invalid_key";

export interface RejectedRecord {
  /** The worker id the record's key belongs to (the key suffix, as stored). */
  workerId: string;
  reason: RecordRefusal;
  detail: string;
}

/** What an invite allows a worker (written by the admin next to the worker's key; the worker cannot write it). */
export interface WorkerInviteGrant {
  /** Model names the worker may be routed for; anything else it advertises is ignored. */
  models: string[];
  createdAt: number;
}

export interface RegistryListing {
  /** Live records; each one's `id` is the id its key belongs to. */
  workers: WorkerRecord[];
  /** The invite of each listed worker that has one. */
  invites: Map<string, WorkerInviteGrant>;
  /** Stored records that were not listed, and why. */
  rejected: RejectedRecord[];
  /**
   * Names the data the store holds: the same from listing to listing until
   * the store loses its records (a Redis back empty after a restart, a
   * failover to an empty replica, a flush), another after. Routers tell a
   * registry that lost its records from workers that left by it.
   */
  epoch: string;
}

export interface RegistryStore {
  /** Write (or refresh) a worker's record; it disappears after ttlMs without another publish. */
  publish(record: WorkerRecord, ttlMs: number): Promise<PublishResult>;
  /** Remove a worker's record at once (graceful deregistration). */
  remove(workerId: string): Promise<void>;
  /** All live, valid records. Expired ones are never returned. */
  list(): Promise<WorkerRecord[]>;
  /** What routers read: the live records, their invites, and the records refused (with why). */
  listing(): Promise<RegistryListing>;
  /** Reachability check for /readyz. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}
