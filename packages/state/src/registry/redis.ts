// Redis registry: one key per worker, `<prefix>{registry}:worker:<id>`, value
// the JSON record, PX = TTL; invites (admin-written) at
// `<prefix>{registry}:invite:<id>`. The hash tag keeps them in one slot, so
// the Lua read is atomic on a Redis Cluster too.
//
// Routers find the keys through two sets beside them, never by SCAN on each
// poll: a SCAN walks the whole keyspace (stored responses, rate-limit
// windows, budgets…), so a poll's cost grew with everything else the fabric
// keeps — 200k other keys made one poll take 259 ms and 200 round trips.
//   - `{registry}:workers`: ids of heartbeating workers, added by a worker's
//     publish in the same transaction as its record, dropped by the routers'
//     read (registry_read.lua) once the record is gone;
//   - `{registry}:invited`: ids of invited workers, written by the admin with
//     the invite (an invited worker's ACL user may write its own key only,
//     so it never touches a shared set another worker's listing depends on).
// One SCAN still runs from a store's first listing, and every `sweepMs`
// after, beside the polls, so workers of an older version (which write only
// their key) are found too. A poll is two round trips: the sets' ids (with
// the registry's epoch, registry_ids.lua), one Lua read.
import { randomUUID } from "node:crypto";
import { scanKeys, type RedisLike } from "../redis.ts";
import { decodeInvite, decodeRecord, workerRecordSchema, type WorkerRecord } from "./record.ts";
import { registryCommands, type RegistryCommands } from "./scripts.ts";
import { DEFAULT_MAX_RECORD_BYTES, type PublishResult, type RegistryListing, type RegistryStore, type RejectedRecord, type WorkerInviteGrant } from "./store.ts";

export function workerKey(prefix: string, workerId: string): string {
  return `${prefix}{registry}:worker:${workerId}`;
}

/** The invite of worker `workerId`: written by the admin, readable by routers, not writable by the worker. */
export function inviteKey(prefix: string, workerId: string): string {
  return `${prefix}{registry}:invite:${workerId}`;
}

/** The ids of workers that heartbeat with the fabric's credential (added by their publish, pruned by routers' reads). */
export function workerIndexKey(prefix: string): string {
  return `${prefix}{registry}:workers`;
}

/** The ids of invited workers (admin-written with each invite). */
export function invitedIndexKey(prefix: string): string {
  return `${prefix}{registry}:invited`;
}

/**
 * The registry's epoch: a random name for the data this Redis holds, written
 * by the first listing that finds none. A Redis back empty has lost it too.
 */
export function registryEpochKey(prefix: string): string {
  return `${prefix}{registry}:epoch`;
}

/** Whether Redis refused a command (or a transaction's queued command) for the connection's ACL user. */
function noPermission(err: unknown): boolean {
  if (!(err instanceof Error)) return false;
  const previous = (err as { previousErrors?: unknown[] }).previousErrors ?? [];
  return /NOPERM/.test(err.message) || previous.some((e) => e instanceof Error && /NOPERM/.test(e.message));
}

/** A glob (SCAN MATCH, ACL key pattern) matching exactly `s`. */
export function globEscape(s: string): string {
  return s.replace(/[*?[\]\\]/g, "\\$&");
}

export interface RedisRegistryOptions {
  /** Records over this many bytes are refused without being read. */
  maxRecordBytes?: number;
  /**
   * How often a listing also SCANs for worker keys missing from the index
   * (workers of an older version), ms; 0: only at the first listing.
   */
  sweepMs?: number;
}

/** Default RedisRegistryOptions.sweepMs. */
export const DEFAULT_REGISTRY_SWEEP_MS = 60_000;

export class RedisRegistryStore implements RegistryStore {
  private readonly maxRecordBytes: number;
  private readonly sweepMs: number;
  private readonly index: string;
  private readonly invited: string;
  private readonly epochKey: string;
  /**
   * The connection with the registry's scripts defined, from the start: an
   * auto-pipeline built before a script was defined (by the first listing's
   * sweep) could not take it.
   */
  private readonly scripts: RedisLike & RegistryCommands;
  /** Bytes of a heartbeat key's name before the worker id (Lua counts bytes: a prefix may not be ASCII). */
  private readonly idOffset: string;
  /** False once Redis refused this connection the index (an invited worker's ACL user): its record alone is written. */
  private indexWritable = true;
  /** When this store last swept the keyspace for unindexed worker keys (-Infinity: never). */
  private sweptAt = -Infinity;
  private sweeping: Promise<void> | undefined;

  constructor(
    private readonly redis: RedisLike,
    private readonly prefix: string,
    opts: RedisRegistryOptions = {},
  ) {
    this.maxRecordBytes = opts.maxRecordBytes ?? DEFAULT_MAX_RECORD_BYTES;
    this.sweepMs = opts.sweepMs ?? DEFAULT_REGISTRY_SWEEP_MS;
    this.index = workerIndexKey(prefix);
    this.invited = invitedIndexKey(prefix);
    this.epochKey = registryEpochKey(prefix);
    this.scripts = registryCommands(redis);
    this.idOffset = String(Buffer.byteLength(workerKey(prefix, ""), "utf8"));
  }

  async publish(record: WorkerRecord, ttlMs: number): Promise<PublishResult> {
    const parsed = workerRecordSchema.safeParse(record);
    if (!parsed.success) return { ok: false, reason: "invalid_record" };
    try {
      await this.write(record.id, JSON.stringify(parsed.data), ttlMs);
    } catch (err) {
      // A per-worker ACL user writing someone else's key is refused by Redis.
      if (noPermission(err)) return { ok: false, reason: "owned_by_other" };
      throw err;
    }
    return { ok: true };
  }

  /** The record, and its id in the index in the same transaction (unless this connection may not write the index). */
  private write(workerId: string, text: string, ttlMs: number): Promise<void> {
    const key = workerKey(this.prefix, workerId);
    const px = Math.max(1, Math.round(ttlMs));
    return this.withIndex(
      () => this.redis.multi().set(key, text, "PX", px).sadd(this.index, workerId).exec(),
      () => this.redis.set(key, text, "PX", px),
    );
  }

  /**
   * `both` (the key and the index in one transaction) while this connection
   * may write the index; after Redis first refuses it that (an invited
   * worker's ACL user: routers find it through the invited set), `alone`.
   */
  private async withIndex(both: () => Promise<unknown>, alone: () => Promise<unknown>): Promise<void> {
    if (this.indexWritable) {
      try {
        await both();
        return;
      } catch (err) {
        if (!noPermission(err)) throw err;
        this.indexWritable = false;
      }
    }
    await alone();
  }

  /**
   * Stores `text` as worker `workerId`'s record, unchecked: what a worker's
   * own ACL user can do to its key. Tests of the read side use it.
   */
  async putRaw(workerId: string, text: string, ttlMs: number): Promise<void> {
    await this.write(workerId, text, ttlMs);
  }

  async remove(workerId: string): Promise<void> {
    const key = workerKey(this.prefix, workerId);
    // Alone, the id stays in the index until a router's read finds the key gone.
    await this.withIndex(
      () => this.redis.multi().del(key).srem(this.index, workerId).exec(),
      () => this.redis.del(key),
    );
  }

  /**
   * The ids whose keys a listing reads (both sets), and the registry's epoch,
   * in one round trip. A sweep that is due runs beside the listing (its
   * finds show from the next one): a router's start does not wait on a SCAN
   * of a large keyspace — unless the sets are empty (a fabric of an older
   * version), when listing nobody would be wrong. `bench registry` times a
   * SCAN in its place.
   */
  protected async workerIds(): Promise<{ epoch: string; ids: string[] }> {
    if (this.sweepDue()) this.sweeping ??= this.sweep().finally(() => (this.sweeping = undefined));
    const first = await this.readIds();
    if (first.ids.length > 0 || !this.sweeping) return first;
    await this.sweeping;
    return this.readIds();
  }

  private async readIds(): Promise<{ epoch: string; ids: string[] }> {
    // A new candidate each time: one this store wrote before the data was
    // lost, written again, would look like nothing happened.
    const [epoch, ...ids] = await this.scripts.syRegistry_ids(this.index, this.invited, this.epochKey, randomUUID());
    return { epoch: epoch!, ids };
  }

  private sweepDue(): boolean {
    if (this.sweptAt === -Infinity) return true;
    return this.sweepMs > 0 && Date.now() - this.sweptAt >= this.sweepMs;
  }

  /**
   * Adds to the sets the worker and invite keys a SCAN finds (written by
   * workers or admins of an older version): from the first listing and every
   * sweepMs. A failed sweep is tried again at the next due time; listings go
   * on from the sets.
   */
  private async sweep(): Promise<void> {
    this.sweptAt = Date.now();
    const workerPrefix = workerKey(this.prefix, "");
    const invitePrefix = inviteKey(this.prefix, "");
    try {
      // One walk of the keyspace for both kinds of key (they share `{registry}:`).
      const keys = await scanKeys(this.redis, `${globEscape(`${this.prefix}{registry}:`)}*`);
      const workers = keys.filter((k) => k.startsWith(workerPrefix)).map((k) => k.slice(workerPrefix.length));
      const invites = keys.filter((k) => k.startsWith(invitePrefix)).map((k) => k.slice(invitePrefix.length));
      const tx = this.redis.multi();
      if (workers.length > 0) tx.sadd(this.index, ...workers);
      if (invites.length > 0) tx.sadd(this.invited, ...invites);
      if (workers.length + invites.length > 0) await tx.exec();
    } catch {
      // Redis away or the SCAN refused: the sets still list what joined since.
    }
  }

  /** The commands a listing sends (a router polls it), one after another: nothing for an auto-pipeline to batch. */
  static readonly pollCommands = ["syRegistry_ids", "syRegistry_read"] as const;

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
    // The id is the key: the one thing a worker's ACL user could not choose.
    const { epoch, ids } = await this.workerIds();
    const out: RegistryListing = { workers: [], invites: new Map(), rejected: [], epoch };
    if (ids.length === 0) {
      this.decoded.clear();
      return out;
    }
    const keys = [...ids.map((id) => workerKey(this.prefix, id)), ...ids.map((id) => inviteKey(this.prefix, id))];
    const values = await this.scripts.syRegistry_read(
      String(keys.length + 2),
      this.index,
      this.invited,
      ...keys,
      String(this.maxRecordBytes),
      String(ids.length),
      this.idOffset,
    );
    const decodedNow = new Map<string, { raw: string; result: ReturnType<typeof decodeRecord> }>();
    ids.forEach((id, i) => {
      const raw = values[i];
      if (raw === null || raw === undefined) return; // no record: expired (its id left the index in the read), or invited and not heartbeating
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
