// RegistryStore: where workers announce themselves and routers look them up.
// Real twin: Redis keys with a TTL. In-process twin: a Map with deadlines, for
// `switchyard up`. Both pass test/contract/registry.contract.ts.
import type { WorkerRecord } from "./record.ts";

export type PublishResult = { ok: true } | { ok: false; reason: "invalid_record" | "owned_by_other" };

export interface RegistryStore {
  /** Write (or refresh) a worker's record; it disappears after ttlMs without another publish. */
  publish(record: WorkerRecord, ttlMs: number): Promise<PublishResult>;
  /** Remove a worker's record at once (graceful deregistration). */
  remove(workerId: string): Promise<void>;
  /** All live records. Expired ones are never returned. */
  list(): Promise<WorkerRecord[]>;
  /** Reachability check for /readyz. */
  ping(): Promise<boolean>;
  close(): Promise<void>;
}
