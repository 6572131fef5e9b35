// `switchyard ledger …`: spend_ledger upkeep (docs/FINANCE.md, "Partitions
// and retention").
//   ledger partitions                          list the monthly partitions (attached or detached)
//   ledger partitions ensure [--months-ahead N] create this month's and the next N's (routers do it themselves)
//   ledger retention --keep-months N [--archive-dir DIR] [--drop]
//                                              archive (CSV) and detach the months before the N kept
import { applyLedgerRetention, ensureLedgerPartitionsAhead, listLedgerPartitions } from "@switchyard/db";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

export interface LedgerFlags {
  config?: string;
  "keep-months"?: string;
  "archive-dir"?: string;
  "months-ahead"?: string;
  drop?: boolean;
}

/** A whole number ≥ min written in digits ("3", not "3.0", "1e1" or "-1"). */
function wholeNumber(flag: string, raw: string | undefined, min: number): number {
  if (raw === undefined) throw new UsageError(`ledger: --${flag} N is required`);
  const n = /^\d{1,4}$/.test(raw) ? Number(raw) : NaN;
  if (!Number.isInteger(n) || n < min) throw new UsageError(`ledger: --${flag} must be a whole number ≥ ${min} (got '${raw}')`);
  return n;
}

const month = (d: Date) => d.toISOString().slice(0, 7);

export async function ledgerCommand(rest: string[], flags: LedgerFlags): Promise<number> {
  const [sub, action, ...extra] = rest;
  if (sub === "retention" && action === undefined) {
    const keepMonths = wholeNumber("keep-months", flags["keep-months"], 1);
    if (flags.drop && !flags["archive-dir"]) throw new UsageError("ledger retention: --drop needs --archive-dir (nothing is dropped without its CSV)");
    const db = await openDb(configFrom(flags));
    try {
      const done = await applyLedgerRetention(db.sql, { keepMonths, ...(flags["archive-dir"] ? { archiveDir: flags["archive-dir"] } : {}), drop: flags.drop === true });
      if (done.length === 0) process.stdout.write(`nothing to do: no attached partition before the ${keepMonths} month(s) kept\n`);
      for (const p of done) {
        const where = p.archive ? `archived to ${p.archive}, ` : "";
        process.stdout.write(`${p.name}: ${p.rows} rows, ${where}${p.dropped ? "detached and dropped" : "detached (kept as a table)"}\n`);
      }
      return 0;
    } finally {
      await db.close();
      await db.stopEmbedded();
    }
  }
  if (sub === "partitions" && (action === undefined || action === "ensure") && extra.length === 0) {
    const db = await openDb(configFrom(flags));
    try {
      if (action === "ensure") {
        const monthsAhead = flags["months-ahead"] === undefined ? 2 : wholeNumber("months-ahead", flags["months-ahead"], 0);
        const created = await ensureLedgerPartitionsAhead(db.sql, { monthsAhead });
        process.stdout.write(created.length > 0 ? `created ${created.join(", ")}\n` : "every partition already exists\n");
        return 0;
      }
      process.stdout.write("partition                month    state\n");
      for (const p of await listLedgerPartitions(db.sql)) process.stdout.write(`${p.name.padEnd(24)} ${month(p.month)}  ${p.attached ? "attached" : "detached"}\n`);
      return 0;
    } finally {
      await db.close();
      await db.stopEmbedded();
    }
  }
  throw new UsageError("ledger: use 'ledger retention --keep-months N [--archive-dir DIR] [--drop]', 'ledger partitions' or 'ledger partitions ensure [--months-ahead N]'");
}
