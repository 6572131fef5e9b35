// Spend ledger writes and finance reads. Rows are appended in batches,
// idempotently on (request_id, started_at); each row lands in its UTC month's
// partition, created on first use.
import { and, desc, eq, inArray, lte, sql, type SQL } from "drizzle-orm";
import type { Sql } from "postgres";
import type { Db } from "./client.ts";
import { budgets, crashCostSources, prices, spendLedger, tenants, type NewLedgerRow, type Price } from "./schema/index.ts";

/** Rows per INSERT: 19 columns × 1000 stays far below Postgres' 65,535 parameters. */
export const LEDGER_BATCH_ROWS = 1000;

// Months whose partition this process has already ensured, per database handle.
const ensuredMonths = new WeakMap<Db, Set<string>>();

function utcMonth(d: Date): string {
  return d.toISOString().slice(0, 7);
}

// ── A row as text: what the Redis ledger stream holds, and what Postgres reads back. ──

const dateFields = ["startedAt", "firstTokenAt", "finishedAt"] as const;

/** The first bytes of every row encodeLedgerRow writes: a row's UTC month is the 7 characters after them. */
export const LEDGER_TEXT_HEAD = '{"startedAt":"';

const jsonText = (s: string | null | undefined): string => (s == null ? "null" : JSON.stringify(s));
const jsonInt = (n: number | null | undefined): string => (n == null ? "null" : String(n));
// toISOString's text, from the minute's prefix (computed once a minute) and
// the seconds and milliseconds: a row has up to three instants, and
// toISOString was most of what encoding it cost.
let isoMinute = Number.NaN;
let isoPrefix = "";
const pad3 = (n: number): string => (n < 10 ? "00" : n < 100 ? "0" : "") + n;
function jsonTime(d: Date | null | undefined): string {
  if (d == null) return "null";
  const ms = d.getTime();
  // Outside 1970–9999 (and an invalid date) the year's form differs, or toISOString throws: let it.
  if (!(ms >= 0 && ms < 253_402_300_800_000)) return `"${d.toISOString()}"`;
  const minute = Math.floor(ms / 60_000);
  if (minute !== isoMinute) {
    isoMinute = minute;
    isoPrefix = d.toISOString().slice(0, 17); // YYYY-MM-DDTHH:MM:
  }
  const rest = ms - minute * 60_000;
  const sec = Math.floor(rest / 1000);
  return `"${isoPrefix}${sec < 10 ? "0" : ""}${sec}.${pad3(rest - sec * 1000)}Z"`;
}

/**
 * A row as stream text: bigints as decimal strings, instants as ISO strings,
 * startedAt first (LEDGER_TEXT_HEAD: the drain reads the row's month from
 * its first bytes). Written field by field, once per request: no spread
 * copy of the row and no Date.toJSON lookups inside JSON.stringify.
 */
export function encodeLedgerRow(row: NewLedgerRow): string {
  return (
    `{"startedAt":${jsonTime(row.startedAt)},"requestId":${jsonText(row.requestId)},"tenantId":${jsonInt(row.tenantId)},"keyId":${jsonInt(row.keyId)}` +
    `,"backend":${jsonText(row.backend)},"model":${jsonText(row.model)},"worker":${jsonText(row.worker)}` +
    `,"promptTokens":${jsonInt(row.promptTokens ?? 0)},"completionTokens":${jsonInt(row.completionTokens ?? 0)},"cachedTokens":${jsonInt(row.cachedTokens ?? 0)},"cacheWriteTokens":${jsonInt(row.cacheWriteTokens ?? 0)}` +
    `,"costMicro":"${String(row.costMicro)}","costSource":${jsonText(row.costSource)},"status":${jsonText(row.status)}` +
    `,"firstTokenAt":${jsonTime(row.firstTokenAt)},"finishedAt":${jsonTime(row.finishedAt)},"ttftMs":${jsonInt(row.ttftMs)},"durationMs":${jsonInt(row.durationMs)}` +
    `,"providerGenerationId":${jsonText(row.providerGenerationId)}}`
  );
}

/** A row text back as a row (a row Postgres refused, read one by one; tests). */
export function decodeLedgerRow(text: string): NewLedgerRow {
  const o = JSON.parse(text) as Record<string, unknown>;
  for (const f of dateFields) if (o[f] != null) o[f] = new Date(o[f] as string);
  o.costMicro = BigInt(o.costMicro as string);
  delete o.createdAt;
  return o as unknown as NewLedgerRow;
}

/**
 * A row text's UTC month (YYYY-MM): from its first bytes when encodeLedgerRow
 * wrote it, else (an older text) from its parsed startedAt; undefined for a
 * text that is no row at all (Postgres refuses it in the INSERT).
 */
export function ledgerTextMonth(text: string): string | undefined {
  if (text.startsWith(LEDGER_TEXT_HEAD) && text.charCodeAt(LEDGER_TEXT_HEAD.length + 4) === 0x2d /* - */) return text.slice(LEDGER_TEXT_HEAD.length, LEDGER_TEXT_HEAD.length + 7);
  try {
    const at = new Date((JSON.parse(text) as { startedAt?: unknown })?.startedAt as string);
    return Number.isNaN(at.getTime()) ? undefined : utcMonth(at);
  } catch {
    return undefined;
  }
}

/** Creates each month's partition once per process and database handle (rows never pile up in the default partition). */
async function ensureMonths(db: Db, months: Iterable<string>): Promise<void> {
  let seen = ensuredMonths.get(db);
  if (!seen) ensuredMonths.set(db, (seen = new Set()));
  for (const month of months) {
    if (seen.has(month)) continue;
    await db.execute(sql`select spend_ledger_ensure_partition(${`${month}-01T00:00:00Z`}::timestamptz)`);
    seen.add(month);
  }
}

/**
 * Appends ledger rows given as their text (encodeLedgerRow), as the Redis
 * stream holds them: the batch goes to Postgres as one JSON array parameter
 * that json_to_recordset reads, so the drain neither parses a row nor
 * builds a parameter per column (issue 14: the drain's decode and the
 * per-column arrays were most of the ledger's cost per request). Idempotent
 * like insertLedgerRows; a batch with a text Postgres cannot read throws
 * (SQLSTATE class 22), and the caller decides what to drop.
 */
export async function insertLedgerTexts(db: Db, texts: readonly string[]): Promise<{ inserted: number }> {
  if (texts.length === 0) return { inserted: 0 };
  const months = new Set<string>();
  for (const t of texts) {
    const month = ledgerTextMonth(t);
    if (month) months.add(month);
  }
  await ensureMonths(db, months);
  const client = (db as unknown as { $client: Sql }).$client;
  let inserted = 0;
  for (let i = 0; i < texts.length; i += LEDGER_BATCH_ROWS) {
    const batch = texts.length <= LEDGER_BATCH_ROWS ? texts : texts.slice(i, i + LEDGER_BATCH_ROWS);
    // The command tag counts the rows that were new (ON CONFLICT skips the others): no RETURNING rows to read back.
    const done = await client`
      insert into spend_ledger (request_id, tenant_id, key_id, backend, model, worker, prompt_tokens, completion_tokens,
        cached_tokens, cache_write_tokens, cost_micro, cost_source, status, started_at, first_token_at, finished_at,
        ttft_ms, duration_ms, provider_generation_id)
      select "requestId", "tenantId", "keyId", backend, model, worker, coalesce("promptTokens", 0), coalesce("completionTokens", 0),
        coalesce("cachedTokens", 0), coalesce("cacheWriteTokens", 0), "costMicro", "costSource", status, "startedAt", "firstTokenAt", "finishedAt",
        "ttftMs", "durationMs", "providerGenerationId"
      from json_to_recordset(${"[" + batch.join(",") + "]"}::json) as r("requestId" text, "tenantId" bigint, "keyId" bigint,
        backend text, model text, worker text, "promptTokens" int, "completionTokens" int, "cachedTokens" int, "cacheWriteTokens" int,
        "costMicro" bigint, "costSource" cost_source, status request_status, "startedAt" timestamptz, "firstTokenAt" timestamptz,
        "finishedAt" timestamptz, "ttftMs" int, "durationMs" int, "providerGenerationId" text)
      on conflict (request_id, started_at) do nothing`;
    inserted += done.count;
  }
  return { inserted };
}


/**
 * Appends ledger rows. A row already present (same request_id and started_at)
 * is skipped, so a settle retried any number of times leaves one row — as
 * long as every retry carries the request's original started_at. Before
 * inserting, the partition of each month in the batch is created if missing
 * (once per month per process), so rows never pile up in the default
 * partition. Returns how many rows were new.
 */
export async function insertLedgerRows(db: Db, rows: readonly NewLedgerRow[]): Promise<{ inserted: number }> {
  if (rows.length === 0) return { inserted: 0 };
  await ensureMonths(db, new Set(rows.map((r) => utcMonth(r.startedAt))));
  // One statement per batch with one array parameter per column (unnest):
  // 19 parameters instead of 19 per row, and no per-row query building —
  // the drain's cost per row is the rows' bytes, not the SQL around them.
  const client = (db as unknown as { $client: Sql }).$client;
  let inserted = 0;
  for (let i = 0; i < rows.length; i += LEDGER_BATCH_ROWS) {
    const batch = rows.slice(i, i + LEDGER_BATCH_ROWS);
    const col = <T extends string | number | null>(f: (r: NewLedgerRow) => T) => client.array(batch.map(f) as never[]);
    const iso = (d: Date | null | undefined) => (d ? d.toISOString() : null);
    const done = await client`
      insert into spend_ledger (request_id, tenant_id, key_id, backend, model, worker, prompt_tokens, completion_tokens,
        cached_tokens, cache_write_tokens, cost_micro, cost_source, status, started_at, first_token_at, finished_at,
        ttft_ms, duration_ms, provider_generation_id)
      select * from unnest(
        ${col((r) => r.requestId)}::text[], ${col((r) => r.tenantId)}::bigint[], ${col((r) => r.keyId ?? null)}::bigint[],
        ${col((r) => r.backend)}::text[], ${col((r) => r.model)}::text[], ${col((r) => r.worker ?? null)}::text[],
        ${col((r) => r.promptTokens ?? 0)}::int[], ${col((r) => r.completionTokens ?? 0)}::int[],
        ${col((r) => r.cachedTokens ?? 0)}::int[], ${col((r) => r.cacheWriteTokens ?? 0)}::int[],
        ${col((r) => String(r.costMicro))}::bigint[], ${col((r) => r.costSource)}::cost_source[], ${col((r) => r.status)}::request_status[],
        ${col((r) => iso(r.startedAt))}::timestamptz[], ${col((r) => iso(r.firstTokenAt))}::timestamptz[], ${col((r) => iso(r.finishedAt))}::timestamptz[],
        ${col((r) => r.ttftMs ?? null)}::int[], ${col((r) => r.durationMs)}::int[], ${col((r) => r.providerGenerationId ?? null)}::text[]
      )
      on conflict (request_id, started_at) do nothing
      returning request_id`;
    inserted += done.length;
  }
  return { inserted };
}

/**
 * Creates the monthly partitions covering [from, to] (whole UTC months, both
 * ends included) and moves rows of those months out of the default partition.
 * Returns the partitions created. Safe to run concurrently from many routers.
 */
export async function ensurePartitions(db: Db, from: Date, to: Date): Promise<string[]> {
  const rows = await db.execute<{ name: string }>(
    sql`select spend_ledger_ensure_partitions(${from.toISOString()}::timestamptz, ${to.toISOString()}::timestamptz) as name`,
  );
  return rows.map((r) => r.name);
}

export type SpendGrouping = "day" | "backend" | "model";

export interface SpendQuery {
  /** First day, YYYY-MM-DD, in each tenant's budget time zone (UTC without a budget). */
  from: string;
  /** Last day, included. */
  to: string;
  tenantId?: number;
  /** day: per tenant × day; backend: … × backend; model: … × backend × model. */
  by?: SpendGrouping;
}

export interface SpendRow {
  tenantId: number;
  tenantName: string | null;
  day: string;
  backend: string | null;
  model: string | null;
  requests: number;
  promptTokens: number;
  completionTokens: number;
  cachedTokens: number;
  costMicro: bigint;
  /** Of `requests`, those another router finished after the serving one died (cost_source provider_lookup, usage_on_crash, hold_on_crash). */
  crashFinishedRequests: number;
  /** Their cost, included in costMicro. */
  crashFinishedCostMicro: bigint;
}

const dayPattern = /^\d{4}-\d{2}-\d{2}$/;
/** Rows finished by another router after the serving one died. */
const crashFinished = sql`${spendLedger.costSource} in (${sql.join(crashCostSources.map((s) => sql`${s}`), sql`, `)})`;
const bigintOf = (v: unknown) => BigInt(v as string);

/**
 * Spend per tenant and day (the tenant's day), optionally split by backend or
 * model; what `switchyard spend` prints. Sums are exact bigint micro-cents.
 */
export async function spendByDay(db: Db, q: SpendQuery): Promise<SpendRow[]> {
  if (!dayPattern.test(q.from) || !dayPattern.test(q.to)) throw new RangeError("from/to must be YYYY-MM-DD");
  const by = q.by ?? "day";
  const day = sql<string>`((${spendLedger.startedAt} at time zone coalesce(${budgets.timeZone}, 'UTC'))::date)::text`;
  const backend = by === "day" ? sql<string | null>`null::text` : sql<string | null>`${spendLedger.backend}`;
  const model = by === "model" ? sql<string | null>`${spendLedger.model}` : sql<string | null>`null::text`;
  const conditions: SQL[] = [
    // Any zone's day D lies within UTC [D-1, D+2): this bound lets Postgres
    // prune partitions before the exact per-tenant day test.
    sql`${spendLedger.startedAt} >= (${q.from}::date - 1)::timestamp at time zone 'UTC'`,
    sql`${spendLedger.startedAt} < (${q.to}::date + 2)::timestamp at time zone 'UTC'`,
    sql`${day}::date between ${q.from}::date and ${q.to}::date`,
  ];
  if (q.tenantId !== undefined) conditions.push(eq(spendLedger.tenantId, q.tenantId));
  const rows = await db
    .select({
      tenantId: spendLedger.tenantId,
      tenantName: tenants.name,
      day,
      backend,
      model,
      requests: sql<number>`count(*)`.mapWith(Number),
      promptTokens: sql<number>`sum(${spendLedger.promptTokens})`.mapWith(Number),
      completionTokens: sql<number>`sum(${spendLedger.completionTokens})`.mapWith(Number),
      cachedTokens: sql<number>`sum(${spendLedger.cachedTokens})`.mapWith(Number),
      costMicro: sql<bigint>`sum(${spendLedger.costMicro})::bigint`.mapWith(bigintOf),
      crashFinishedRequests: sql<number>`count(*) filter (where ${crashFinished})`.mapWith(Number),
      crashFinishedCostMicro: sql<bigint>`coalesce(sum(${spendLedger.costMicro}) filter (where ${crashFinished}), 0)::bigint`.mapWith(bigintOf),
    })
    .from(spendLedger)
    .leftJoin(tenants, eq(tenants.id, spendLedger.tenantId))
    .leftJoin(budgets, eq(budgets.tenantId, spendLedger.tenantId))
    .where(and(...conditions))
    .groupBy(sql`1, 2, 3, 4, 5`)
    .orderBy(sql`3, 2, 1, 4, 5`);
  return rows;
}

/**
 * Ledger spend of one tenant on one of its days, and which of `requestIds`
 * already have a row: what reconcile feeds BudgetStore.rebuild.
 */
export async function tenantDaySpend(
  db: Db,
  tenantId: number,
  day: string,
  requestIds: readonly string[] = [],
): Promise<{ spentMicro: bigint; ledgeredRequestIds: string[] }> {
  const [row] = await spendByDay(db, { from: day, to: day, tenantId, by: "day" });
  let ledgered: string[] = [];
  if (requestIds.length > 0) {
    const found = await db
      .selectDistinct({ requestId: spendLedger.requestId })
      .from(spendLedger)
      .where(
        and(
          eq(spendLedger.tenantId, tenantId),
          inArray(spendLedger.requestId, [...requestIds]),
          sql`${spendLedger.startedAt} >= (${day}::date - 1)::timestamp at time zone 'UTC'`,
          sql`${spendLedger.startedAt} < (${day}::date + 2)::timestamp at time zone 'UTC'`,
        ),
      );
    ledgered = found.map((r) => r.requestId);
  }
  return { spentMicro: row?.costMicro ?? 0n, ledgeredRequestIds: ledgered };
}

/** The price in force for a backend and model at an instant (latest effective_from ≤ at). */
export async function priceAt(db: Db, backend: string, model: string, at: Date = new Date()): Promise<Price | undefined> {
  const rows = await db
    .select()
    .from(prices)
    .where(and(eq(prices.backend, backend), eq(prices.model, model), lte(prices.effectiveFrom, at)))
    .orderBy(desc(prices.effectiveFrom))
    .limit(1);
  return rows[0];
}
