// `switchyard spend --from DATE --to DATE [--tenant NAME] [--by day|backend|model]
// [--format table|csv]`: what finance reads, straight from the spend ledger.
// Two columns count the requests another router finished after the serving
// one died (cost looked up, or held), so they stand out; the last counts the
// rows of paid attempts a request failed over from after their provider
// accepted them (FINANCE.md): their cost is in the line, but they are not
// requests — so a provider's line can show cost with 0 requests. Appended
// last, so a spreadsheet reading the CSV by position reads what it did.
// Money is printed exactly: micro-cents as integers and USD as a decimal
// derived from them with integer arithmetic (db/money.ts).
import { findTenant, formatMicroAsUsd, spendByDay, type SpendRow } from "@switchyard/db";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

const dayPattern = /^\d{4}-\d{2}-\d{2}$/;
/** A real calendar day in YYYY-MM-DD (2026-13-01 and 2026-02-30 are not). */
function isDay(s: string): boolean {
  if (!dayPattern.test(s)) return false;
  const d = new Date(`${s}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) === s;
}

function csvField(v: string): string {
  return /[",\n]/.test(v) ? `"${v.replaceAll('"', '""')}"` : v;
}

export async function spendCommand(flags: { config?: string; from?: string; to?: string; tenant?: string; by?: string; format?: string }): Promise<number> {
  // No dates: each tenant's own today, in its budget's time zone (the UTC
  // date is yesterday or tomorrow for a tenant far from UTC).
  const first = flags.from ?? flags.to;
  const range = first === undefined ? undefined : { from: first, to: flags.to ?? first };
  if (range && (!isDay(range.from) || !isDay(range.to))) throw new UsageError("spend: --from and --to take real YYYY-MM-DD dates");
  if (range && range.from > range.to) throw new UsageError(`spend: --from ${range.from} is after --to ${range.to}`);
  const by = (flags.by ?? "day") as "day" | "backend" | "model";
  if (!["day", "backend", "model"].includes(by)) throw new UsageError(`spend: --by must be day, backend or model (got '${flags.by}')`);
  const format = flags.format ?? "table";
  if (format !== "table" && format !== "csv") throw new UsageError(`spend: --format must be table or csv (got '${format}')`);
  const db = await openDb(configFrom(flags), { migrate: true, quiet: true });
  try {
    let tenantId: number | undefined;
    if (flags.tenant) {
      const t = await findTenant(db.db, flags.tenant);
      if (!t) {
        process.stderr.write(`error: no tenant named '${flags.tenant}'\n`);
        return 1;
      }
      tenantId = t.id;
    }
    const rows: SpendRow[] = await spendByDay(db.db, { ...range, tenantId, by });
    const header = ["day", "tenant", ...(by !== "day" ? ["backend"] : []), ...(by === "model" ? ["model"] : []), "requests", "prompt_tokens", "completion_tokens", "cost_micro_cents", "cost_usd", "crash_finished", "crash_finished_micro_cents", "abandoned_attempts"];
    const lines = rows.map((r) => [
      r.day,
      r.tenantName ?? String(r.tenantId),
      ...(by !== "day" ? [r.backend ?? ""] : []),
      ...(by === "model" ? [r.model ?? ""] : []),
      String(r.requests),
      String(r.promptTokens),
      String(r.completionTokens),
      r.costMicro.toString(),
      formatMicroAsUsd(r.costMicro),
      // Requests another router finished after the serving one died (included above).
      String(r.crashFinishedRequests),
      r.crashFinishedCostMicro.toString(),
      // Rows of abandoned paid attempts (their cost is in cost_micro_cents above).
      String(r.abandonedAttempts),
    ]);
    if (format === "csv") {
      process.stdout.write([header, ...lines].map((l) => l.map(csvField).join(",")).join("\n") + "\n");
    } else {
      const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
      const fmt = (l: string[]) => l.map((v, i) => (i >= header.length - 8 ? v.padStart(widths[i]!) : v.padEnd(widths[i]!))).join("  ");
      process.stdout.write([fmt(header), ...lines.map(fmt)].join("\n") + "\n");
      if (lines.length === 0) process.stderr.write(range ? `no spend between ${range.from} and ${range.to}\n` : "no spend today (each tenant's day in its time zone)\n");
    }
    return 0;
  } finally {
    await db.close();
    await db.stopEmbedded();
  }
}
