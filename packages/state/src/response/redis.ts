// Redis ResponseStore: one string key per stored answer,
// `${prefix}response:{<tenant>:<id>}`, written with PX (Redis expires it).
// Every operation touches one key, so no Lua is needed; the hash tag is the
// whole (tenant, id) pair, spreading a tenant's answers over the Cluster.
import type { RedisLike } from "../redis.ts";
import { checkResponseKey, type ResponseStore } from "./store.ts";

export function responseKey(prefix: string, tenantId: number, id: string): string {
  return `${prefix}response:{${tenantId}:${id}}`;
}

export class RedisResponseStore implements ResponseStore {
  constructor(
    private readonly redis: RedisLike,
    private readonly prefix: string,
  ) {}

  async put(tenantId: number, id: string, record: string, ttlMs: number): Promise<void> {
    checkResponseKey(tenantId, id);
    await this.redis.set(responseKey(this.prefix, tenantId, id), record, "PX", Math.max(1, Math.ceil(ttlMs)));
  }

  async get(tenantId: number, id: string): Promise<string | undefined> {
    checkResponseKey(tenantId, id);
    return (await this.redis.get(responseKey(this.prefix, tenantId, id))) ?? undefined;
  }

  async delete(tenantId: number, id: string): Promise<boolean> {
    checkResponseKey(tenantId, id);
    return (await this.redis.del(responseKey(this.prefix, tenantId, id))) === 1;
  }
}
