// spend_ledger upkeep: monthly partitions created ahead of time (routers do
// it at start and daily), and retention — old months archived to CSV, then
// detached (and dropped only when asked). Both take one Postgres advisory
// lock, so N routers starting together, or a router and a retention run,
// take turns instead of racing for the same partition.
import { createReadStream, createWriteStream, mkdirSync, renameSync, rmSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import path from "node:path";
import { pipeline } from "node:stream/promises";
import type { Sql } from "postgres";

/** pg_advisory_xact_lock key of every partition change (the text's hashtext is fixed). */
const LOCK_KEY = "switchyard:spend_ledger:partitions";
const partName = /^spend_ledger_p(\d{4})_(\d{2})$/;

/** First instant (UTC) of the month `offset` months after `at`'s. */
export function utcMonthStart(at: Date, offset = 0): Date {
  return new Date(Date.UTC(at.getUTCFullYear(), at.getUTCMonth() + offset, 1));
}

/** spend_ledger_pYYYY_MM for the UTC month starting at `month`. */
export function partitionName(month: Date): string {
  return `spend_ledger_p${month.getUTCFullYear()}_${String(month.getUTCMonth() + 1).padStart(2, "0")}`;
}

function monthOf(name: string): Date | undefined {
  const m = partName.exec(name);
  return m ? new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, 1)) : undefined;
}

/**
 * Creates the partitions of the current UTC month and the `monthsAhead`
 * after it, one month per transaction under the advisory lock (rows of those
 * months already in the default partition move into theirs). Returns the
 * partitions this call created; a month another router created first is
 * simply found.
 */
export async function ensureLedgerPartitionsAhead(sql: Sql, opts: { now?: Date; monthsAhead: number }): Promise<string[]> {
  const now = opts.now ?? new Date();
  const created: string[] = [];
  for (let i = 0; i <= opts.monthsAhead; i++) {
    const month = utcMonthStart(now, i);
    const made = await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(hashtext(${LOCK_KEY}))`;
      const [row] = await tx`select spend_ledger_ensure_partition(${month.toISOString()}::timestamptz) as name`;
      return (row?.name as string | null) ?? null;
    });
    if (made) created.push(made);
  }
  return created;
}

export interface LedgerPartition {
  name: string;
  /** First instant of its UTC month. */
  month: Date;
  /** Attached to spend_ledger (false: a table left detached by retention). */
  attached: boolean;
}

/** Monthly partitions, attached and detached, oldest first (the default partition is not one). */
export async function listLedgerPartitions(sql: Sql): Promise<LedgerPartition[]> {
  const rows = await sql<{ name: string; attached: boolean }[]>`
    select c.relname as name,
      exists (select 1 from pg_inherits i where i.inhrelid = c.oid and i.inhparent = 'spend_ledger'::regclass) as attached
    from pg_class c
    join pg_namespace n on n.oid = c.relnamespace and n.nspname = current_schema()
    where c.relkind in ('r', 'p') and c.relname ~ '^spend_ledger_p[0-9]{4}_[0-9]{2}$'`;
  return rows
    .map((r) => ({ name: r.name, month: monthOf(r.name)!, attached: r.attached }))
    .sort((a, b) => a.month.getTime() - b.month.getTime());
}

export interface RetentionOptions {
  /** Months kept attached: the current UTC month and the keepMonths − 1 before it (≥ 1). */
  keepMonths: number;
  /** Each old partition is written to DIR/<partition>.csv (verified) before it is detached. */
  archiveDir?: string;
  /** Drop each detached partition after its archive was verified (needs archiveDir). Otherwise it stays as a detached table. */
  drop?: boolean;
  now?: Date;
}

export interface RetainedPartition {
  name: string;
  rows: number;
  /** The CSV written, if archiving. */
  archive?: string;
  dropped: boolean;
}

/**
 * Retention: every attached monthly partition older than the kept months is
 * archived (COPY … TO STDOUT as CSV with a header: Postgres' own text for
 * each value, so bigints and numerics are exact; timestamps in UTC), the
 * file checked to hold as many records as the partition, then detached —
 * and dropped only with `drop`. Rows of those months still sitting in the
 * default partition are moved into their month first, so none is missed.
 */
export async function applyLedgerRetention(sql: Sql, opts: RetentionOptions): Promise<RetainedPartition[]> {
  if (!Number.isInteger(opts.keepMonths) || opts.keepMonths < 1) throw new RangeError("keepMonths must be an integer ≥ 1");
  if (opts.drop && !opts.archiveDir) throw new RangeError("drop needs an archive directory: nothing is deleted without its CSV");
  const cutoff = utcMonthStart(opts.now ?? new Date(), -(opts.keepMonths - 1));
  if (opts.archiveDir) mkdirSync(opts.archiveDir, { recursive: true });
  // Old months' rows that landed in the default partition get their own partition first.
  const strays = await sql<{ month: Date }[]>`
    select distinct date_trunc('month', started_at at time zone 'UTC') at time zone 'UTC' as month
    from spend_ledger_default where started_at < ${cutoff.toISOString()}::timestamptz`;
  for (const s of strays) {
    await sql.begin(async (tx) => {
      await tx`select pg_advisory_xact_lock(hashtext(${LOCK_KEY}))`;
      await tx`select spend_ledger_ensure_partition(${new Date(s.month).toISOString()}::timestamptz)`;
    });
  }
  const old = (await listLedgerPartitions(sql)).filter((p) => p.attached && p.month < cutoff);
  const done: RetainedPartition[] = [];
  for (const p of old) {
    // One connection per partition: the advisory lock is held across the archive and the detach.
    const conn = await sql.reserve();
    try {
      await conn`select pg_advisory_lock(hashtext(${LOCK_KEY}))`;
      try {
        const [counted] = await conn<{ n: string }[]>`select count(*)::bigint as n from ${conn(p.name)}`;
        const rows = Number(counted!.n);
        let archive: string | undefined;
        if (opts.archiveDir) {
          archive = path.join(opts.archiveDir, `${p.name}.csv`);
          await conn`set time zone 'UTC'`;
          await archivePartition(conn as unknown as Sql, p.name, archive);
          const records = await countCsvRecords(archive);
          if (records !== rows + 1) throw new Error(`archive ${archive} holds ${records - 1} rows, ${p.name} ${rows}: left attached`);
        }
        // DETACH locks spend_ledger exclusively: behind a long finance query it would hold every
        // ledger insert up meanwhile (rows wait in the buffer), so it gives up instead; run it again later.
        await conn`set lock_timeout = '5s'`;
        await conn.unsafe(`alter table spend_ledger detach partition ${quoteIdent(p.name)}`);
        let dropped = false;
        if (opts.drop) {
          await conn.unsafe(`drop table ${quoteIdent(p.name)}`);
          dropped = true;
        }
        done.push({ name: p.name, rows, ...(archive ? { archive } : {}), dropped });
      } finally {
        await conn`select pg_advisory_unlock(hashtext(${LOCK_KEY}))`;
        // The connection goes back to the pool as it came.
        await conn`reset lock_timeout`;
        await conn`reset time zone`;
      }
    } finally {
      conn.release();
    }
  }
  return done;
}

function quoteIdent(name: string): string {
  if (!partName.test(name)) throw new RangeError(`not a ledger partition: ${name}`);
  return `"${name}"`;
}

/** Writes the partition as CSV with a header to `file` (via a temporary file, renamed once complete and synced). */
async function archivePartition(sql: Sql, name: string, file: string): Promise<void> {
  const tmp = `${file}.partial`;
  try {
    const source = await sql.unsafe(`copy (select * from ${quoteIdent(name)} order by started_at, request_id) to stdout with (format csv, header)`).readable();
    await pipeline(source, createWriteStream(tmp, { mode: 0o640 }));
    const fh = await open(tmp, "r+");
    await fh.sync();
    await fh.close();
    renameSync(tmp, file);
  } catch (err) {
    rmSync(tmp, { force: true });
    throw err;
  }
}

/** CSV records in a file (quoted fields may hold line breaks), the header included. */
export async function countCsvRecords(file: string): Promise<number> {
  if (statSync(file).size === 0) return 0;
  let records = 0;
  let quoted = false;
  let last = 10;
  for await (const chunk of createReadStream(file) as AsyncIterable<Buffer>) {
    for (const b of chunk) {
      if (b === 34) quoted = !quoted;
      else if (b === 10 && !quoted) records++;
      last = b;
    }
  }
  return last === 10 ? records : records + 1;
}
