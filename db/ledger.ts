// Spend ledger writes and finance reads. Rows are appended in batches,
// idempotently on (request_id, started_at); each row lands in its UTC month's
// partition, created on first use.
import { and, desc, eq, inArray, lte, sql, type SQL } from "drizzle-orm";
import type { Sql } from "postgres";
import type { Db } from "./client.ts";
import { budgets, crashCostSources, prices, spendLedger, tenants, type NewLedgerRow, type Price } from "./schema/index.ts";

/**
 * The row of a paid attempt the request failed over from after its provider
 * accepted it (guard.ts, orphans.ts) is keyed `<request id>/a<n>`, n its
 * place (from 1) among the request's abandoned attempts: a key of its own,
 * the same whoever writes it (the router serving the request or one
 * finishing its orphan), so it is written once like the request's row. A
 * minted request id never holds a '/': the views and `spend` count as
 * requests only the rows without one.
 *
 * A row rather than columns on the request's row (carried_micro and its
 * backend): every reader groups rows by their backend and model (the views,
 * `spend`, invoice queries), and each would have to split such a row in two
 * to book the money where it belongs; a row of its own is attributed right
 * by all of them as they are, and sums into the tenant's day unchanged.
 * No new column marks it: a router from before this that drains it inserts
 * it whole, and the key says what it is.
 */
export function attemptRowId(requestId: string, n: number): string {
  return `${requestId}/a${n}`;
}

/** Rows per INSERT: 20 columns × 1000 stays far below Postgres' 65,535 parameters. */
export const LEDGER_BATCH_ROWS = 1000;

// Months whose partition this process has already ensured, per database handle.
const ensuredMonths = new WeakMap<Db, Set<string>>();

function utcMonth(d: Date): string {
  return d.toISOString().slice(0, 7);
}

// ── A row as text: what the Redis ledger stream holds, and what Postgres reads back. ──
//
// Two forms. The row literal of the spend_ledger_text type (migration 0009):
// `(2026-12-05T23:20:25.194Z,"req_…",7,,"local",…)`, what encodeLedgerRow
// writes. And JSON (`{"startedAt":…}`), what it wrote before, and still
// writes for the rare row with a line break in a value: the drain sends row
// literals one per line. The drain reads both.

const dateFields = ["startedAt", "firstTokenAt", "finishedAt"] as const;

/** The first bytes of every JSON row text: a row's UTC month is the 7 characters after them. */
export const LEDGER_TEXT_HEAD = '{"startedAt":"';
/** The first byte of every row literal: a row's UTC month is the 7 characters after it. */
const LEDGER_RECORD_HEAD = "(";

const jsonText = (s: string | null | undefined): string => (s == null ? "null" : JSON.stringify(s));
const jsonInt = (n: number | null | undefined): string => (n == null ? "null" : String(n));
// toISOString's text, from the minute's prefix (computed once a minute) and
// the seconds and milliseconds: a row has up to three instants, and
// toISOString was most of what encoding it cost.
let isoMinute = Number.NaN;
let isoPrefix = "";
const pad3 = (n: number): string => (n < 10 ? "00" : n < 100 ? "0" : "") + n;
function isoTime(d: Date): string {
  const ms = d.getTime();
  // Outside 1970–9999 (and an invalid date) the year's form differs, or toISOString throws: let it.
  if (!(ms >= 0 && ms < 253_402_300_800_000)) return d.toISOString();
  const minute = Math.floor(ms / 60_000);
  if (minute !== isoMinute) {
    isoMinute = minute;
    isoPrefix = d.toISOString().slice(0, 17); // YYYY-MM-DDTHH:MM:
  }
  const rest = ms - minute * 60_000;
  const sec = Math.floor(rest / 1000);
  return `${isoPrefix}${sec < 10 ? "0" : ""}${sec}.${pad3(rest - sec * 1000)}Z`;
}
const jsonTime = (d: Date | null | undefined): string => (d == null ? "null" : `"${isoTime(d)}"`);

/** A row as JSON text (the form before row literals; still the form of a row with a line break in a value). */
function encodeLedgerJson(row: NewLedgerRow): string {
  return (
    `{"startedAt":${jsonTime(row.startedAt)},"requestId":${jsonText(row.requestId)},"tenantId":${jsonInt(row.tenantId)},"keyId":${jsonInt(row.keyId)}` +
    `,"backend":${jsonText(row.backend)},"model":${jsonText(row.model)},"worker":${jsonText(row.worker)}` +
    `,"promptTokens":${jsonInt(row.promptTokens ?? 0)},"completionTokens":${jsonInt(row.completionTokens ?? 0)},"cachedTokens":${jsonInt(row.cachedTokens ?? 0)},"cacheWriteTokens":${jsonInt(row.cacheWriteTokens ?? 0)}` +
    `,"costMicro":"${String(row.costMicro)}","costSource":${jsonText(row.costSource)},"status":${jsonText(row.status)}` +
    `,"firstTokenAt":${jsonTime(row.firstTokenAt)},"finishedAt":${jsonTime(row.finishedAt)},"ttftMs":${jsonInt(row.ttftMs)},"durationMs":${jsonInt(row.durationMs)}` +
    `,"providerGenerationId":${jsonText(row.providerGenerationId)},"cacheWrite1hTokens":${jsonInt(row.cacheWrite1hTokens ?? 0)}}`
  );
}

// A row literal's fields: empty is NULL; text is always quoted (so "" is an
// empty string, and commas, parentheses and spaces are plain characters),
// with its quotes and backslashes doubled, as record_in reads them.
const lineBreak = /[\n\r]/;
const hasLineBreak = (s: string | null | undefined): boolean => s != null && lineBreak.test(s);
const needsEscape = /["\\]/;
const recText = (s: string | null | undefined): string => (s == null ? "" : needsEscape.test(s) ? `"${s.replace(/["\\]/g, "$&$&")}"` : `"${s}"`);
const recInt = (n: number | null | undefined): string => (n == null ? "" : String(n));
const recTime = (d: Date | null | undefined): string => (d == null ? "" : isoTime(d));

/**
 * A row as stream text: a spend_ledger_text row literal, started_at first
 * (the drain reads the row's month from its first bytes). Written field by
 * field, once per request. A row with a line break in a text value (a
 * provider's generation id, say) is written as JSON instead: row literals
 * travel one per line.
 */
export function encodeLedgerRow(row: NewLedgerRow): string {
  if (hasLineBreak(row.requestId) || hasLineBreak(row.backend) || hasLineBreak(row.model) || hasLineBreak(row.worker) || hasLineBreak(row.providerGenerationId)) return encodeLedgerJson(row);
  // spend_ledger_text is frozen at its 19 fields (migration 0009): a router
  // from before a column reads and writes the literal, and record_in refuses
  // a literal one field short or long, so a new field would make every
  // row a router of the other version drains be dropped mid-upgrade. A
  // column added since travels in the JSON form, whose reader ignores keys
  // it does not know and defaults the keys it misses: the 1-hour cache
  // writes (migration 0013), a few Anthropic rows.
  if ((row.cacheWrite1hTokens ?? 0) > 0) return encodeLedgerJson(row);
  if (row.startedAt == null) throw new RangeError("a ledger row needs startedAt");
  return (
    `(${recTime(row.startedAt)},${recText(row.requestId)},${recInt(row.tenantId)},${recInt(row.keyId)},${recText(row.backend)},${recText(row.model)},${recText(row.worker)}` +
    `,${recInt(row.promptTokens ?? 0)},${recInt(row.completionTokens ?? 0)},${recInt(row.cachedTokens ?? 0)},${recInt(row.cacheWriteTokens ?? 0)}` +
    `,${String(row.costMicro)},${recText(row.costSource)},${recText(row.status)},${recTime(row.firstTokenAt)},${recTime(row.finishedAt)},${recInt(row.ttftMs)},${recInt(row.durationMs)}` +
    `,${recText(row.providerGenerationId)})`
  );
}

/** The fields of a row literal, in spend_ledger_text's order: null for an empty field, the text of a quoted one. */
function recordFields(text: string): (string | null)[] {
  if (text[0] !== "(" || text[text.length - 1] !== ")") throw new SyntaxError("not a row literal");
  const out: (string | null)[] = [];
  let i = 1;
  const end = text.length - 1;
  for (;;) {
    if (text[i] === '"') {
      let v = "";
      for (i++; ; i++) {
        if (i >= end) throw new SyntaxError("unterminated quoted field");
        const ch = text[i]!;
        if (ch === "\\") v += text[++i]!;
        else if (ch === '"') {
          if (text[i + 1] === '"') v += text[++i]!;
          else break;
        } else v += ch;
      }
      out.push(v);
      i++;
    } else {
      let j = i;
      while (j < end && text[j] !== ",") j++;
      out.push(j === i ? null : text.slice(i, j));
      i = j;
    }
    if (i >= end) break;
    if (text[i] !== ",") throw new SyntaxError("expected a comma");
    i++;
  }
  return out;
}

/** A row text back as a row (either form; a row Postgres refused, read one by one; tests). */
export function decodeLedgerRow(text: string): NewLedgerRow {
  if (text.startsWith(LEDGER_RECORD_HEAD)) {
    const f = recordFields(text);
    const int = (s: string | null) => (s == null ? null : Number(s));
    const time = (s: string | null) => (s == null ? null : new Date(s));
    return {
      startedAt: time(f[0]!)!,
      requestId: f[1]!,
      tenantId: int(f[2]!)!,
      keyId: int(f[3]!),
      backend: f[4]!,
      model: f[5]!,
      worker: f[6]!,
      promptTokens: int(f[7]!)!,
      completionTokens: int(f[8]!)!,
      cachedTokens: int(f[9]!)!,
      cacheWriteTokens: int(f[10]!)!,
      costMicro: BigInt(f[11]!),
      costSource: f[12]! as NewLedgerRow["costSource"],
      status: f[13]! as NewLedgerRow["status"],
      firstTokenAt: time(f[14]!),
      finishedAt: time(f[15]!)!,
      ttftMs: int(f[16]!),
      durationMs: int(f[17]!)!,
      providerGenerationId: f[18]!,
      // Not in the literal (spend_ledger_text is frozen): a row with any is JSON.
      cacheWrite1hTokens: 0,
    };
  }
  const o = JSON.parse(text) as Record<string, unknown>;
  for (const f of dateFields) if (o[f] != null) o[f] = new Date(o[f] as string);
  o.costMicro = BigInt(o.costMicro as string);
  o.cacheWrite1hTokens ??= 0;
  delete o.createdAt;
  return o as unknown as NewLedgerRow;
}

/**
 * A row text's UTC month (YYYY-MM): from its first bytes when encodeLedgerRow
 * wrote it (either form), else (an older text) from its parsed startedAt;
 * undefined for a text that is no row at all (Postgres refuses it in the INSERT).
 */
export function ledgerTextMonth(text: string): string | undefined {
  if (text.startsWith(LEDGER_RECORD_HEAD) && text.charCodeAt(LEDGER_RECORD_HEAD.length + 4) === 0x2d /* - */) return text.slice(LEDGER_RECORD_HEAD.length, LEDGER_RECORD_HEAD.length + 7);
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
 * stream holds them. Row literals go to Postgres as one text, one per line,
 * each cast to spend_ledger_text (record_in); JSON texts as one JSON array
 * that json_to_recordset reads. Either way the drain neither parses a row
 * nor builds a parameter per column (issue 14: the drain's decode and the
 * per-column arrays were most of the ledger's cost per request). Idempotent
 * like insertLedgerRows; a batch with a text Postgres cannot read throws
 * (SQLSTATE class 22), and the caller decides what to drop.
 */
export async function insertLedgerTexts(db: Db, texts: readonly string[]): Promise<{ inserted: number }> {
  if (texts.length === 0) return { inserted: 0 };
  const months = new Set<string>();
  const records: string[] = [];
  const jsons: string[] = [];
  for (const t of texts) {
    const month = ledgerTextMonth(t);
    if (month) months.add(month);
    // One literal per line: encodeLedgerRow writes a row with a line break as JSON. A
    // literal that holds one anyway was not written by it, and fails its line as any bad text does.
    if (t.startsWith(LEDGER_RECORD_HEAD)) records.push(t);
    else jsons.push(t);
  }
  await ensureMonths(db, months);
  return await insertTexts(db, records, jsons);
}

async function insertTexts(db: Db, records: readonly string[], jsons: readonly string[]): Promise<{ inserted: number }> {
  const client = (db as unknown as { $client: Sql }).$client;
  const statements: Array<(sql: Sql) => Promise<number>> = [];
  for (const batch of batchesOf(records)) statements.push((sql) => insertRecordLines(sql, batch.join("\n")));
  for (const batch of batchesOf(jsons)) statements.push((sql) => insertJsonArray(sql, "[" + batch.join(",") + "]"));
  // All or nothing, as one statement is: a batch Postgres refuses leaves no
  // row behind for the caller's row-by-row retry to count as a duplicate.
  if (statements.length === 1) return { inserted: await statements[0]!(client) };
  const counts = await client.begin(async (tx) => {
    const out: number[] = [];
    for (const run of statements) out.push(await run(tx as unknown as Sql));
    return out;
  });
  return { inserted: counts.reduce((a, b) => a + b, 0) };
}

/** `texts` in INSERTs of LEDGER_BATCH_ROWS rows at most (the usual batch, under that, as it is). */
function batchesOf(texts: readonly string[]): string[][] {
  if (texts.length === 0) return [];
  if (texts.length <= LEDGER_BATCH_ROWS) return [texts as string[]];
  const out: string[][] = [];
  for (let i = 0; i < texts.length; i += LEDGER_BATCH_ROWS) out.push(texts.slice(i, i + LEDGER_BATCH_ROWS));
  return out;
}

/** Row literals, one per line, cast to spend_ledger_text. Returns the rows that were new. */
async function insertRecordLines(sql: Sql, lines: string): Promise<number> {
  // The cast in a subquery (offset 0 keeps it there): `(line::spend_ledger_text).*` in the
  // select list would cast each line once per column. The command tag counts the rows
  // that were new (ON CONFLICT skips the others): no RETURNING rows to read back.
  const done = await sql`
    insert into spend_ledger (request_id, tenant_id, key_id, backend, model, worker, prompt_tokens, completion_tokens,
      cached_tokens, cache_write_tokens, cost_micro, cost_source, status, started_at, first_token_at, finished_at,
      ttft_ms, duration_ms, provider_generation_id)
    select (r).request_id, (r).tenant_id, (r).key_id, (r).backend, (r).model, (r).worker, (r).prompt_tokens, (r).completion_tokens,
      (r).cached_tokens, (r).cache_write_tokens, (r).cost_micro, (r).cost_source, (r).status, (r).started_at, (r).first_token_at, (r).finished_at,
      (r).ttft_ms, (r).duration_ms, (r).provider_generation_id
    from (select line::spend_ledger_text as r from string_to_table(${lines}::text, E'\n') as line offset 0) as rows
    on conflict (request_id, started_at) do nothing`;
  return done.count;
}

/** JSON row texts as one JSON array, read by json_to_recordset. Returns the rows that were new. */
async function insertJsonArray(sql: Sql, array: string): Promise<number> {
  const done = await sql`
    insert into spend_ledger (request_id, tenant_id, key_id, backend, model, worker, prompt_tokens, completion_tokens,
      cached_tokens, cache_write_tokens, cost_micro, cost_source, status, started_at, first_token_at, finished_at,
      ttft_ms, duration_ms, provider_generation_id, cache_write_1h_tokens)
    select "requestId", "tenantId", "keyId", backend, model, worker, coalesce("promptTokens", 0), coalesce("completionTokens", 0),
      coalesce("cachedTokens", 0), coalesce("cacheWriteTokens", 0), "costMicro", "costSource", status, "startedAt", "firstTokenAt", "finishedAt",
      "ttftMs", "durationMs", "providerGenerationId", coalesce("cacheWrite1hTokens", 0)
    from json_to_recordset(${array}::json) as r("requestId" text, "tenantId" bigint, "keyId" bigint,
      backend text, model text, worker text, "promptTokens" int, "completionTokens" int, "cachedTokens" int, "cacheWriteTokens" int,
      "costMicro" bigint, "costSource" cost_source, status request_status, "startedAt" timestamptz, "firstTokenAt" timestamptz,
      "finishedAt" timestamptz, "ttftMs" int, "durationMs" int, "providerGenerationId" text, "cacheWrite1hTokens" int)
    on conflict (request_id, started_at) do nothing`;
  return done.count;
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
  // 20 parameters instead of 20 per row, and no per-row query building —
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
        ttft_ms, duration_ms, provider_generation_id, cache_write_1h_tokens)
      select * from unnest(
        ${col((r) => r.requestId)}::text[], ${col((r) => r.tenantId)}::bigint[], ${col((r) => r.keyId ?? null)}::bigint[],
        ${col((r) => r.backend)}::text[], ${col((r) => r.model)}::text[], ${col((r) => r.worker ?? null)}::text[],
        ${col((r) => r.promptTokens ?? 0)}::int[], ${col((r) => r.completionTokens ?? 0)}::int[],
        ${col((r) => r.cachedTokens ?? 0)}::int[], ${col((r) => r.cacheWriteTokens ?? 0)}::int[],
        ${col((r) => String(r.costMicro))}::bigint[], ${col((r) => r.costSource)}::cost_source[], ${col((r) => r.status)}::request_status[],
        ${col((r) => iso(r.startedAt))}::timestamptz[], ${col((r) => iso(r.firstTokenAt))}::timestamptz[], ${col((r) => iso(r.finishedAt))}::timestamptz[],
        ${col((r) => r.ttftMs ?? null)}::int[], ${col((r) => r.durationMs)}::int[], ${col((r) => r.providerGenerationId ?? null)}::text[],
        ${col((r) => r.cacheWrite1hTokens ?? 0)}::int[]
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
  /**
   * First day, YYYY-MM-DD, in each tenant's budget time zone (UTC without a
   * budget). Neither this nor `to`: each tenant's own today (tenants in
   * different zones are on different dates at once).
   */
  from?: string;
  /** Last day, included. */
  to?: string;
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
  /** Requests (their own rows): the rows of attempts they failed over from are not counted here … */
  requests: number;
  /** … but here (migration 0013): on the backend and model of the attempt, their cost in costMicro. */
  abandonedAttempts: number;
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
/** The row of an attempt a request failed over from (attemptRowId): not a request of its own. */
const attemptRow = sql`strpos(${spendLedger.requestId}, '/') > 0`;

/**
 * Spend per tenant and day (the tenant's day), optionally split by backend or
 * model; what `switchyard spend` prints. Sums are exact bigint micro-cents.
 */
export async function spendByDay(db: Db, q: SpendQuery): Promise<SpendRow[]> {
  const today = q.from === undefined && q.to === undefined;
  if (!today && (!dayPattern.test(q.from ?? "") || !dayPattern.test(q.to ?? ""))) throw new RangeError("from/to must be YYYY-MM-DD (or neither: each tenant's today)");
  const by = q.by ?? "day";
  const zone = sql`coalesce(${budgets.timeZone}, 'UTC')`;
  const day = sql<string>`((${spendLedger.startedAt} at time zone ${zone})::date)::text`;
  const backend = by === "day" ? sql<string | null>`null::text` : sql<string | null>`${spendLedger.backend}`;
  const model = by === "model" ? sql<string | null>`${spendLedger.model}` : sql<string | null>`null::text`;
  const conditions: SQL[] = today
    ? [
        // Any zone's today began at most a day (25 hours across a DST change) ago.
        sql`${spendLedger.startedAt} >= now() - interval '2 days'`,
        sql`${day}::date = (now() at time zone ${zone})::date`,
      ]
    : [
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
      requests: sql<number>`count(*) filter (where not ${attemptRow})`.mapWith(Number),
      abandonedAttempts: sql<number>`count(*) filter (where ${attemptRow})`.mapWith(Number),
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
