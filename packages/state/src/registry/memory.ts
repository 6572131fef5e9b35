// In-process registry for single-machine mode; same semantics as Redis TTL keys.
import type { Clock } from "../clock.ts";
import { systemClock } from "../clock.ts";
import { workerRecordSchema, type WorkerRecord } from "./record.ts";
import type { PublishResult, RegistryStore } from "./store.ts";

export class MemoryRegistryStore implements RegistryStore {
  private readonly records = new Map<string, { record: WorkerRecord; expiresAt: number }>();
  constructor(private readonly clock: Clock = systemClock) {}

  async publish(record: WorkerRecord, ttlMs: number): Promise<PublishResult> {
    const parsed = workerRecordSchema.safeParse(record);
    if (!parsed.success) return { ok: false, reason: "invalid_record" };
    this.records.set(record.id, { record: parsed.data, expiresAt: this.clock.now() + ttlMs });
    return { ok: true };
  }

  async remove(workerId: string): Promise<void> {
    this.records.delete(workerId);
  }

  async list(): Promise<WorkerRecord[]> {
    const now = this.clock.now();
    const out: WorkerRecord[] = [];
    for (const [id, entry] of this.records) {
      if (entry.expiresAt <= now) this.records.delete(id);
      else out.push(entry.record);
    }
    return out;
  }

  async ping(): Promise<boolean> {
    return true;
  }

  async close(): Promise<void> {}
}
