// Redis registry: one key per worker, `<prefix>{registry}:worker:<id>`, value
// the JSON record, PX = TTL; invites (admin-written) at
// `<prefix>{registry}:invite:<id>`. The hash tag keeps them in one slot, so
// the Lua read is atomic on a Redis Cluster too; SCAN is per node, so the
// listing scans every master (only the slot's owner answers with keys).
// Routers list by SCAN + one Lua read (records and invites together,
// oversized values refused unsent): two round trips per poll per master.
import { scanKeys, type RedisLike } from "../redis.ts";
import { decodeInvite, decodeRecord, workerRecordSchema, type WorkerRecord } from "./record.ts";
import { registryCommands } from "./scripts.ts";
import { DEFAULT_MAX_RECORD_BYTES, type PublishResult, type RegistryListing, type RegistryStore, type RejectedRecord, type WorkerInviteGrant } from "./store.ts";

export function workerKey(prefix: string, workerId: string): string {
  return `${prefix}{registry}:worker:${workerId}`;
}

/** The invite of worker `workerId`: written by the admin, readable by routers, not writable by the worker. */
export function inviteKey(prefix: string, workerId: string): string {
  return `${prefix}{registry}:invite:${workerId}`;
}

/** A glob (SCAN MATCH, ACL key pattern) matching exactly `s`. */
export function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, "\\$&");
}

export interface RedisRegistryOptions {
  /** Records over this many bytes are refused without being read. */
  maxRecordBytes?: number;
}

export class RedisRegistryStore implements RegistryStore {
  private readonly maxRecordBytes: number;
  constructor(
    private readonly redis: RedisLike,
    private readonly prefix: string,
    opts: RedisRegistryOptions = {},
  ) {
    this.maxRecordBytes = opts.maxRecordBytes ?? DEFAULT_MAX_RECORD_BYTES;
  }

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

  /**
   * Stores `text` as worker `workerId`'s record, unchecked: what a worker's
   * own ACL user can do to its key. Tests of the read side use it.
   */
  async putRaw(workerId: string, text: string, ttlMs: number): Promise<void> {
    await this.redis.set(workerKey(this.prefix, workerId), text, "PX", Math.max(1, Math.round(ttlMs)));
  }

  async remove(workerId: string): Promise<void> {
    await this.redis.del(workerKey(this.prefix, workerId));
  }

  async list(): Promise<WorkerRecord[]> {
    return (await this.listing()).workers;
  }

  /**
   * Each worker's record as last decoded, with the text it came from: a poll
   * that reads the same text again (a router polls several times per
   * heartbeat) reuses it instead of parsing and validating it again.
   */
  private decoded = new Map<string, { raw: string; result: ReturnType<typeof decodeRecord> }>();

  async listing(): Promise<RegistryListing> {
    const keyPrefix = workerKey(this.prefix, "");
    const pattern = `${globEscape(keyPrefix)}*`;
    // The id is the key: the one thing a worker's ACL user could not choose.
    const ids = (await scanKeys(this.redis, pattern)).map((key) => key.slice(keyPrefix.length));
    const out: RegistryListing = { workers: [], invites: new Map(), rejected: [] };
    if (ids.length === 0) {
      this.decoded.clear();
      return out;
    }
    const keys = [...ids.map((id) => workerKey(this.prefix, id)), ...ids.map((id) => inviteKey(this.prefix, id))];
    const values = await registryCommands(this.redis).syRegistry_read(String(keys.length), ...keys, String(this.maxRecordBytes), String(ids.length));
    const decodedNow = new Map<string, { raw: string; result: ReturnType<typeof decodeRecord> }>();
    ids.forEach((id, i) => {
      const raw = values[i];
      if (raw === null || raw === undefined) return; // expired between SCAN and read
      if (typeof raw === "number") {
        out.rejected.push(
          raw === -2
            ? { workerId: id, reason: "no_ttl", detail: "the record was written without an expiry (a heartbeat must expire)" }
            : raw < 0
              ? { workerId: id, reason: "invalid_record", detail: "the key does not hold a string" }
              : { workerId: id, reason: "too_large", detail: `record is ${raw} bytes, over ${this.maxRecordBytes}` },
        );
        return;
      }
      const last = this.decoded.get(id);
      const decoded = last && last.raw === raw ? last.result : decodeRecord(id, raw, this.maxRecordBytes);
      decodedNow.set(id, { raw, result: decoded });
      if (!decoded.ok) {
        out.rejected.push({ workerId: id, reason: decoded.reason, detail: decoded.detail } satisfies RejectedRecord);
        return;
      }
      out.workers.push(decoded.record);
      const invite = values[ids.length + i];
      const grant = typeof invite === "string" ? decodeInvite(invite) : undefined;
      if (grant) out.invites.set(id, grant satisfies WorkerInviteGrant);
    });
    // Workers gone since the last poll drop out of the cache.
    this.decoded = decodedNow;
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
