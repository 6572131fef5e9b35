// Where API keys are resolved. Real twin: Postgres (db/). In-memory twin:
// for unit tests of the router. A short cache sits in front (auth/cache.ts).
import { type Db, type KeyOwner, lookupKeyByHash, touchKeys } from "@switchyard/db";

export type { KeyOwner };

export interface KeyStore {
  lookup(keyHash: string): Promise<KeyOwner | undefined>;
  /** Record use; called in batches, off the request path. */
  touch(keyIds: number[]): Promise<void>;
  ping(): Promise<boolean>;
}

export class PostgresKeyStore implements KeyStore {
  constructor(private readonly db: Db) {}
  lookup(keyHash: string) {
    return lookupKeyByHash(this.db, keyHash);
  }
  touch(keyIds: number[]) {
    return touchKeys(this.db, keyIds);
  }
  async ping(): Promise<boolean> {
    try {
      await this.db.execute("select 1");
      return true;
    } catch {
      return false;
    }
  }
}

export class MemoryKeyStore implements KeyStore {
  readonly byHash = new Map<string, KeyOwner>();
  readonly touched = new Set<number>();
  async lookup(keyHash: string) {
    return this.byHash.get(keyHash);
  }
  async touch(keyIds: number[]) {
    for (const id of keyIds) this.touched.add(id);
  }
  async ping() {
    return true;
  }
}
