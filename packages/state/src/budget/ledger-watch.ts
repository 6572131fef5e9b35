// Where the ledger stream stands, for a router that keeps the rows it
// appended until they have left the stream (RedisLedgerBuffer): which Redis
// answers (a restart, a failover or a flush shows as a new identity: the
// rows it still keeps may be gone and are appended again), and the stream's
// first entry (every row before it was drained into Postgres).
import { randomBytes } from "node:crypto";
import { luaSource } from "../lua.ts";
import type { RedisLike } from "../redis.ts";

/** The ledger's mark (ledger_watch.lua): a random name, gone with the data. Same hash tag as the stream. */
export function ledgerMarkKey(prefix: string): string {
  return `${prefix}{ledger}:mark`;
}

export interface LedgerStreamState {
  /** The Redis answering (its run_id) and the mark: a new one means data may have been lost since the last look. */
  identity: string;
  /** Entries in the stream now. */
  length: number;
  /** The first entry's id ('' when the stream is empty or missing): every entry before it has been deleted. */
  first: string;
  /** The last id the stream generated ('' when it does not exist). */
  last: string;
}

type WatchCommand = { syLedger_watch(stream: string, mark: string, candidate: string): Promise<[string, number | string, string, string]> };
const registered = new WeakSet<RedisLike>();

/**
 * The connection with ledger_watch.lua defined on it (once per connection).
 * Called when the connection's user is built, not at its first look: on an
 * auto-pipelined connection, a script first defined while a pipeline is
 * open cannot join it.
 */
export function ledgerWatchCommands(redis: RedisLike): RedisLike & WatchCommand {
  if (!registered.has(redis)) {
    redis.defineCommand("syLedger_watch", { numberOfKeys: 2, lua: luaSource("ledger_watch.lua") });
    registered.add(redis);
  }
  return redis as RedisLike & WatchCommand;
}

/** One round trip: the ledger stream's state (ledger_watch.lua). */
export async function watchLedgerStream(redis: RedisLike, stream: string, mark: string): Promise<LedgerStreamState> {
  const [identity, length, first, last] = await ledgerWatchCommands(redis).syLedger_watch(stream, mark, randomBytes(8).toString("hex"));
  return { identity: String(identity), length: Number(length), first: String(first), last: String(last) };
}

/** Whether stream id `a` comes before `b` ("ms-seq", compared as numbers). */
export function streamIdBefore(a: string, b: string): boolean {
  const da = a.indexOf("-");
  const db = b.indexOf("-");
  const ma = Number(a.slice(0, da));
  const mb = Number(b.slice(0, db));
  return ma < mb || (ma === mb && Number(a.slice(da + 1)) < Number(b.slice(db + 1)));
}
