// Redis registry: one key per worker, `<prefix>{registry}:worker:<id>`, value
// the JSON record, PX = TTL. The hash tag keeps every record in one slot so a
// Redis Cluster can SCAN them from one node. Routers list by SCAN + MGET;
// with a few hundred workers that is one round trip per poll.
import type { Redis } from "ioredis";
import { workerRecordSchema, type WorkerRecord } from "./record.ts";
import type { PublishResult, RegistryStore } from "./store.ts";

export function workerKey(prefix: string, workerId: string): string {
  return `${prefix}{registry}:worker:${workerId}`;
}

export class RedisRegistryStore implements RegistryStore {
  constructor(
    private readonly redis: Redis,
    private readonly prefix: string,
  ) {}

  async publish(record: WorkerRecord, ttlMs: number): Promise<PublishResult> {
    const parsed = workerRecordSchema.safeParse(record);
    if (!parsed.success) return { ok: false, reason: "invalid_record" };
    try {
      await this.redis.set(workerKey(this.prefix, record.id), JSON.stringify(parsed.data), "PX", Math.max(1, Math.round(ttlMs)));
    } catch (err) {
      // A per-worker ACL user writing someone else's key is refused by Redis.
      if (err instanceof Error && /NOPERM/.test(err.message)) return { ok: false, reason: "owned_by_other" };
      throw err;
    }
    return { ok: true };
  }

  async remove(workerId: string): Promise<void> {
    await this.redis.del(workerKey(this.prefix, workerId));
  }

  async list(): Promise<WorkerRecord[]> {
    const pattern = workerKey(this.prefix, "*");
    const keys: string[] = [];
    let cursor = "0";
    do {
      const [next, batch] = await this.redis.scan(cursor, "MATCH", pattern, "COUNT", 1000);
      cursor = next;
      keys.push(...batch);
    } while (cursor !== "0");
    if (keys.length === 0) return [];
    const values = await this.redis.mget(...keys);
    const out: WorkerRecord[] = [];
    for (const raw of values) {
      if (raw === null) continue; // expired between SCAN and MGET
      try {
        const parsed = workerRecordSchema.safeParse(JSON.parse(raw));
        if (parsed.success) out.push(parsed.data);
      } catch {
        // A malformed record is ignored rather than taking the directory down.
      }
    }
    return out;
  }

  async ping(): Promise<boolean> {
    try {
      return (await this.redis.ping()) === "PONG";
    } catch {
      return false;
    }
  }

  async close(): Promise<void> {}
}
