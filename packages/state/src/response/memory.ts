// In-process ResponseStore (one machine, in-process tests): a map with
// expiry on the store's clock, swept as it is used.
import { systemClock, type Clock } from "../clock.ts";
import { checkResponseKey, type ResponseStore } from "./store.ts";

export class MemoryResponseStore implements ResponseStore {
  private readonly records = new Map<string, { record: string; expiresAtMs: number }>();
  private puts = 0;

  constructor(private readonly clock: Clock = systemClock) {}

  async put(tenantId: number, id: string, record: string, ttlMs: number): Promise<void> {
    checkResponseKey(tenantId, id);
    // Every so often drop what has expired, so an idle tenant's answers don't stay in memory.
    if (++this.puts % 256 === 0) this.sweep();
    this.records.set(`${tenantId}:${id}`, { record, expiresAtMs: this.clock.now() + Math.max(1, ttlMs) });
  }

  async get(tenantId: number, id: string): Promise<string | undefined> {
    checkResponseKey(tenantId, id);
    const key = `${tenantId}:${id}`;
    const r = this.records.get(key);
    if (!r) return undefined;
    if (r.expiresAtMs <= this.clock.now()) {
      this.records.delete(key);
      return undefined;
    }
    return r.record;
  }

  async delete(tenantId: number, id: string): Promise<boolean> {
    const had = (await this.get(tenantId, id)) !== undefined;
    this.records.delete(`${tenantId}:${id}`);
    return had;
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [k, r] of this.records) if (r.expiresAtMs <= now) this.records.delete(k);
  }
}
