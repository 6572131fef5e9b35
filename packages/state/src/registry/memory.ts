// In-process registry for single-machine mode; same semantics as Redis TTL
// keys: records are kept as the text a worker wrote, under the id it wrote
// them for, and read back through the same checks routers apply to Redis.
import { randomUUID } from "node:crypto";
import type { Clock } from "../clock.ts";
import { systemClock } from "../clock.ts";
import { decodeRecord, workerRecordSchema, type WorkerRecord } from "./record.ts";
import { DEFAULT_MAX_RECORD_BYTES, type PublishResult, type RegistryListing, type RegistryStore, type WorkerInviteGrant } from "./store.ts";

export class MemoryRegistryStore implements RegistryStore {
  private readonly records = new Map<string, { raw: string; expiresAt: number }>();
  private readonly invites = new Map<string, WorkerInviteGrant>();
  private readonly maxRecordBytes: number;
  private epoch = randomUUID();

  constructor(
    private readonly clock: Clock = systemClock,
    opts: { maxRecordBytes?: number } = {},
  ) {
    this.maxRecordBytes = opts.maxRecordBytes ?? DEFAULT_MAX_RECORD_BYTES;
  }

  async publish(record: WorkerRecord, ttlMs: number): Promise<PublishResult> {
    const parsed = workerRecordSchema.safeParse(record);
    if (!parsed.success) return { ok: false, reason: "invalid_record" };
    await this.putRaw(record.id, JSON.stringify(parsed.data), ttlMs);
    return { ok: true };
  }

  /** Stores `text` as worker `workerId`'s record, unchecked (the twin of RedisRegistryStore.putRaw). */
  async putRaw(workerId: string, text: string, ttlMs: number): Promise<void> {
    this.records.set(workerId, { raw: text, expiresAt: this.clock.now() + ttlMs });
  }

  /** The twin of an admin writing a worker's invite (registry/invites.ts). */
  async putInvite(workerId: string, grant: WorkerInviteGrant): Promise<void> {
    this.invites.set(workerId, { models: [...grant.models], createdAt: grant.createdAt });
  }

  async remove(workerId: string): Promise<void> {
    this.records.delete(workerId);
  }

  /** Every record and invite gone, under a new epoch: the twin of a Redis that came back empty. */
  async clear(): Promise<void> {
    this.records.clear();
    this.invites.clear();
    this.epoch = randomUUID();
  }

  async list(): Promise<WorkerRecord[]> {
    return (await this.listing()).workers;
  }

  async listing(): Promise<RegistryListing> {
    const now = this.clock.now();
    const out: RegistryListing = { workers: [], invites: new Map(), rejected: [], epoch: this.epoch };
    for (const [id, entry] of this.records) {
      if (entry.expiresAt <= now) {
        this.records.delete(id);
        continue;
      }
      const decoded = decodeRecord(id, entry.raw, this.maxRecordBytes);
      if (!decoded.ok) {
        out.rejected.push({ workerId: id, reason: decoded.reason, detail: decoded.detail });
        continue;
      }
      out.workers.push(decoded.record);
      const grant = this.invites.get(id);
      if (grant) out.invites.set(id, { models: [...grant.models], createdAt: grant.createdAt });
    }
    return out;
  }

  async ping(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {}
}
