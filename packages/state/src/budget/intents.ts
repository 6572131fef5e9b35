// The intents journal: before each paid attempt a router appends an intent
// (who pays, where it runs, the hold) to a Redis stream and makes it a
// pending entry of its own consumer in one script. A live router keeps its
// intents' idle time low (XCLAIM, every claimIdleMs / 3); a dead or paused
// one stops, so its intents go idle and another router takes them over with
// XAUTOCLAIM — as the ledger drain does with unacknowledged rows. Whoever
// finishes an attempt deletes its intent and appends its ledger row in one
// script (budget_intent_finish.lua): exactly one finisher, exactly one row.
// The keys share the `{ledger}` hash tag with the ledger stream (one Cluster
// slot), so that script is atomic. Policy (when an orphan is due, what it
// cost) lives with the caller: this room only moves entries.
import { luaSource } from "../lua.ts";
import type { RedisLike } from "../redis.ts";

const scriptNames = ["open", "finish", "prune"] as const;
type IntentCommands = {
  syIntent_open(stream: string, opened: string, group: string, consumer: string, intent: string, openedTtlMs: string): Promise<string>;
  syIntent_finish(stream: string, ledger: string, progress: string, finished: string, group: string, id: string, as: "owner" | "orphan", markTtlMs: string, ...rows: string[]): Promise<[string, number] | number>;
  syIntent_prune(stream: string, self: string, minIdleMs: string, group: string): Promise<number>;
};


const registered = new WeakSet<RedisLike>();
function intentCommands(redis: RedisLike): RedisLike & IntentCommands {
  if (!registered.has(redis)) {
    const keys: Record<(typeof scriptNames)[number], number> = { open: 2, finish: 4, prune: 1 };
    for (const name of scriptNames) {
      redis.defineCommand(`syIntent_${name}`, { numberOfKeys: keys[name], lua: luaSource(`budget_intent_${name}.lua`) });
    }
    registered.add(redis);
  }
  return redis as RedisLike & IntentCommands;
}

/** The intents stream of a key prefix (same hash tag as the ledger stream). */
export function intentStreamKey(prefix: string): string {
  return `${prefix}{ledger}:intents`;
}

/** The mark a router finishing another's orphan leaves (budget_intent_finish.lua): the owner then writes nothing. */
export function intentFinishedKey(prefix: string, id: string): string {
  return `${prefix}{ledger}:finished:${id}`;
}

/**
 * How long an attempt's opened mark lives, at most. A resend comes from
 * ioredis within its retries (maxRetriesPerRequest 2: two reconnects of at
 * most connectTimeout 2 s and a 2 s delay each; on a Cluster, its failover
 * retries, seconds): 2 minutes covers it many times over. Kept for the
 * hold's whole TTL (11 minutes by default), a mark per paid attempt was
 * ~130 bytes × 660 s of paid attempts in Redis: 86 MB at 1,000 a second.
 */
export const INTENT_RESEND_WINDOW_MS = 120_000;

/**
 * The mark of one paid attempt's intent (`attempt`: its request id and
 * number), holding the intent's id: the open script, sent again (ioredis
 * resends a command whose reply a broken connection lost), finds it and
 * writes no second intent.
 */
export function intentOpenedKey(prefix: string, attempt: string): string {
  return `${prefix}{ledger}:opened:${attempt}`;
}

/** Where an intent's progress (generation id, last usage seen) is kept. */
export function intentProgressKey(prefix: string, id: string): string {
  return `${prefix}{ledger}:intent:${id}`;
}

export interface IntentJournalOptions {
  prefix: string;
  /** The ledger stream a finished attempt's row goes to (same hash tag). */
  ledgerKey: string;
  /** This router's consumer name (unique per process). */
  consumer: string;
  /** An intent whose router has not touched it this long is taken over. */
  claimIdleMs: number;
  /** How long progress notes live without a finish, and an orphan's finished mark (default one day). */
  progressTtlMs?: number;
  /**
   * Called with the rows a finish wrote (one entry) and its ledger entry id
   * (the ledger buffer keeps them until drained, to append them again if
   * Redis loses them); `intentLost` when its owner wrote them with the
   * intent gone from Redis.
   */
  written?: (entryId: string, rows: string[], intentLost: boolean) => void;
}

/** An intent taken over from a silent router. */
export interface ClaimedIntent {
  id: string;
  /** The intent as its router wrote it. */
  intent: string;
  /** Its latest progress note, if any. */
  progress: string | undefined;
  /** Redis' clock when it was opened (the entry id's time). */
  openedAtMs: number;
}

const GROUP = "intents";
const TOUCH_BATCH = 500;

export class RedisIntentJournal {
  readonly key: string;
  private readonly redis: RedisLike & IntentCommands;
  /** Intents this router opened and has not finished: touched so nobody takes them over. */
  private readonly mine = new Set<string>();
  /** Intents taken over from silent routers, waiting to be finished here. */
  private readonly adopted = new Set<string>();
  private groupReady: Promise<void> | undefined;
  private lastTouch = 0;

  constructor(
    redis: RedisLike,
    private readonly opts: IntentJournalOptions,
  ) {
    this.redis = intentCommands(redis);
    this.key = intentStreamKey(opts.prefix);
  }

  ensureGroup(): Promise<void> {
    this.groupReady ??= this.redis.xgroup("CREATE", this.key, GROUP, "0", "MKSTREAM").then(
      () => undefined,
      (err: Error) => {
        if (!String(err.message).includes("BUSYGROUP")) {
          this.groupReady = undefined;
          throw err;
        }
      },
    );
    return this.groupReady;
  }

  /**
   * Appends an intent, pending on this router; resolves to its id. Once per
   * `attempt` (the request id and the attempt's number, never reused): the
   * same call again within `ttlMs` — the script resent after a reconnect —
   * resolves to the same intent instead of writing a second one.
   */
  async open(intent: string, attempt: string, ttlMs: number): Promise<string> {
    const opened = intentOpenedKey(this.opts.prefix, attempt);
    const id = String(await this.redis.syIntent_open(this.key, opened, GROUP, this.opts.consumer, intent, String(Math.max(1, Math.ceil(ttlMs)))));
    this.mine.add(id);
    return id;
  }

  /** Replaces the intent's progress note (fire and forget on the hot path). */
  async note(id: string, progress: string): Promise<void> {
    await this.redis.set(intentProgressKey(this.opts.prefix, id), progress, "PX", this.opts.progressTtlMs ?? 86_400_000);
  }

  /**
   * Finishes the attempt: its intent goes and its ledger rows (the
   * request's, then those of the attempts it failed over from) enter the
   * ledger stream as one entry, atomically. False when it was already finished (by
   * another router that took it over): then nothing was written. The
   * router that opened the intent writes its row even when the intent is
   * gone without a finisher's mark: Redis lost it (budget_intent_finish.lua).
   */
  async finish(id: string, row: string, attempts: readonly string[] = []): Promise<boolean> {
    const prefix = this.opts.prefix;
    const as = this.mine.has(id) ? "owner" : "orphan";
    const ttl = String(this.opts.progressTtlMs ?? 86_400_000);
    const rows = [row, ...attempts];
    const out = await this.redis.syIntent_finish(this.key, this.opts.ledgerKey, intentProgressKey(prefix, id), intentFinishedKey(prefix, id), GROUP, id, as, ttl, ...rows);
    this.mine.delete(id);
    this.adopted.delete(id);
    if (!Array.isArray(out)) return false;
    this.opts.written?.(String(out[0]), rows, Number(out[1]) === 0);
    return true;
  }

  /** Drops an intent without a row (the attempt was refused or failed before anything was charged). */
  async retire(id: string): Promise<void> {
    await this.redis.multi().xack(this.key, GROUP, id).xdel(this.key, id).del(intentProgressKey(this.opts.prefix, id)).exec();
    this.mine.delete(id);
    this.adopted.delete(id);
  }

  /** Whether this router opened the intent and has not finished it (a live request). */
  isMine(id: string): boolean {
    return this.mine.has(id);
  }

  /** Gives up a taken-over intent without finishing it (another router may). */
  forget(id: string): void {
    this.adopted.delete(id);
  }

  /** Intents this router holds (its own live ones and those taken over). */
  get held(): number {
    return this.mine.size + this.adopted.size;
  }

  /**
   * Resets the idle time of every intent this router holds, at most every
   * claimIdleMs / 3 unless forced. Taken-over intents no longer pending were
   * finished elsewhere: they are forgotten.
   */
  async touch(force = false): Promise<void> {
    const now = Date.now();
    if (!force && now - this.lastTouch < this.opts.claimIdleMs / 3) return;
    this.lastTouch = now;
    const ids = [...this.mine, ...this.adopted];
    const alive = new Set<string>();
    for (let i = 0; i < ids.length; i += TOUCH_BATCH) {
      const batch = ids.slice(i, i + TOUCH_BATCH);
      const got = (await this.redis.call("xclaim", this.key, GROUP, this.opts.consumer, "0", ...batch, "JUSTID")) as string[];
      for (const id of got) alive.add(String(id));
    }
    for (const id of this.adopted) if (!alive.has(id)) this.adopted.delete(id);
  }

  /**
   * Takes over intents no router has touched for claimIdleMs (their routers
   * died or froze), up to `max`; returns them with their progress and Redis'
   * clock now. Already-finished (deleted) ones are dropped by Redis itself.
   */
  async claimSilent(max = 1_000): Promise<{ nowMs: number; claimed: ClaimedIntent[] }> {
    await this.ensureGroup();
    const claimed: ClaimedIntent[] = [];
    let cursor = "0-0";
    do {
      let res: [string, Array<[string, string[] | null]>, string[]?];
      try {
        res = (await this.redis.xautoclaim(this.key, GROUP, this.opts.consumer, this.opts.claimIdleMs, cursor, "COUNT", Math.min(100, max - claimed.length))) as typeof res;
      } catch (err) {
        // Redis lost the stream and its group (restarted empty): the next scan makes them again.
        if (String((err as Error)?.message).includes("NOGROUP")) this.groupReady = undefined;
        throw err;
      }
      cursor = String(res[0]);
      for (const [id, fields] of res[1] ?? []) {
        const text = fields?.[1];
        if (!text) continue;
        claimed.push({ id: String(id), intent: text, progress: undefined, openedAtMs: Number(String(id).split("-")[0]) });
      }
    } while (cursor !== "0-0" && claimed.length < max);
    // Redis' clock (the entry ids' clock) on its own: a Cluster pipeline must stay in one slot, TIME has none.
    const [sec, usec] = (await this.redis.time()) as unknown as [string, string];
    if (claimed.length > 0) {
      const pipe = this.redis.pipeline();
      for (const c of claimed) pipe.get(intentProgressKey(this.opts.prefix, c.id));
      const out = (await pipe.exec()) ?? [];
      claimed.forEach((c, i) => {
        const p = out[i]?.[1];
        if (typeof p === "string") c.progress = p;
      });
    }
    for (const c of claimed) if (!this.mine.has(c.id)) this.adopted.add(c.id);
    return { nowMs: Number(sec) * 1000 + Math.floor(Number(usec) / 1000), claimed };
  }

  /**
   * Forgets dead routers' consumers: those holding no intent, silent for
   * `minIdleMs` (checked and deleted atomically, so no intent is dropped).
   * Returns how many went.
   */
  async pruneConsumers(minIdleMs: number): Promise<number> {
    return Number(await this.redis.syIntent_prune(this.key, this.opts.consumer, String(minIdleMs), GROUP));
  }

  /** Intents in the journal (every router's), for tests. */
  async depth(): Promise<number> {
    return this.redis.xlen(this.key);
  }

  /** Leaves the group only when nothing is pending on this router (deleting a consumer drops its pending entries). */
  async close(): Promise<void> {
    try {
      const mine = (await this.redis.xpending(this.key, GROUP, "-", "+", 1, this.opts.consumer)) as unknown[];
      if (mine.length === 0) await this.redis.xgroup("DELCONSUMER", this.key, GROUP, this.opts.consumer);
    } catch {
      // Redis away: the consumer stays; harmless.
    }
  }
}
