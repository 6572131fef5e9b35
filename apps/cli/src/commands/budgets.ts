// `switchyard budgets set|show|list|delete|reconcile`: tenants' daily limits
// for paid inference, and rebuilding the routers' live counters in Redis
// from the ledger. Money is parsed from text and printed from integer
// micro-cents (db/money.ts); no float ever holds an amount.
import {
  centsToMicro,
  deleteBudget,
  findTenant,
  formatMicroAsUsd,
  getBudget,
  insertLedgerRows,
  insertLedgerTexts,
  listBudgetAlerts,
  listBudgets,
  setBudget,
  tenantDaySpend,
  type Db,
} from "@switchyard/db";
import { redisTarget, silentLogger, type Config } from "@switchyard/router";
import { budgetDay, connectRedis, isValidTimeZone, MAX_BUDGET_MICRO, RedisBudgetStore, type RedisTarget as StateRedisTarget } from "@switchyard/state";
import { sql } from "drizzle-orm";
import { ledgerStreamKey, RedisLedgerBuffer, reconcileBudgetDay } from "@switchyard/router/billing";
import { hostname } from "node:os";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

export interface BudgetsFlags {
  config?: string;
  redis?: string;
  "key-prefix"?: string;
  "daily-cents"?: string;
  "daily-usd"?: string;
  "time-zone"?: string;
  alerts?: string;
  day?: string;
}

type Verb = "set" | "show" | "list" | "delete" | "reconcile";
const verbs: readonly Verb[] = ["set", "show", "list", "delete", "reconcile"];

/** The options each verb takes; any other of these is a mistake worth reporting. */
const verbFlags: Record<Verb, ReadonlyArray<keyof BudgetsFlags>> = {
  set: ["daily-cents", "daily-usd", "time-zone", "alerts"],
  show: ["day"],
  list: [],
  delete: [],
  reconcile: ["day"],
};
const ownFlags = ["daily-cents", "daily-usd", "time-zone", "alerts", "day"] as const;

/** The largest limit a budget store can enforce (its amounts stay below 2^53 micro-cents). */
const MAX_CENTS = MAX_BUDGET_MICRO / 1_000_000n;

export async function budgetsCommand(args: string[], flags: BudgetsFlags): Promise<number> {
  const [verb, name, ...rest] = args as [Verb | undefined, string | undefined, ...string[]];
  if (!verb || !verbs.includes(verb)) throw new UsageError(`budgets: expected set, show, list, delete or reconcile, got '${verb ?? ""}'`);
  if (rest.length > 0) throw new UsageError(`budgets ${verb}: unexpected argument '${rest[0]}'`);
  if (verb === "list" && name) throw new UsageError(`budgets list: unexpected argument '${name}'`);
  if ((verb === "set" || verb === "show" || verb === "delete") && !name) throw new UsageError(`budgets ${verb}: missing tenant NAME`);
  for (const f of ownFlags) {
    if (flags[f] !== undefined && !verbFlags[verb].includes(f)) throw new UsageError(`budgets ${verb}: --${f} does not apply here`);
  }
  if (flags.day !== undefined && !isDay(flags.day)) throw new UsageError(`budgets ${verb}: --day takes a real YYYY-MM-DD date (got '${flags.day}')`);
  const input = verb === "set" ? parseSetFlags(flags) : undefined;

  const config = configFrom(flags);
  const redisTarget = redisOf(config, flags);
  if (verb === "reconcile" && !redisTarget) {
    throw new UsageError("budgets reconcile: needs the routers' Redis (redis.url / REDIS_URL, redis.cluster, redis.sentinels, or --redis URL)");
  }
  const db = await openDb(config, { migrate: true, quiet: true });
  try {
    switch (verb) {
      case "set":
        return await set(db.db, name!, input!, redisTarget, config.billing.refreshMs);
      case "show":
        return await show(db.db, name!, flags.day, redisTarget);
      case "list":
        return await list(db.db);
      case "delete":
        return await remove(db.db, name!);
      case "reconcile":
        return await reconcile(db.db, name, flags.day, redisTarget!);
    }
  } finally {
    await db.close();
    await db.stopEmbedded();
  }
}

// ---- set -------------------------------------------------------------------

interface SetInput {
  cents: bigint;
  timeZone?: string;
  alerts?: number[];
}

function parseSetFlags(flags: BudgetsFlags): SetInput {
  const cents = flags["daily-cents"];
  const usd = flags["daily-usd"];
  if ((cents === undefined) === (usd === undefined)) throw new UsageError("budgets set: give the limit as exactly one of --daily-cents N or --daily-usd D.CC");
  const parsed = cents !== undefined ? parseCents(cents) : parseUsdCents(usd!);
  if (parsed > MAX_CENTS) throw new UsageError(`budgets set: a daily limit can be at most ${MAX_CENTS} cents`);
  const out: SetInput = { cents: parsed };
  if (flags["time-zone"] !== undefined) out.timeZone = parseZone(flags["time-zone"]);
  if (flags.alerts !== undefined) out.alerts = parseAlerts(flags.alerts);
  return out;
}

function parseCents(text: string): bigint {
  if (!/^\d+$/.test(text.trim())) throw new UsageError(`budgets set: --daily-cents takes a whole, non-negative number of cents (got '${text}')`);
  return BigInt(text.trim());
}

/** "12.34" → 1234n, exactly; "12.345" is refused rather than rounded. */
function parseUsdCents(text: string): bigint {
  const m = /^(\d+)(?:\.(\d*))?$/.exec(text.trim());
  const frac = (m?.[2] ?? "").replace(/0+$/, "");
  if (!m || (m[2] !== undefined && m[2] === "") || frac.length > 2) {
    throw new UsageError(`budgets set: --daily-usd takes a non-negative amount in whole cents, e.g. 12.34 (got '${text}')`);
  }
  return BigInt(m[1]!) * 100n + BigInt(frac.padEnd(2, "0"));
}

/** An IANA zone name the router (Intl) understands; Postgres is asked too, in set(). */
function parseZone(text: string): string {
  // Offsets like "+01:00" are refused: Postgres reads POSIX offsets with the opposite sign.
  if (!/^[A-Za-z]/.test(text) || !isValidTimeZone(text)) {
    throw new UsageError(`budgets set: --time-zone must be an IANA time zone such as UTC or Europe/Paris (got '${text}')`);
  }
  return text;
}

function parseAlerts(text: string): number[] {
  if (text.trim() === "none") return [];
  const parts = text.split(",").map((s) => s.trim());
  const out: number[] = [];
  for (const p of parts) {
    const n = /^\d+$/.test(p) ? Number(p) : NaN;
    if (!Number.isInteger(n) || n < 1 || n > 1000) throw new UsageError(`budgets set: --alerts takes percentages 1..1000 separated by commas, e.g. 50,80,100, or 'none' (got '${p}')`);
    if (out.length > 0 && n <= out[out.length - 1]!) throw new UsageError(`budgets set: --alerts must be ascending without repeats (got '${text}')`);
    out.push(n);
  }
  return out;
}

async function set(db: Db, name: string, input: SetInput, target: RedisTarget | undefined, refreshMs: number): Promise<number> {
  const tenant = await findTenant(db, name);
  if (!tenant) return noTenant(name);
  const before = await getBudget(db, tenant.id);
  let timeZone: string | undefined;
  if (input.timeZone) {
    // The ledger's days are cut by Postgres, the router's by Intl: both must know the zone.
    timeZone = await postgresZoneName(db, input.timeZone);
    if (!timeZone) {
      process.stderr.write(`error: PostgreSQL does not know the time zone '${input.timeZone}' (its ledger days would not match the routers')\n`);
      return 1;
    }
  }
  const b = await setBudget(db, {
    tenantId: tenant.id,
    dailyLimitCents: input.cents,
    ...(timeZone ? { timeZone } : {}),
    ...(input.alerts ? { alertThresholds: input.alerts } : {}),
  });
  process.stdout.write(
    `budget of ${tenant.name}: ${limitText(b.dailyLimitCents)} per day, day starts at midnight ${b.timeZone}, alerts ${alertsText(b.alertThresholds)}\n`,
  );
  if (!before || before.timeZone === b.timeZone) return 0;
  // Another zone names another day: its live counters in Redis may be the
  // old zone's for a date of the same name (UTC → New York at 02:00 UTC is
  // yesterday's date), marked checked, and would be used as they are. So
  // the day is rebuilt from the ledger, once the routers have picked the
  // zone up (they re-read budgets every billing.refreshMs).
  if (!target) {
    process.stderr.write(`note: the day now starts at midnight ${b.timeZone}: once the routers have picked it up (billing.refreshMs), run 'switchyard budgets reconcile ${tenant.name}' so its live counters are this zone's day\n`);
    return 0;
  }
  process.stderr.write(`the day now starts at midnight ${b.timeZone}: rebuilding today's counters from the ledger in ${refreshMs + 1_000} ms, once the routers have picked it up\n`);
  await new Promise((r) => setTimeout(r, refreshMs + 1_000));
  return reconcile(db, tenant.name, undefined, target);
}

/** The zone as Postgres spells it ("europe/paris" → "Europe/Paris"), or undefined when it has no such zone. */
async function postgresZoneName(db: Db, zone: string): Promise<string | undefined> {
  const rows = await db.execute<{ name: string }>(sql`select name from pg_timezone_names where lower(name) = lower(${zone}) order by name = ${zone} desc limit 1`);
  return rows[0]?.name;
}

// ---- show ------------------------------------------------------------------

interface RedisTarget {
  /** --redis URL, else the config's url, cluster or sentinels. */
  redis: StateRedisTarget;
  prefix: string;
}

function redisOf(config: Config, flags: BudgetsFlags): RedisTarget | undefined {
  const redis = flags.redis ? { url: flags.redis } : redisTarget(config);
  return redis ? { redis, prefix: flags["key-prefix"] ?? config.redis.keyPrefix } : undefined;
}

async function show(db: Db, name: string, dayFlag: string | undefined, target: RedisTarget | undefined): Promise<number> {
  const tenant = await findTenant(db, name);
  if (!tenant) return noTenant(name);
  const budget = await getBudget(db, tenant.id);
  // Without a budget the tenant's day is the UTC day (as in the ledger views and the router).
  const zone = budget?.timeZone ?? "UTC";
  const today = budgetDay(Date.now(), zone);
  const day = dayFlag ?? today;
  const limitMicro = budget ? centsToMicro(budget.dailyLimitCents) : undefined;
  const lines: Array<[string, string]> = [["tenant", `${tenant.name} (id ${tenant.id})`]];
  if (budget) {
    lines.push(["daily limit", limitText(budget.dailyLimitCents)], ["time zone", zone], ["alerts at", alertsText(budget.alertThresholds)]);
  } else {
    lines.push(["daily limit", "none: paid inference is unlimited"]);
  }
  lines.push(["day", day === today ? `${day} (today in ${zone})` : `${day} (today in ${zone} is ${today})`]);
  const ledger = await tenantDaySpend(db, tenant.id, day);
  lines.push(["ledger spend", moneyText(ledger.spentMicro, limitMicro)]);
  if (target) {
    const redis = openRedis(target.redis);
    try {
      const store = new RedisBudgetStore(redis, target.prefix);
      const snap = await store.snapshot(tenant.id, day);
      const holds = await store.holds(tenant.id, day);
      lines.push(
        ["live spent", moneyText(snap.spentMicro, limitMicro) + (snap.spentMicro !== ledger.spentMicro ? "  (differs from the ledger)" : "")],
        ["live held", moneyText(snap.heldMicro, limitMicro)],
        ["live holds", String(holds.length)],
        ["live checked", snap.checked ? "yes: rebuilt from the ledger since Redis last lost them" : "no: the next paid request rebuilds them from the ledger before holding"],
      );
      if (limitMicro !== undefined) {
        const left = limitMicro - snap.spentMicro - snap.heldMicro;
        lines.push(["available", `${left < 0n ? "-" : ""}$${formatMicroAsUsd(left < 0n ? -left : left)}`]);
      }
    } catch (err) {
      lines.push(["live counters", `unavailable: ${redis.failure(err)}`]);
    } finally {
      redis.disconnect();
    }
  } else {
    lines.push(["live counters", "not shown (no Redis configured: redis.url / REDIS_URL or --redis URL)"]);
  }
  const fired = await listBudgetAlerts(db, tenant.id, day);
  lines.push(["alerts fired", fired.length ? fired.map((a) => `${a.threshold}% at ${a.createdAt.toISOString()}`).join(", ") : "none"]);
  const width = Math.max(...lines.map(([k]) => k.length));
  process.stdout.write(lines.map(([k, v]) => `${k.padEnd(width)}  ${v}`).join("\n") + "\n");
  return 0;
}

// ---- list, delete ------------------------------------------------------------

async function list(db: Db): Promise<number> {
  const rows = await listBudgets(db);
  const header = ["TENANT", "LIMIT_CENTS", "LIMIT_USD", "TIME_ZONE", "ALERTS", "UPDATED"];
  const lines = rows.map((r) => [
    r.tenantName,
    r.dailyLimitCents.toString(),
    formatMicroAsUsd(centsToMicro(r.dailyLimitCents)),
    r.timeZone,
    r.alertThresholds.length ? r.alertThresholds.join(",") : "none",
    r.updatedAt.toISOString(),
  ]);
  printTable(header, lines, new Set([1, 2]));
  if (rows.length === 0) process.stderr.write("no budgets: every tenant's paid inference is unlimited\n");
  return 0;
}

async function remove(db: Db, name: string): Promise<number> {
  const tenant = await findTenant(db, name);
  if (!tenant) return noTenant(name);
  if (!(await deleteBudget(db, tenant.id))) {
    process.stderr.write(`error: tenant '${name}' has no budget\n`);
    return 1;
  }
  process.stdout.write(`deleted the budget of ${tenant.name}: its paid inference is unlimited\n`);
  return 0;
}

// ---- reconcile -------------------------------------------------------------

async function reconcile(db: Db, name: string | undefined, dayFlag: string | undefined, target: RedisTarget): Promise<number> {
  let targets: Array<{ tenantId: number; tenantName: string; timeZone: string }>;
  if (name) {
    const tenant = await findTenant(db, name);
    if (!tenant) return noTenant(name);
    const budget = await getBudget(db, tenant.id);
    // No budget: the router still counts paid spend, on the UTC day.
    targets = [{ tenantId: tenant.id, tenantName: tenant.name, timeZone: budget?.timeZone ?? "UTC" }];
  } else {
    targets = (await listBudgets(db)).map((b) => ({ tenantId: b.tenantId, tenantName: b.tenantName, timeZone: b.timeZone }));
    if (targets.length === 0) {
      process.stderr.write("no budgets set: nothing to reconcile\n");
      return 0;
    }
  }
  const redis = openRedis(target.redis);
  try {
    try {
      await redis.ping();
    } catch (err) {
      process.stderr.write(`error: cannot reach Redis: ${redis.failure(err)}\n`);
      return 1;
    }
    const store = new RedisBudgetStore(redis, target.prefix);
    // Drained after each day's snapshot, not once before them all: a row settled meanwhile counts.
    const drainLedger = () => drainLedgerBuffer(redis, target.prefix, db);
    let failed = 0;
    for (const t of targets) {
      const day = dayFlag ?? budgetDay(Date.now(), t.timeZone);
      try {
        const r = await reconcileBudgetDay(db, store, t.tenantId, day, { drainLedger });
        process.stdout.write(
          `${t.tenantName} ${day}: spent $${formatMicroAsUsd(r.before.spentMicro)} → $${formatMicroAsUsd(r.spentMicro)}, ` +
            `held $${formatMicroAsUsd(r.before.heldMicro)} → $${formatMicroAsUsd(r.heldMicro)} (${r.holds} live ${r.holds === 1 ? "hold" : "holds"})\n`,
        );
      } catch (err) {
        failed++;
        process.stderr.write(`error: ${t.tenantName} ${day}: ${(err as Error).message}\n`);
      }
    }
    return failed > 0 ? 1 : 0;
  } finally {
    redis.disconnect();
  }
}

/** A connection whose errors surface through the commands that fail, not as unhandled events. */
function openRedis(target: StateRedisTarget) {
  let lastError: Error | undefined;
  const redis = connectRedis(target);
  redis.on("error", (err: Error) => {
    lastError = err;
  });
  // ioredis reports "max retries" when a command gives up; the connection error says why.
  const failure = (err: unknown): string => {
    const message = (err as Error)?.message ?? String(err);
    return lastError && /max retries/i.test(message) ? lastError.message : message;
  };
  return Object.assign(redis, { failure });
}

/**
 * Ledger rows still in the routers' Redis buffer were already settled into
 * the counters but are not in Postgres yet: reconciling before they land
 * would undercount them. Drain the buffer into Postgres first (the same
 * idempotent inserts the routers do; rows a dead router left unacknowledged
 * are taken over once idle), and warn about what is still held by live routers.
 */
async function drainLedgerBuffer(redis: ReturnType<typeof openRedis>, prefix: string, db: Db): Promise<void> {
  const buffer = new RedisLedgerBuffer(redis, (texts) => insertLedgerTexts(db, texts), {
    prefix,
    consumer: `reconcile-${hostname()}-${process.pid}`,
    batch: 1000,
    flushMs: 100,
    claimIdleMs: 15_000,
    log: silentLogger,
  });
  try {
    await buffer.close(); // flushes, then lets go of its consumer
  } catch (err) {
    process.stderr.write(`warning: could not drain the ledger buffer: ${(err as Error).message}\n`);
  }
  let depth = 0;
  try {
    depth = await redis.xlen(ledgerStreamKey(prefix));
  } catch {
    return;
  }
  if (depth > 0) {
    process.stderr.write(
      `warning: ${depth} ledger buffer ${depth === 1 ? "entry (one or more rows) is" : "entries (one or more rows each) are"} still in Redis (being written by a router), ` +
        "not yet in PostgreSQL; their spend is missing from this reconcile. Rerun in a moment.\n",
    );
  }
}

// ---- helpers -----------------------------------------------------------------

const dayPattern = /^\d{4}-\d{2}-\d{2}$/;
/** A real calendar day in YYYY-MM-DD (2026-13-01 and 2026-02-30 are not). */
function isDay(s: string): boolean {
  if (!dayPattern.test(s)) return false;
  const d = new Date(`${s}T00:00:00Z`);
  return !Number.isNaN(d.getTime()) && d.toISOString().slice(0, 10) === s;
}

function noTenant(name: string): number {
  process.stderr.write(`error: no tenant named '${name}' (see 'switchyard tenants list')\n`);
  return 1;
}

function limitText(cents: bigint): string {
  return `${cents} cents ($${formatMicroAsUsd(centsToMicro(cents))})`;
}

function alertsText(thresholds: number[]): string {
  return thresholds.length ? thresholds.map((t) => `${t}%`).join(", ") : "none";
}

/** "$0.0123 (1230000 micro-cents, 12.30% of the limit)", in integers throughout. */
function moneyText(micro: bigint, limitMicro: bigint | undefined): string {
  let share = "";
  if (limitMicro !== undefined && limitMicro > 0n) {
    const basisPoints = (micro * 10_000n) / limitMicro; // truncated, never rounded up to a threshold
    share = `, ${basisPoints / 100n}.${(basisPoints % 100n).toString().padStart(2, "0")}% of the limit`;
  }
  return `$${formatMicroAsUsd(micro)} (${micro} micro-cents${share})`;
}

function printTable(header: string[], lines: string[][], rightAligned: ReadonlySet<number>): void {
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (l: string[]) =>
    l
      .map((v, i) => (rightAligned.has(i) ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  process.stdout.write([fmt(header), ...lines.map(fmt)].join("\n") + "\n");
}
