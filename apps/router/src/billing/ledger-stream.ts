// The durable ledger buffer: every router appends each request's row to one
// Redis stream (XADD — durable before the budget is settled; the rows
// settled in one turn of the event loop go out together as one entry, one
// field per row, so a busy router costs Redis one append per turn rather
// than per request), and every
// router drains that stream into Postgres in batches through a consumer
// group. A batch is acknowledged (XACK + XDEL) only after its INSERT
// committed, and inserts are idempotent on (request_id, started_at), so:
//   - Postgres down: rows wait in the stream and are retried with backoff;
//   - a router killed mid-batch: its unacknowledged rows are claimed by
//     another router after billing.ledgerClaimIdleMs (XAUTOCLAIM);
//   - a batch delivered twice: the second insert adds nothing;
//   - Redis losing rows it acknowledged (restarted without persistence, the
//     last second of an AOF, a failover before replication, a flush): each
//     router keeps the rows it appended until they have left the stream
//     (ledger_watch.lua, every KEEP_CHECK_MS), and appends them again when
//     Redis answers as another server or without the ledger's mark.
import { decodeLedgerRow, encodeLedgerRow, type NewLedgerRow } from "@switchyard/db";

// The row text is the ledger's (db/ledger.ts): Postgres reads it as it is.
export { decodeLedgerRow, encodeLedgerRow };
import { duplicateRedis, ledgerMarkKey, ledgerWatchCommands, streamIdBefore, watchLedgerStream, type RedisLike } from "@switchyard/state";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import type { LedgerSink } from "./ledger.ts";

/** The Redis stream holding buffered ledger rows, for a key prefix. */
export function ledgerStreamKey(prefix: string): string {
  return `${prefix}{ledger}:stream`;
}

export interface RedisLedgerOptions {
  prefix: string;
  /** This router's name in the consumer group (unique per process). */
  consumer: string;
  batch: number;
  flushMs: number;
  claimIdleMs: number;
  log: Logger;
  metrics?: RouterMetrics;
}

type StreamEntry = [id: string, fields: string[] | null];

/** Rows per stream entry at most: a drain step reads `batch` entries, so this bounds its rows. */
export const LEDGER_ROWS_PER_ENTRY = 64;

/** How often a router looks at where the stream starts, to let go of its drained rows (and at which Redis answers). */
export const KEEP_CHECK_MS = 500;

/**
 * Rows a router keeps at most against Redis losing them (a row's text is
 * about 240 bytes: some 50 MB in all). Past it (Postgres away for long, the
 * stream growing), the oldest are let go and rest on Redis' own
 * persistence alone.
 */
export const LEDGER_KEPT_ROWS_MAX = 200_000;

/** Rows this router appended as one entry, kept until that entry has left the stream. */
interface KeptEntry {
  id: string;
  texts: string[];
}

/** Postgres could not read a row's text as a row (data exception, SQLSTATE class 22). */
function unreadable(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === "string" && code.startsWith("22");
}

/** The stream has no consumer group (Redis lost it with its data). */
function noGroup(err: unknown): boolean {
  return String((err as Error)?.message).includes("NOGROUP");
}

/** The rows an entry holds: its fields are pairs, each "r" one row (an intent's finish writes one). */
export function entryRows(fields: string[] | null): string[] {
  const out: string[] = [];
  if (!fields) return out;
  for (let i = 0; i + 1 < fields.length; i += 2) if (fields[i] === "r") out.push(fields[i + 1]!);
  return out;
}
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

/** The rows of one turn, on their way to one stream entry; `done` settles when it is written (or kept for re-sending). */
interface Gathering {
  texts: string[];
  done: Promise<void>;
  resolve: () => void;
}

export class RedisLedgerBuffer implements LedgerSink {
  /**
   * Commands this buffer sends one at a time and batches itself (a turn's
   * rows in one XADD; one XREADGROUP per drain step; a look at the stream
   * every KEEP_CHECK_MS): on an auto-pipelined
   * connection each would be an ioredis Pipeline of its own for nothing.
   */
  static readonly unpipelined = ["xadd", "xreadgroup", "syLedger_watch"] as const;
  readonly key: string;
  private readonly group = "ledger";
  private readonly reader: RedisLike;
  /** Rows whose XADD failed (Redis away): re-sent before anything else. */
  private retry: string[] = [];
  private running: Promise<void> | undefined;
  private closed = false;
  private lastClaim = 0;
  /**
   * This consumer may hold rows it read and did not acknowledge: at start (a
   * restarted router keeps its consumer name), after a takeover, after a
   * failed step. Cleared when a read of its pending list comes back empty.
   */
  private ownPending = true;
  private backoffMs = 0;
  private groupReady: Promise<void> | undefined;
  /** Steps run one at a time: a flush must not finish while the drain loop holds rows it read but has not committed. */
  private tail: Promise<unknown> = Promise.resolve();
  /** Rows recorded in this turn of the event loop, appended together when it ends; each caller waits for its entry. */
  private gathering: Gathering | undefined;
  /** Appends in flight, so a flush waits for rows already recorded. */
  private readonly appending = new Set<Promise<void>>();
  /** Entries this router appended that may still be in the stream, oldest first. */
  private kept: KeptEntry[] = [];
  private keptRows = 0;
  /** The Redis the kept entries were appended to (ledger_watch.lua's identity); undefined before the first look. */
  private identity: string | undefined;
  private lastWatch = 0;
  private readonly markKey: string;

  constructor(
    // One node or a Cluster: the stream, its group and the intents share the
    // {ledger} hash tag, so every command and script here is single-slot.
    private readonly redis: RedisLike,
    /** Inserts rows given as their text (insertLedgerTexts): idempotent; throws with SQLSTATE class 22 when Postgres cannot read one. */
    private readonly write: (texts: string[]) => Promise<{ inserted: number }>,
    private readonly opts: RedisLedgerOptions,
  ) {
    this.key = ledgerStreamKey(opts.prefix);
    this.markKey = ledgerMarkKey(opts.prefix);
    ledgerWatchCommands(redis);
    // Blocking reads get their own connection: XREADGROUP BLOCK holds it.
    this.reader = duplicateRedis(redis);
    // Its failures reach read() as rejected commands (the drain loop logs them).
    this.reader.on("error", () => {});
  }

  private ensureGroup(): Promise<void> {
    this.groupReady ??= this.redis
      .xgroup("CREATE", this.key, this.group, "0", "MKSTREAM")
      .then(
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

  /** Starts draining the stream into Postgres. */
  async start(): Promise<void> {
    await this.ensureGroup();
    // Which Redis the first rows go to: a loss from here on shows as a new identity.
    await this.watch(true);
    this.running ??= this.loop();
  }

  /**
   * Resolves once the row is in Redis (or, Redis away, kept in memory for
   * re-sending). The rows gathered in one turn share one entry and one
   * promise: nothing is allocated per row but its text.
   */
  record(row: NewLedgerRow, attempts?: readonly NewLedgerRow[]): Promise<void> {
    const text = encodeLedgerRow(row);
    let g = this.gathering;
    // A request's rows go in one entry: a gathering they would push past the cap goes first.
    if (g && attempts && attempts.length > 0 && g.texts.length + 1 + attempts.length > LEDGER_ROWS_PER_ENTRY) {
      this.append(g);
      g = undefined;
    }
    if (!g) {
      let resolve!: () => void;
      const done = new Promise<void>((r) => (resolve = r));
      const gathering: Gathering = (g = this.gathering = { texts: [], done, resolve });
      // After this turn's other settles: they join the same entry.
      setImmediate(() => this.append(gathering));
    }
    g.texts.push(text);
    if (attempts) for (const a of attempts) g.texts.push(encodeLedgerRow(a));
    const { done } = g;
    if (g.texts.length >= LEDGER_ROWS_PER_ENTRY) this.append(g);
    return done;
  }

  /** One XADD for a gathered set of rows (once, whichever of the full set or the turn's end comes first). */
  private append(g: Gathering): void {
    if (this.gathering !== g) return;
    this.gathering = undefined;
    const done = this.appendEntry(g.texts).then(
      () => undefined,
      (err: Error) => {
        // Redis away: keep the rows in memory and keep trying; never drop them.
        this.retry.push(...g.texts);
        this.opts.log.warn("ledger buffer append failed; rows kept in memory", { rows: g.texts.length, queued: this.retry.length, error: err.message });
      },
    );
    this.appending.add(done);
    void done.then(() => {
      this.appending.delete(done);
      g.resolve();
    });
  }

  /** One stream entry holding these rows, one "r" field each; kept until it has left the stream. */
  private async appendEntry(texts: string[]): Promise<void> {
    const fields: string[] = [];
    for (const t of texts) fields.push("r", t);
    const id = await (this.redis.xadd as (...a: string[]) => Promise<unknown>)(this.key, "*", ...fields);
    this.keep(String(id), texts);
  }

  /**
   * Keeps rows appended to the stream as entry `id` (by this buffer, or by
   * a script: an intent's finish) until that entry has left it, so that
   * they can be appended again if Redis loses them.
   */
  keep(id: string, texts: string[]): void {
    this.kept.push({ id, texts });
    this.keptRows += texts.length;
    if (this.keptRows <= LEDGER_KEPT_ROWS_MAX) return;
    // The oldest entries go, the newest always stays.
    let n = 0;
    let letGo = 0;
    while (this.keptRows - letGo > LEDGER_KEPT_ROWS_MAX && n < this.kept.length - 1) letGo += this.kept[n++]!.texts.length;
    this.letGo(n, letGo);
    this.opts.metrics?.ledgerRows.inc({ outcome: "unkept" }, letGo);
  }

  /** Drops the `n` oldest kept entries, `rows` rows in all. */
  private letGo(n: number, rows: number): void {
    if (n === 0) return;
    this.kept = this.kept.slice(n);
    this.keptRows -= rows;
  }

  /** Rows kept against a loss of Redis' data (for tests). */
  get keptCount(): number {
    return this.keptRows;
  }

  /**
   * Looks at the stream (ledger_watch.lua; at most every KEEP_CHECK_MS
   * unless forced). The same Redis: lets go of the kept entries that have
   * left it (drained). Another Redis, or the ledger's mark gone: appends
   * every kept row again (Postgres keeps one of each: inserts are
   * idempotent on (request_id, started_at)).
   */
  private async watch(force = false): Promise<void> {
    const now = Date.now();
    if (!force && now - this.lastWatch < KEEP_CHECK_MS) return;
    this.lastWatch = now;
    const state = await watchLedgerStream(this.redis, this.key, this.markKey);
    if (this.identity !== undefined && state.identity !== this.identity) {
      const entries = this.kept;
      const rows = this.keptRows;
      this.kept = [];
      this.keptRows = 0;
      this.identity = state.identity;
      if (rows === 0) return;
      this.opts.log.warn("Redis may have lost ledger rows (another server answers, or its data is gone): appending again the rows not yet drained", { rows });
      this.opts.metrics?.ledgerRows.inc({ outcome: "replayed" }, rows);
      for (const e of entries) this.retry.push(...e.texts);
      // Sent at once; the drain step re-sends them too, before anything else, if this fails.
      await this.resend();
      return;
    }
    this.identity = state.identity;
    // Drained: the entries before the stream's first one, or (an empty stream) every one up to its last id.
    const gone = state.first ? (id: string) => streamIdBefore(id, state.first) : state.last ? (id: string) => !streamIdBefore(state.last, id) : () => false;
    let n = 0;
    let rows = 0;
    while (n < this.kept.length && gone(this.kept[n]!.id)) rows += this.kept[n++]!.texts.length;
    this.letGo(n, rows);
  }

  /**
   * Before a budget day is rebuilt from the ledger: every row settled so far
   * must be in Postgres, or the rebuild undercounts the day. So this looks
   * at the stream now (appending again what Redis lost, if it lost
   * anything) and drains what the stream holds (this router's rows and
   * those appended again included), for up to `timeoutMs`. Throws when it
   * cannot (Postgres or Redis away): the rebuild would read a ledger known
   * to be behind. Rows another router has read and is inserting are its own
   * to finish.
   */
  async recover(timeoutMs = 5_000): Promise<void> {
    await this.appended();
    await this.exclusive(() => this.watch(true));
    const deadline = Date.now() + timeoutMs;
    let regrouped = false;
    while (Date.now() < deadline) {
      let n: number;
      try {
        n = await this.exclusive(() => this.step(false));
      } catch (err) {
        // Redis came back without the group: the step made it again; once.
        if (!noGroup(err) || regrouped) throw err;
        regrouped = true;
        continue;
      }
      if (n === 0 && this.retry.length === 0) return;
    }
  }

  /** Everything recorded so far handed to Redis (or to the retry list). */
  private async appended(): Promise<void> {
    if (this.gathering) this.append(this.gathering);
    while (this.appending.size > 0) await Promise.all([...this.appending]);
  }

  private async resend(): Promise<void> {
    while (this.retry.length > 0) {
      const batch = this.retry.slice(0, LEDGER_ROWS_PER_ENTRY);
      try {
        await this.appendEntry(batch);
      } catch {
        throw new Error("ledger buffer still unreachable");
      }
      this.retry.splice(0, batch.length);
    }
  }

  private async read(id: "0" | ">", block: boolean, count = this.opts.batch): Promise<StreamEntry[]> {
    const args: Array<string | number> = ["GROUP", this.group, this.opts.consumer, "COUNT", count];
    if (block) args.push("BLOCK", this.opts.flushMs);
    args.push("STREAMS", this.key, id);
    const res = (await (this.reader.xreadgroup as (...a: Array<string | number>) => Promise<unknown>)(...args)) as Array<[string, StreamEntry[]]> | null;
    return res?.[0]?.[1] ?? [];
  }

  /** Takes over rows another router read but never acknowledged (it died). */
  private async claim(): Promise<void> {
    const now = Date.now();
    if (now - this.lastClaim < this.opts.claimIdleMs / 2) return;
    this.lastClaim = now;
    const res = (await this.redis.xautoclaim(this.key, this.group, this.opts.consumer, this.opts.claimIdleMs, "0-0", "COUNT", this.opts.batch, "JUSTID")) as unknown[];
    const ids = (res?.[1] as string[] | undefined) ?? [];
    if (ids.length > 0) {
      this.ownPending = true; // taken over into this consumer's pending list
      this.opts.log.info("ledger rows taken over from a silent router", { rows: ids.length });
    }
  }

  private exclusive<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.tail.then(fn, fn);
    this.tail = run.catch(() => undefined);
    return run;
  }

  /** One step: re-send, claim, read (own pending first), insert, acknowledge. Returns rows handled. */
  private async step(block: boolean): Promise<number> {
    try {
      return await this.stepOnce(block);
    } catch (err) {
      // Whatever it read may be left unacknowledged: the next step reads this consumer's pending first.
      this.ownPending = true;
      // Redis restarted empty (or failed over without the group): the next step creates it again.
      if (noGroup(err)) this.groupReady = undefined;
      throw err;
    }
  }

  private async stepOnce(block: boolean): Promise<number> {
    await this.ensureGroup();
    await this.resend();
    await this.watch();
    await this.claim();
    // Own pending rows are read first — but only when there may be some: an
    // idle drain otherwise asked for them on every turn, a Redis round trip
    // per flushMs (issue 14: the idle router's pollers).
    let entries = this.ownPending ? await this.read("0", false) : [];
    if (entries.length === 0) {
      this.ownPending = false;
      entries = await this.read(">", block);
      // The drain loop: a first row waits up to flushMs for company, so rows
      // that trickle in (streams ending one by one) share one INSERT and one
      // acknowledgement instead of a Redis round trip set and an INSERT each.
      if (block && entries.length > 0 && entries.length < this.opts.batch && !this.closed) {
        await sleep(this.opts.flushMs);
        entries = entries.concat(await this.read(">", false, this.opts.batch - entries.length));
      }
    }
    if (entries.length === 0) return 0;
    const ids: string[] = [];
    const texts: string[] = [];
    // Each row's lag runs from its entry's id (the append, within a turn of the request's end): no row is parsed here.
    const appendedAt: number[] = [];
    for (const [id, fields] of entries) {
      ids.push(id);
      // A deleted entry still pending comes back without fields: only ack it.
      const at = Number(id.slice(0, id.indexOf("-")));
      for (const text of entryRows(fields)) {
        texts.push(text);
        appendedAt.push(at);
      }
    }
    // An entry holds up to LEDGER_ROWS_PER_ENTRY rows: billing.ledgerBatch still bounds each INSERT.
    let inserted = 0;
    const dropped = new Set<string>();
    for (let i = 0; i < texts.length; i += this.opts.batch) {
      const r = await this.insert(texts.slice(i, i + this.opts.batch));
      inserted += r.inserted;
      for (const text of r.dropped) dropped.add(text);
    }
    await this.redis.multi().xack(this.key, this.group, ...ids).xdel(this.key, ...ids).exec();
    const now = Date.now();
    const m = this.opts.metrics;
    if (m) {
      m.ledgerRows.inc({ outcome: "committed" }, inserted);
      const kept = texts.length - dropped.size;
      if (kept > inserted) m.ledgerRows.inc({ outcome: "duplicate" }, kept - inserted);
      if (dropped.size > 0) m.ledgerRows.inc({ outcome: "dropped" }, dropped.size);
      for (let i = 0; i < texts.length; i++) if (dropped.size === 0 || !dropped.has(texts[i]!)) m.ledgerLag.observe({}, Math.max(0, now - appendedAt[i]!) / 1000);
    }
    return entries.length;
  }

  /**
   * One INSERT of rows as text. A batch Postgres cannot read (a row that is
   * not JSON, a value of the wrong type: SQLSTATE class 22) is retried row by
   * row, and only the rows refused alone are dropped, each logged; any other
   * failure (Postgres away) throws, and the rows stay in the stream.
   */
  private async insert(batch: string[]): Promise<{ inserted: number; dropped: string[] }> {
    try {
      return { inserted: (await this.write(batch)).inserted, dropped: [] };
    } catch (err) {
      if (!unreadable(err)) throw err;
    }
    let inserted = 0;
    const dropped: string[] = [];
    for (const text of batch) {
      try {
        inserted += (await this.write([text])).inserted;
      } catch (err) {
        if (!unreadable(err)) throw err;
        dropped.push(text);
        this.opts.log.error("unreadable ledger row dropped from the buffer", { row: text.slice(0, 200), error: (err as Error).message });
      }
    }
    return { inserted, dropped };
  }

  private async loop(): Promise<void> {
    while (!this.closed) {
      try {
        await this.exclusive(() => this.step(true));
        this.backoffMs = 0;
      } catch (err) {
        if (this.closed) break;
        this.backoffMs = Math.min(Math.max(this.backoffMs * 2, 100), 2_000);
        this.opts.log.warn("ledger drain failed; retrying", { retryInMs: this.backoffMs, error: (err as Error).message });
        await sleep(this.backoffMs);
      }
    }
  }

  /** Drains what is in the stream now (rows other routers are inserting excepted). */
  async flush(): Promise<void> {
    await this.appended();
    await this.ensureGroup();
    for (let i = 0; i < 10_000; i++) if ((await this.exclusive(() => this.step(false))) === 0 && this.retry.length === 0) return;
  }

  async close(): Promise<void> {
    this.closed = true;
    try {
      await this.flush();
    } catch (err) {
      // Rows stay in the stream for the next router to drain.
      this.opts.log.warn("ledger buffer not fully drained at close; rows stay in Redis", { error: (err as Error).message });
    }
    this.reader.disconnect();
    await this.running?.catch(() => {});
    try {
      // Leave no dead consumer behind — but only when it holds no unacknowledged
      // rows (deleting a consumer drops its pending entries from redelivery).
      const mine = (await this.redis.xpending(this.key, this.group, "-", "+", 1, this.opts.consumer)) as unknown[];
      if (mine.length === 0) await this.redis.xgroup("DELCONSUMER", this.key, this.group, this.opts.consumer);
    } catch {
      // Redis away: the consumer stays; harmless.
    }
  }

  /** Entries still waiting in Redis (all routers'; each holds one or more rows), for tests and the bench. */
  async depth(): Promise<number> {
    return this.redis.xlen(this.key);
  }
}
