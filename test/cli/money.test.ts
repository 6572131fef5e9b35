// `switchyard budgets …` and `switchyard prices …` end to end against a real
// Postgres database and Redis, plus reconcileBudgetDay's retry on a conflict.
import { execFile } from "node:child_process";
import path from "node:path";
import { promisify } from "node:util";
import { and, eq } from "drizzle-orm";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTenant, getBudget, insertLedgerRows, recordBudgetAlert, schema, setBudget, type NewLedgerRow } from "@switchyard/db";
import { budgetDay, RedisBudgetStore, type BudgetStore, type RebuildInput } from "@switchyard/state";
import { encodeLedgerRow, ledgerStreamKey } from "../../apps/router/src/billing/ledger-stream.ts";
import { ReconcileConflictError, reconcileAllBudgets, reconcileBudgetDay, reconcileTenant } from "../../apps/router/src/billing/reconcile.ts";
import { createTestDb, createTestRedis, type TestDb, type TestRedis } from "../helpers/env.ts";

const run = promisify(execFile);
const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const DAY = "2026-11-20";
const HOUR = 3_600_000;
const BIG_LIMIT = 10_000_000_000n;
let db: TestDb;
let r: TestRedis;

interface Result {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs the real CLI; with `redis`, pointed at this file's Redis key prefix. */
async function sy(args: string[], opts: { redis?: boolean; env?: Record<string, string> } = {}): Promise<Result> {
  const env: Record<string, string | undefined> = { ...process.env, DATABASE_URL: db.url, ...opts.env };
  for (const k of ["REDIS_URL", "SWITCHYARD_REDIS__URL", "SWITCHYARD_REDIS__KEY_PREFIX", "SWITCHYARD_CONFIG"]) delete env[k];
  if (opts.redis) {
    env.REDIS_URL = process.env.TEST_REDIS_URL ?? "redis://127.0.0.1:6379";
    env.SWITCHYARD_REDIS__KEY_PREFIX = r.prefix;
  }
  try {
    const out = await run(process.execPath, [bin, ...args], { env, timeout: 30_000 });
    return { code: 0, stdout: out.stdout, stderr: out.stderr };
  } catch (err) {
    const e = err as { code: number; stdout: string; stderr: string };
    return { code: e.code, stdout: e.stdout, stderr: e.stderr };
  }
}

async function tenant(name: string): Promise<number> {
  const t = await createTenant(db.db, name);
  if (!t.ok) throw new Error(`tenant ${name}: ${t.reason}`);
  return t.tenant.id;
}

function ledgerRow(tenantId: number, requestId: string, costMicro: bigint, startedAt = `${DAY}T12:00:00Z`): NewLedgerRow {
  const started = new Date(startedAt);
  return {
    requestId,
    tenantId,
    backend: "openrouter",
    model: "openai/gpt-4o-mini",
    promptTokens: 10,
    completionTokens: 5,
    costMicro,
    costSource: "provider",
    status: "ok",
    startedAt: started,
    finishedAt: new Date(started.getTime() + 1000),
    durationMs: 1000,
  };
}

beforeAll(async () => {
  db = await createTestDb();
  r = await createTestRedis();
});
afterAll(async () => {
  await r?.cleanup();
  await db?.drop();
});

describe("switchyard budgets set|show|list|delete", () => {
  it("stores exact cents, zone and thresholds, and refuses bad input with a clear message", { timeout: 180_000 }, async () => {
    const acme = await tenant("acme");
    const set = await sy(["budgets", "set", "acme", "--daily-cents", "1234", "--time-zone", "europe/paris", "--alerts", "50,80,100"]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/1234 cents \(\$12\.34\).*Europe\/Paris.*50%, 80%, 100%/);
    expect(await getBudget(db.db, acme)).toMatchObject({ dailyLimitCents: 1234n, timeZone: "Europe/Paris", alertThresholds: [50, 80, 100] });

    // --daily-usd is parsed to cents exactly; zone and thresholds stay as they were.
    expect((await sy(["budgets", "set", "acme", "--daily-usd", "0.05"])).code).toBe(0);
    expect(await getBudget(db.db, acme)).toMatchObject({ dailyLimitCents: 5n, timeZone: "Europe/Paris", alertThresholds: [50, 80, 100] });

    const bad: [string[], RegExp][] = [
      [["--daily-cents=-5"], /--daily-cents takes a whole, non-negative number of cents/],
      [["--daily-cents", "-5"], /--daily-cents/],
      [["--daily-cents", "1.5"], /whole, non-negative/],
      [["--daily-cents", "99999999999"], /at most 9007199254 cents/],
      [["--daily-usd", "12.345"], /whole cents/],
      [["--daily-usd", "1e3"], /whole cents/],
      [["--daily-cents", "1", "--daily-usd", "1"], /exactly one of --daily-cents N or --daily-usd/],
      [[], /exactly one of --daily-cents N or --daily-usd/],
      [["--daily-cents", "100", "--time-zone", "Mars/Olympus_Mons"], /--time-zone must be an IANA time zone/],
      [["--daily-cents", "100", "--time-zone", "+01:00"], /--time-zone must be an IANA time zone/],
      [["--daily-cents", "100", "--alerts", "80,50"], /ascending without repeats/],
      [["--daily-cents", "100", "--alerts", "80,80"], /ascending without repeats/],
      [["--daily-cents", "100", "--alerts", "0"], /percentages 1\.\.1000/],
      [["--daily-cents", "100", "--alerts", "1001"], /percentages 1\.\.1000/],
      [["--daily-cents", "100", "--alerts", "50,,80"], /percentages 1\.\.1000/],
      [["--daily-cents", "100", "--day", DAY], /--day does not apply here/],
    ];
    for (const [extra, msg] of bad) {
      const res = await sy(["budgets", "set", "acme", ...extra]);
      expect(res.code, extra.join(" ")).toBe(2);
      expect(res.stderr, extra.join(" ")).toMatch(msg);
    }
    const unknown = await sy(["budgets", "set", "nobody", "--daily-cents", "5"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no tenant named 'nobody'/);
    // Nothing above changed the budget.
    expect(await getBudget(db.db, acme)).toMatchObject({ dailyLimitCents: 5n, timeZone: "Europe/Paris" });

    const list = await sy(["budgets", "list"]);
    expect(list.code).toBe(0);
    expect(list.stdout).toMatch(/^TENANT\s+LIMIT_CENTS\s+LIMIT_USD\s+TIME_ZONE\s+ALERTS\s+UPDATED/);
    expect(list.stdout).toMatch(/\nacme\s+5\s+0\.05\s+Europe\/Paris\s+50,80,100\s+\d{4}-/);

    // Show: the ledger's spend for the tenant's day, exact, as a share of the limit.
    await insertLedgerRows(db.db, [ledgerRow(acme, "acme-1", 1_234_567n)]);
    const show = await sy(["budgets", "show", "acme", "--day", DAY]);
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/daily limit\s+5 cents \(\$0\.05\)/);
    expect(show.stdout).toMatch(/time zone\s+Europe\/Paris/);
    expect(show.stdout).toMatch(new RegExp(`day\\s+${DAY} \\(today in Europe/Paris is \\d{4}-\\d{2}-\\d{2}\\)`));
    expect(show.stdout).toMatch(/ledger spend\s+\$0\.01234567 \(1234567 micro-cents, 24\.69% of the limit\)/);
    expect(show.stdout).toMatch(/live counters\s+not shown \(no Redis configured/);
    expect(show.stdout).toMatch(/alerts fired\s+none/);
    const today = await sy(["budgets", "show", "acme"]);
    expect(today.stdout).toMatch(/day\s+\d{4}-\d{2}-\d{2} \(today in Europe\/Paris\)/);

    expect((await sy(["budgets", "show", "nobody"])).stderr).toMatch(/no tenant named 'nobody'/);
    expect((await sy(["budgets", "show", "acme", "--day", "2026-02-30"])).code).toBe(2);

    const del = await sy(["budgets", "delete", "acme"]);
    expect(del.code).toBe(0);
    expect(del.stdout).toMatch(/deleted the budget of acme/);
    expect(await getBudget(db.db, acme)).toBeUndefined();
    const again = await sy(["budgets", "delete", "acme"]);
    expect(again.code).toBe(1);
    expect(again.stderr).toMatch(/tenant 'acme' has no budget/);
    expect((await sy(["budgets", "list"])).stdout).not.toMatch(/\nacme /);

    for (const [args, msg] of [
      [["budgets"], /expected set, show, list, delete or reconcile/],
      [["budgets", "frob"], /expected set, show, list, delete or reconcile/],
      [["budgets", "show"], /missing tenant NAME/],
      [["budgets", "list", "extra"], /unexpected argument 'extra'/],
      [["budgets", "list", "--day", DAY], /--day does not apply here/],
    ] as [string[], RegExp][]) {
      const res = await sy(args);
      expect(res.code, args.join(" ")).toBe(2);
      expect(res.stderr).toMatch(msg);
    }
  });
});

describe("switchyard prices set|list", () => {
  const priceRows = (backend: string, model: string) =>
    db.db
      .select()
      .from(schema.prices)
      .where(and(eq(schema.prices.backend, backend), eq(schema.prices.model, model)))
      .orderBy(schema.prices.effectiveFrom);

  it("converts USD per Mtok to micro-cents exactly and marks the price in force", { timeout: 180_000 }, async () => {
    const first = await sy(["prices", "set", "openrouter", "openai/gpt-4o-mini", "--input", "0.15", "--output", "0.6", "--cached-input", "0.075", "--effective-from", "2020-01-01"]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stdout).toMatch(/input \$0\.15\/Mtok \(15000000 micro-cents\)/);
    expect(await priceRows("openrouter", "openai/gpt-4o-mini")).toEqual([
      expect.objectContaining({
        inputMicroPerMtok: 15_000_000n,
        outputMicroPerMtok: 60_000_000n,
        cachedInputMicroPerMtok: 7_500_000n,
        cacheWriteMicroPerMtok: null,
        effectiveFrom: new Date("2020-01-01T00:00:00Z"),
      }),
    ]);

    expect((await sy(["prices", "set", "anthropic", "claude-sonnet-4-5", "--input", "3", "--output", "15", "--cached-input", "0.30", "--cache-write", "3.75"])).code).toBe(0);
    expect(await priceRows("anthropic", "claude-sonnet-4-5")).toEqual([
      expect.objectContaining({ inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n, cachedInputMicroPerMtok: 30_000_000n, cacheWriteMicroPerMtok: 375_000_000n }),
    ]);
    // The smallest unit and eight decimal places survive untouched.
    expect((await sy(["prices", "set", "openrouter", "tiny/model", "--input", "0.00000001", "--output", "0.12345678", "--effective-from", "2026-01-01T09:30:00+01:00"])).code).toBe(0);
    expect(await priceRows("openrouter", "tiny/model")).toEqual([
      expect.objectContaining({ inputMicroPerMtok: 1n, outputMicroPerMtok: 12_345_678n, effectiveFrom: new Date("2026-01-01T08:30:00Z") }),
    ]);

    // A newer price now and a scheduled one: the 2020 row is superseded, old rows stay.
    expect((await sy(["prices", "set", "openrouter", "openai/gpt-4o-mini", "--input", "0.1", "--output", "0.4"])).code).toBe(0);
    expect((await sy(["prices", "set", "openrouter", "openai/gpt-4o-mini", "--input", "0.2", "--output", "0.8", "--effective-from", "2099-01-01"])).code).toBe(0);
    expect((await priceRows("openrouter", "openai/gpt-4o-mini")).map((p) => p.inputMicroPerMtok)).toEqual([15_000_000n, 10_000_000n, 20_000_000n]);

    const list = await sy(["prices", "list", "--backend", "openrouter", "--model", "openai/gpt-4o-mini"]);
    expect(list.code, list.stderr).toBe(0);
    const lines = list.stdout.trim().split("\n");
    expect(lines[0]).toMatch(/^BACKEND\s+MODEL\s+EFFECTIVE_FROM\s+STATUS\s+INPUT_USD_MTOK\s+OUTPUT_USD_MTOK\s+CACHED_INPUT_USD_MTOK\s+CACHE_WRITE_USD_MTOK\s+CACHE_WRITE_1H_USD_MTOK\s+AUDIO_INPUT_USD_MTOK\s+IMAGE_TOKEN_MULTIPLIER\s+LONG_CONTEXT_OVER\s+LONG_INPUT_USD_MTOK\s+LONG_OUTPUT_USD_MTOK\s+LONG_CACHED_INPUT_USD_MTOK\s+LONG_CACHE_WRITE_USD_MTOK\s+LONG_CACHE_WRITE_1H_USD_MTOK$/);
    expect(lines.slice(1)).toHaveLength(3);
    expect(lines[1]).toMatch(/^openrouter\s+openai\/gpt-4o-mini\s+2099-01-01T00:00:00\.000Z\s+scheduled\s+0\.2\s+0\.8\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-$/);
    expect(lines[2]).toMatch(/^openrouter\s+openai\/gpt-4o-mini\s+\S+Z\s+in force\s+0\.1\s+0\.4\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-$/);
    expect(lines[3]).toMatch(/^openrouter\s+openai\/gpt-4o-mini\s+2020-01-01T00:00:00\.000Z\s+superseded\s+0\.15\s+0\.6\s+0\.075\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-$/);

    const anthropic = await sy(["prices", "list", "--backend", "anthropic"]);
    expect(anthropic.stdout).toMatch(/\nanthropic\s+claude-sonnet-4-5\s+\S+\s+in force\s+3\s+15\s+0\.3\s+3\.75\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\n/);
    expect(anthropic.stdout).not.toMatch(/openrouter/);
    expect((await sy(["prices", "list"])).stdout).toMatch(/tiny\/model\s+2026-01-01T08:30:00\.000Z\s+in force\s+0\.00000001\s+0\.12345678/);

    const bad: [string[], RegExp][] = [
      [["set", "openrouter", "m", "--input", "0.000000001", "--output", "1"], /more than 8 decimal places/],
      [["set", "openrouter", "m", "--input=-1", "--output", "1"], /non-negative decimal/],
      [["set", "openrouter", "m", "--input", "1e-3", "--output", "1"], /non-negative decimal/],
      [["set", "openrouter", "m", "--input", "abc", "--output", "1"], /non-negative decimal/],
      [["set", "openai", "m", "--input", "1", "--output", "1"], /BACKEND must be one of openrouter, anthropic, worker/],
      [["set", "openrouter", " ", "--input", "1", "--output", "1"], /MODEL ' ' has whitespace in it/],
      [["set", "openrouter", "openai/gpt-4o ", "--input", "1", "--output", "1"], /has whitespace in it/],
      [["set", "openrouter", "m", "--input", "1"], /--input and --output .* are required/],
      [["set", "openrouter", "--input", "1", "--output", "1"], /expected BACKEND MODEL/],
      [["set", "openrouter", "m", "--input", "1", "--output", "1", "--effective-from", "2026-02-30"], /--effective-from takes/],
      [["set", "openrouter", "m", "--input", "1", "--output", "1", "--effective-from", "2026-12-01T09:00:00"], /--effective-from takes/],
      [["set", "openrouter", "m", "--input", "1", "--output", "1", "--backend", "anthropic"], /--backend does not apply here/],
      [["list", "--input", "1"], /--input does not apply here/],
      [["list", "--backend", "nope"], /BACKEND must be one of/],
      [["frob"], /expected 'set BACKEND MODEL …' or 'list'/],
    ];
    for (const [args, msg] of bad) {
      const res = await sy(["prices", ...args]);
      expect(res.code, args.join(" ")).toBe(2);
      expect(res.stderr, args.join(" ")).toMatch(msg);
    }
    expect(await priceRows("openrouter", "m")).toEqual([]);
  });

  it("--cache-write-1h sets the one-hour cache-write price; unset, it is 2× input", { timeout: 180_000 }, async () => {
    const set = await sy(["prices", "set", "anthropic", "claude-opus-4-1", "--input", "15", "--output", "75", "--cached-input", "1.5", "--cache-write", "18.75", "--cache-write-1h", "30"]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/cache write \$18\.75\/Mtok \(1875000000 micro-cents\), 1-hour cache write \$30\/Mtok \(3000000000 micro-cents\), /);
    expect(await priceRows("anthropic", "claude-opus-4-1")).toEqual([expect.objectContaining({ inputMicroPerMtok: 1_500_000_000n, cacheWriteMicroPerMtok: 1_875_000_000n, cacheWrite1hMicroPerMtok: 3_000_000_000n })]);
    const unset = await sy(["prices", "set", "anthropic", "claude-haiku-4-5", "--input", "1", "--output", "5"]);
    expect(unset.code, unset.stderr).toBe(0);
    expect(unset.stdout).toMatch(/1-hour cache write 2× input \(\$2\/Mtok \(200000000 micro-cents\)\), /);
    expect(await priceRows("anthropic", "claude-haiku-4-5")).toEqual([expect.objectContaining({ cacheWrite1hMicroPerMtok: null })]);
    const list = await sy(["prices", "list", "--backend", "anthropic", "--model", "claude-opus-4-1", "--model", "claude-haiku-4-5"]);
    expect(list.stdout).toMatch(/\nanthropic\s+claude-opus-4-1\s+\S+\s+in force\s+15\s+75\s+1\.5\s+18\.75\s+30\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\n/);
    expect(list.stdout).toMatch(/\nanthropic\s+claude-haiku-4-5\s+\S+\s+in force\s+1\s+5\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\s+-\n/);
    const bad = await sy(["prices", "set", "anthropic", "m", "--input", "1", "--output", "1", "--cache-write-1h=-2"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--cache-write-1h takes USD per million tokens/);
    expect((await sy(["prices", "list", "--cache-write-1h", "1"])).stderr).toMatch(/--cache-write-1h does not apply here/);
  });
});

describe("switchyard prices set: media rates", () => {
  const priceRows = (backend: string, model: string) =>
    db.db
      .select()
      .from(schema.prices)
      .where(and(eq(schema.prices.backend, backend), eq(schema.prices.model, model)))
      .orderBy(schema.prices.effectiveFrom);

  it("--audio-input sets the audio input price and --image-token-multiplier the image multiplier (thousandths, exact); unset, as input and 1×", { timeout: 180_000 }, async () => {
    const set = await sy(["prices", "set", "openrouter", "openai/gpt-4o-audio-preview", "--input", "2.5", "--output", "10", "--audio-input", "40", "--image-token-multiplier", "33.336"]);
    expect(set.code, set.stderr).toBe(0);
    expect(set.stdout).toMatch(/audio input \$40\/Mtok \(4000000000 micro-cents\), image tokens 33\.336×\n$/);
    expect(await priceRows("openrouter", "openai/gpt-4o-audio-preview")).toEqual([expect.objectContaining({ inputMicroPerMtok: 250_000_000n, audioInputMicroPerMtok: 4_000_000_000n, imageTokenMultiplierPermille: 33_336 })]);
    const unset = await sy(["prices", "set", "openrouter", "openai/gpt-4o", "--input", "2.5", "--output", "10"]);
    expect(unset.code, unset.stderr).toBe(0);
    expect(unset.stdout).toMatch(/audio input as input, image tokens 1×\n$/);
    expect(await priceRows("openrouter", "openai/gpt-4o")).toEqual([expect.objectContaining({ audioInputMicroPerMtok: null, imageTokenMultiplierPermille: null })]);
    // Trailing zeros are fine; a whole number too.
    expect((await sy(["prices", "set", "openrouter", "x/two", "--input", "1", "--output", "1", "--image-token-multiplier", "2.500"])).code).toBe(0);
    expect(await priceRows("openrouter", "x/two")).toEqual([expect.objectContaining({ imageTokenMultiplierPermille: 2_500 })]);
    const list = await sy(["prices", "list", "--backend", "openrouter", "--model", "openai/gpt-4o-audio-preview", "--model", "x/two"]);
    expect(list.stdout).toMatch(/\nopenrouter\s+openai\/gpt-4o-audio-preview\s+\S+\s+in force\s+2\.5\s+10\s+-\s+-\s+-\s+40\s+33\.336\s+-\s+-\s+-\s+-\s+-\s+-\n/);
    expect(list.stdout).toMatch(/\nopenrouter\s+x\/two\s+\S+\s+in force\s+1\s+1\s+-\s+-\s+-\s+-\s+2\.5\s+-\s+-\s+-\s+-\s+-\s+-\n/);

    const bad: [string[], RegExp][] = [
      [["--image-token-multiplier", "0"], /--image-token-multiplier must be above 0/],
      [["--image-token-multiplier", "1.0001"], /more than 3 decimal places/],
      [["--image-token-multiplier=-2"], /--image-token-multiplier takes a positive decimal/],
      [["--image-token-multiplier", "3e1"], /--image-token-multiplier takes a positive decimal/],
      [["--image-token-multiplier", "9999999"], /--image-token-multiplier is too large/],
      [["--audio-input=-1"], /--audio-input takes USD per million tokens/],
    ];
    for (const [args, msg] of bad) {
      const res = await sy(["prices", "set", "openrouter", "bad/m", "--input", "1", "--output", "1", ...args]);
      expect(res.code, args.join(" ")).toBe(2);
      expect(res.stderr, args.join(" ")).toMatch(msg);
    }
    expect(await priceRows("openrouter", "bad/m")).toEqual([]);
    expect((await sy(["prices", "list", "--audio-input", "1"])).stderr).toMatch(/--audio-input does not apply here/);
  });
});

describe("switchyard prices set: a long-context tier", () => {
  const priceRows = (backend: string, model: string) =>
    db.db
      .select()
      .from(schema.prices)
      .where(and(eq(schema.prices.backend, backend), eq(schema.prices.model, model)))
      .orderBy(schema.prices.effectiveFrom);

  it("--long-context-over with --long-input and --long-output stores the tier (long cache rates unset: derived, and said so); list shows it", { timeout: 180_000 }, async () => {
    // Anthropic's published Sonnet 4.6 rates.
    const sonnet = await sy(["prices", "set", "anthropic", "claude-sonnet-4-6", "--input", "3", "--output", "15", "--cached-input", "0.30", "--cache-write", "3.75", "--long-context-over", "200000", "--long-input", "6", "--long-output", "22.50"]);
    expect(sonnet.code, sonnet.stderr).toBe(0);
    expect(sonnet.stdout.split("\n")[1]).toBe(
      "long context, over 200000 prompt tokens (cache reads and writes counted), every token of the request: input $6/Mtok (600000000 micro-cents), output $22.5/Mtok (2250000000 micro-cents), " +
        "cached input $0.6/Mtok (60000000 micro-cents) (the ordinary rate × long input ÷ input, rounded up), cache write $7.5/Mtok (750000000 micro-cents) (the ordinary rate × long input ÷ input, rounded up), " +
        "1-hour cache write 2× long input ($12/Mtok (1200000000 micro-cents))",
    );
    expect(await priceRows("anthropic", "claude-sonnet-4-6")).toEqual([
      expect.objectContaining({
        inputMicroPerMtok: 300_000_000n,
        longContextThresholdTokens: 200_000,
        longInputMicroPerMtok: 600_000_000n,
        longOutputMicroPerMtok: 2_250_000_000n,
        longCachedInputMicroPerMtok: null,
        longCacheWriteMicroPerMtok: null,
        longCacheWrite1hMicroPerMtok: null,
      }),
    ]);
    // Opus 4.6 with the tier's cache rates given.
    const opus = await sy(["prices", "set", "anthropic", "claude-opus-4-6", "--input", "5", "--output", "25", "--long-context-over", "200000", "--long-input", "10", "--long-output", "37.5", "--long-cached-input", "1", "--long-cache-write", "12.5", "--long-cache-write-1h", "20"]);
    expect(opus.code, opus.stderr).toBe(0);
    expect(opus.stdout).toMatch(/\nlong context, over 200000 .*cached input \$1\/Mtok \(100000000 micro-cents\), cache write \$12\.5\/Mtok \(1250000000 micro-cents\), 1-hour cache write \$20\/Mtok \(2000000000 micro-cents\)\n$/);
    expect(await priceRows("anthropic", "claude-opus-4-6")).toEqual([
      expect.objectContaining({ longContextThresholdTokens: 200_000, longInputMicroPerMtok: 1_000_000_000n, longOutputMicroPerMtok: 3_750_000_000n, longCachedInputMicroPerMtok: 100_000_000n, longCacheWriteMicroPerMtok: 1_250_000_000n, longCacheWrite1hMicroPerMtok: 2_000_000_000n }),
    ]);
    // No tier: no line about one.
    const plain = await sy(["prices", "set", "anthropic", "claude-haiku-4-6", "--input", "1", "--output", "5"]);
    expect(plain.code, plain.stderr).toBe(0);
    expect(plain.stdout).not.toMatch(/long context/);

    const list = await sy(["prices", "list", "--backend", "anthropic", "--model", "claude-sonnet-4-6", "--model", "claude-opus-4-6", "--model", "claude-haiku-4-6"]);
    expect(list.code, list.stderr).toBe(0);
    expect(list.stdout).toMatch(/\nanthropic\s+claude-sonnet-4-6\s+\S+\s+in force\s+3\s+15\s+0\.3\s+3\.75\s+-\s+-\s+-\s+200000\s+6\s+22\.5\s+-\s+-\s+-\n/);
    expect(list.stdout).toMatch(/\nanthropic\s+claude-opus-4-6\s+\S+\s+in force\s+5\s+25\s+-\s+-\s+-\s+-\s+-\s+200000\s+10\s+37\.5\s+1\s+12\.5\s+20\n/);
    expect(list.stdout).toMatch(/\nanthropic\s+claude-haiku-4-6\s+\S+\s+in force\s+1\s+5(\s+-){11}\n/);
  });

  it("a tier is whole: a threshold without its rates, rates without a threshold, or a long cache rate alone is a usage error naming what is missing", { timeout: 180_000 }, async () => {
    const bad: [string[], RegExp][] = [
      [["--long-context-over", "200000"], /--long-context-over needs --long-input and --long-output too/],
      [["--long-input", "6"], /--long-input needs --long-context-over and --long-output too/],
      [["--long-input", "6", "--long-output", "22.5"], /--long-input and --long-output need --long-context-over too/],
      [["--long-context-over", "200000", "--long-input", "6"], /--long-context-over and --long-input need --long-output too/],
      [["--long-cached-input", "0.6"], /--long-cached-input is a long-context rate: it needs --long-context-over, --long-input and --long-output/],
      [["--long-cache-write-1h", "12"], /--long-cache-write-1h is a long-context rate/],
      [["--long-context-over", "0", "--long-input", "6", "--long-output", "22.5"], /--long-context-over must be above 0/],
      [["--long-context-over", "2e5", "--long-input", "6", "--long-output", "22.5"], /--long-context-over takes a number of prompt tokens/],
      [["--long-context-over", "200000.5", "--long-input", "6", "--long-output", "22.5"], /--long-context-over takes a number of prompt tokens/],
      [["--long-context-over", "3000000000", "--long-input", "6", "--long-output", "22.5"], /--long-context-over is too large/],
      [["--long-context-over", "200000", "--long-input=-6", "--long-output", "22.5"], /--long-input takes USD per million tokens/],
      [["--long-context-over", "200000", "--long-input", "6", "--long-output", "22.5", "--long-cache-write", "x"], /--long-cache-write takes USD per million tokens/],
    ];
    for (const [args, msg] of bad) {
      const res = await sy(["prices", "set", "anthropic", "bad/long", "--input", "3", "--output", "15", ...args]);
      expect(res.code, args.join(" ")).toBe(2);
      expect(res.stderr, args.join(" ")).toMatch(msg);
    }
    expect(await priceRows("anthropic", "bad/long")).toEqual([]);
    expect((await sy(["prices", "list", "--long-context-over", "1"])).stderr).toMatch(/--long-context-over does not apply here/);
  });

  it("a new row that drops the tier, or a tier cache rate, the one before had says so", { timeout: 180_000 }, async () => {
    const tier = ["--long-context-over", "200000", "--long-input", "6", "--long-output", "22.5"];
    expect((await sy(["prices", "set", "anthropic", "claude-long-x", "--input", "3", "--output", "15", ...tier, "--long-cache-write", "7.5", "--effective-from", "2020-01-01"])).code).toBe(0);
    const kept = await sy(["prices", "set", "anthropic", "claude-long-x", "--input", "3", "--output", "15", ...tier, "--effective-from", "2021-01-01"]);
    expect(kept.code, kept.stderr).toBe(0);
    expect(kept.stderr.split("\n").filter((l) => l.startsWith("note: "))).toEqual([
      "note: the price in force since 2020-01-01T00:00:00.000Z had long-context cache write at $7.5/Mtok (750000000 micro-cents); this one prices it at the ordinary rate × long input ÷ input (pass --long-cache-write to keep it)",
    ]);
    const dropped = await sy(["prices", "set", "anthropic", "claude-long-x", "--input", "3", "--output", "15"]);
    expect(dropped.code, dropped.stderr).toBe(0);
    expect(dropped.stderr.split("\n").filter((l) => l.startsWith("note: "))).toEqual([
      "note: the price in force since 2021-01-01T00:00:00.000Z had a long-context tier (over 200000 prompt tokens: input $6/Mtok (600000000 micro-cents), output $22.5/Mtok (2250000000 micro-cents)); this one prices every request at its ordinary rates (pass --long-context-over, --long-input and --long-output to keep it)",
    ]);
  });
});

describe("switchyard prices set: a new row that leaves out a rate the one before had", () => {
  it("says which rates it drops (a row is whole: an omitted flag is 'as input'), and that a gpt-4o-mini row without a multiplier under-holds its images", { timeout: 180_000 }, async () => {
    const first = await sy(["prices", "set", "anthropic", "claude-x", "--input", "3", "--output", "15", "--cached-input", "0.3", "--cache-write", "3.75", "--audio-input", "40", "--image-token-multiplier", "2", "--effective-from", "2020-01-01"]);
    expect(first.code, first.stderr).toBe(0);
    expect(first.stderr).not.toMatch(/note:/);
    // A price update that names input and output only.
    const update = await sy(["prices", "set", "anthropic", "claude-x", "--input", "2", "--output", "10", "--cache-write", "2.5"]);
    expect(update.code, update.stderr).toBe(0);
    const notes = update.stderr.split("\n").filter((l) => l.startsWith("note: "));
    expect(notes).toEqual([
      "note: the price in force since 2020-01-01T00:00:00.000Z had cached input at $0.3/Mtok (30000000 micro-cents); this one prices it as input (pass --cached-input to keep it)",
      "note: the price in force since 2020-01-01T00:00:00.000Z had audio input at $40/Mtok (4000000000 micro-cents); this one prices it as input (pass --audio-input to keep it)",
      "note: the price in force since 2020-01-01T00:00:00.000Z counted image tokens 2×; this one counts them 1× (pass --image-token-multiplier to keep it)",
    ]);
    // The row is written as asked all the same.
    const rows = await db.db.select().from(schema.prices).where(and(eq(schema.prices.backend, "anthropic"), eq(schema.prices.model, "claude-x"))).orderBy(schema.prices.effectiveFrom);
    expect(rows.at(-1)).toMatchObject({ inputMicroPerMtok: 200_000_000n, cachedInputMicroPerMtok: null, cacheWriteMicroPerMtok: 250_000_000n, audioInputMicroPerMtok: null, imageTokenMultiplierPermille: null });
    // Nothing dropped: nothing said.
    const again = await sy(["prices", "set", "anthropic", "claude-x", "--input", "2", "--output", "10"]);
    expect(again.stderr.split("\n").filter((l) => l.startsWith("note: ")).map((l) => l.replace(/since \S+ /, "since T "))).toEqual([
      "note: the price in force since T had cache write at $2.5/Mtok (250000000 micro-cents); this one prices it as input (pass --cache-write to keep it)",
    ]);
    const mini = await sy(["prices", "set", "openrouter", "openai/gpt-4o-mini-2024-07-18", "--input", "0.15", "--output", "0.6"]);
    expect(mini.code, mini.stderr).toBe(0);
    expect(mini.stderr).toMatch(/note: gpt-4o-mini counts an image's tokens 33\.336× gpt-4o's .*pass --image-token-multiplier 33\.336/);
    const miniSet = await sy(["prices", "set", "openrouter", "openai/gpt-4o-mini-2024-07-18", "--input", "0.15", "--output", "0.6", "--image-token-multiplier", "33.336"]);
    expect(miniSet.stderr).not.toMatch(/note:/);
  });
});

describe("switchyard budgets reconcile", () => {
  it("sets Redis to ledger spend + un-ledgered live holds, so an already-ledgered settle is not counted again", { timeout: 180_000 }, async () => {
    const globex = await tenant("globex");
    const hooli = await tenant("hooli");
    expect((await sy(["budgets", "set", "globex", "--daily-cents", "1000"])).code).toBe(0);
    expect((await sy(["budgets", "set", "hooli", "--daily-cents", "500", "--time-zone", "America/New_York"])).code).toBe(0);
    await insertLedgerRows(db.db, [
      ledgerRow(globex, "g-a", 3_000_000n),
      ledgerRow(globex, "g-b", 2_000_000n),
      ledgerRow(globex, "g-held-ledgered", 1_500_000n),
      ledgerRow(globex, "g-other-day", 777n, "2026-11-19T12:00:00Z"),
      ledgerRow(hooli, "h-a", 42n), // 07:00 in New York on DAY
    ]);
    const store = new RedisBudgetStore(r.redis, r.prefix);
    const g = { tenantId: globex, day: DAY };
    // Counters that disagree with the ledger: spend of requests it never saw,
    // one live hold without a ledger row and one whose row is already there.
    await store.reserve({ ...g, requestId: "g-stray-1", amountMicro: 20_000n, limitMicro: BIG_LIMIT, ttlMs: HOUR });
    await store.settle({ ...g, requestId: "g-stray-1", actualMicro: 9_999n });
    await store.settle({ ...g, requestId: "g-stray-2", actualMicro: 7n });
    await store.reserve({ ...g, requestId: "g-held-free", amountMicro: 400_000n, limitMicro: BIG_LIMIT, ttlMs: HOUR });
    await store.reserve({ ...g, requestId: "g-held-ledgered", amountMicro: 2_000_000n, limitMicro: BIG_LIMIT, ttlMs: HOUR });
    expect(await store.snapshot(globex, DAY)).toMatchObject({ spentMicro: 10_006n, heldMicro: 2_400_000n });

    const noRedis = await sy(["budgets", "reconcile", "globex", "--day", DAY]);
    expect(noRedis.code).toBe(2);
    expect(noRedis.stderr).toMatch(/needs the routers' Redis/);

    const res = await sy(["budgets", "reconcile", "globex", "--day", DAY], { redis: true });
    expect(res.code, res.stderr).toBe(0);
    expect(res.stdout).toBe(`globex ${DAY}: spent $0.00010006 → $0.065, held $0.024 → $0.004 (1 live hold)\n`);
    expect(await store.snapshot(globex, DAY)).toMatchObject({ spentMicro: 6_500_000n, heldMicro: 400_000n });
    expect((await store.holds(globex, DAY)).map((h) => [h.requestId, h.amountMicro])).toEqual([["g-held-free", 400_000n]]);

    // The router's late settle of a request the ledger already has changes nothing.
    expect(await store.settle({ ...g, requestId: "g-held-ledgered", actualMicro: 1_500_000n })).toMatchObject({ alreadySettled: true, spentMicro: 6_500_000n });
    // The un-ledgered hold settles normally.
    expect(await store.settle({ ...g, requestId: "g-held-free", actualMicro: 350_000n })).toMatchObject({ alreadySettled: false, spentMicro: 6_850_000n, heldMicro: 0n });

    // Once its row is in the ledger, reconciling again (every budget) agrees, and fixes hooli's New York day too.
    await insertLedgerRows(db.db, [ledgerRow(globex, "g-held-free", 350_000n)]);
    await store.settle({ tenantId: hooli, day: DAY, requestId: "h-stray", actualMicro: 1_000n });
    await recordBudgetAlert(db.db, globex, DAY, 50);
    const all = await sy(["budgets", "reconcile", "--day", DAY], { redis: true });
    expect(all.code, all.stderr).toBe(0);
    expect(all.stdout).toBe(
      `globex ${DAY}: spent $0.0685 → $0.0685, held $0 → $0 (0 live holds)\n` + `hooli ${DAY}: spent $0.00001 → $0.00000042, held $0 → $0 (0 live holds)\n`,
    );
    expect(await store.snapshot(globex, DAY)).toMatchObject({ spentMicro: 6_850_000n, heldMicro: 0n });
    expect(await store.snapshot(hooli, DAY)).toMatchObject({ spentMicro: 42n, heldMicro: 0n });

    // Show reads the live counters next to the ledger, and the alerts of the day.
    await store.reserve({ ...g, requestId: "g-live", amountMicro: 1_000_000n, limitMicro: BIG_LIMIT, ttlMs: HOUR });
    const show = await sy(["budgets", "show", "globex", "--day", DAY], { redis: true });
    expect(show.code, show.stderr).toBe(0);
    expect(show.stdout).toMatch(/ledger spend\s+\$0\.0685 \(6850000 micro-cents, 0\.68% of the limit\)/);
    expect(show.stdout).toMatch(/live spent\s+\$0\.0685 \(6850000 micro-cents, 0\.68% of the limit\)\n/);
    expect(show.stdout).toMatch(/live held\s+\$0\.01 \(1000000 micro-cents, 0\.10% of the limit\)/);
    expect(show.stdout).toMatch(/live holds\s+1\n/);
    expect(show.stdout).toMatch(/live checked\s+yes: rebuilt from the ledger/); // reconcile marked the day
    expect(show.stdout).toMatch(/available\s+\$9\.9215\n/);
    expect(show.stdout).toMatch(/alerts fired\s+50% at \d{4}-/);

    // Without a day: each tenant's today, in its own zone.
    const before = budgetDay(Date.now(), "America/New_York");
    const today = await sy(["budgets", "reconcile", "hooli"], { redis: true });
    const after = budgetDay(Date.now(), "America/New_York");
    expect(today.code, today.stderr).toBe(0);
    expect([before, after].some((d) => today.stdout.startsWith(`hooli ${d}: `))).toBe(true);

    // A row still in the routers' Redis ledger buffer (settled, not yet in
    // Postgres) is drained into the ledger first, so reconcile counts it.
    await r.redis.xadd(ledgerStreamKey(r.prefix), "*", "r", encodeLedgerRow(ledgerRow(globex, "g-buffered", 1_000_000n)));
    const buffered = await sy(["budgets", "reconcile", "globex", "--day", DAY], { redis: true });
    expect(buffered.code, buffered.stderr).toBe(0);
    expect(buffered.stdout).toMatch(/spent \$0\.0685 → \$0\.0785/);
    expect(buffered.stderr).not.toMatch(/still buffered/);
    expect(await r.redis.xlen(ledgerStreamKey(r.prefix))).toBe(0);
    expect((await db.sql`select count(*)::int as n from spend_ledger where request_id = 'g-buffered'`)[0]!.n).toBe(1);

    const unknown = await sy(["budgets", "reconcile", "nobody"], { redis: true });
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no tenant named 'nobody'/);
  });
});

describe("switchyard budgets set --time-zone", () => {
  it("another zone rebuilds the tenant's day in it from the ledger: a date of the same name may hold the old zone's counters", { timeout: 60_000 }, async () => {
    const wayne = await tenant("wayne");
    expect((await sy(["budgets", "set", "wayne", "--daily-cents", "1000"])).code).toBe(0);
    const zone = "America/New_York";
    const nyDay = budgetDay(Date.now(), zone);
    // The UTC day's counters under the date New York is on now (UTC → New York at 02:00 UTC: yesterday's date), checked.
    const store = new RedisBudgetStore(r.redis, r.prefix);
    await store.rebuild({ tenantId: wayne, day: nyDay, spentMicro: 5_000n, holds: [] });
    await insertLedgerRows(db.db, [ledgerRow(wayne, "w-now", 42n, new Date().toISOString())]);
    const res = await sy(["budgets", "set", "wayne", "--daily-cents", "1000", "--time-zone", zone], { redis: true, env: { SWITCHYARD_BILLING__REFRESH_MS: "0" } });
    expect(res.code, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/the day now starts at midnight America\/New_York: rebuilding today's counters/);
    expect(res.stdout).toContain(`wayne ${nyDay}: spent $0.00005 → $0.00000042`);
    expect((await store.snapshot(wayne, nyDay)).spentMicro).toBe(42n);
    // The same zone again changes no day: nothing rebuilt.
    const same = await sy(["budgets", "set", "wayne", "--daily-cents", "1000", "--time-zone", zone], { redis: true });
    expect(same.stdout).not.toContain("spent");
    // Without Redis, the note says what to run.
    const noRedis = await sy(["budgets", "set", "wayne", "--daily-cents", "1000", "--time-zone", "UTC"]);
    expect(noRedis.stderr).toMatch(/run 'switchyard budgets reconcile wayne'/);
  });
});

/** Delegates to a real store; `beforeRebuild` runs inside each rebuild call, before it reaches the store. */
class InterposedStore implements BudgetStore {
  rebuilds = 0;
  constructor(
    private readonly inner: BudgetStore,
    private readonly beforeRebuild: (call: number, input: RebuildInput) => Promise<void>,
  ) {}
  reserve = (i: Parameters<BudgetStore["reserve"]>[0]) => this.inner.reserve(i);
  settle = (i: Parameters<BudgetStore["settle"]>[0]) => this.inner.settle(i);
  release = (i: Parameters<BudgetStore["release"]>[0]) => this.inner.release(i);
  snapshot = (t: number, d: string) => this.inner.snapshot(t, d);
  holds = (t: number, d: string) => this.inner.holds(t, d);
  async rebuild(input: RebuildInput) {
    await this.beforeRebuild(++this.rebuilds, input);
    return this.inner.rebuild(input);
  }
}

describe("reconcileBudgetDay", () => {
  it("re-reads and retries when a settle lands between its read and its rebuild", async () => {
    const initrode = await tenant("initrode");
    const ref = { tenantId: initrode, day: DAY };
    const redisStore = new RedisBudgetStore(r.redis, r.prefix);
    await insertLedgerRows(db.db, [ledgerRow(initrode, "i-a", 1_000n)]);
    await redisStore.settle({ ...ref, requestId: "i-drift", actualMicro: 5n });
    await redisStore.reserve({ ...ref, requestId: "i-late", amountMicro: 300n, limitMicro: BIG_LIMIT, ttlMs: HOUR });
    // During the first rebuild the router finishes i-late: ledger row first, then settle.
    const store = new InterposedStore(redisStore, async (call, input) => {
      if (call !== 1) return;
      expect(input.holds.map((h) => h.requestId)).toEqual(["i-late"]);
      expect(input.spentMicro).toBe(1_000n);
      await insertLedgerRows(db.db, [ledgerRow(initrode, "i-late", 250n)]);
      await redisStore.settle({ ...ref, requestId: "i-late", actualMicro: 250n });
    });
    const res = await reconcileBudgetDay(db.db, store, initrode, DAY);
    expect(store.rebuilds).toBe(2);
    expect(res).toMatchObject({ attempts: 2, spentMicro: 1_250n, heldMicro: 0n, holds: 0, before: { spentMicro: 255n, heldMicro: 0n } });
    // The settle that raced is neither lost (it is in the ledger sum) nor counted twice.
    const snap = await redisStore.snapshot(initrode, DAY);
    expect(snap).toMatchObject({ spentMicro: 1_250n, heldMicro: 0n, version: res.version });
    expect(await redisStore.settle({ ...ref, requestId: "i-late", actualMicro: 250n })).toMatchObject({ alreadySettled: true, spentMicro: 1_250n });

    // The per-tenant helper reconciles each day given; a set, so running it again changes nothing.
    const days = await reconcileTenant(db.db, redisStore, initrode, "UTC", [DAY, "2026-11-19"]);
    expect(days.map((d) => [d.day, d.spentMicro, d.attempts])).toEqual([
      [DAY, 1_250n, 1],
      ["2026-11-19", 0n, 1],
    ]);
  });

  it("drains the ledger stream after its snapshot: a row settled before it, still a flush behind in Redis, is counted", async () => {
    const tenantId = await tenant("cyberdyne");
    const ref = { tenantId, day: DAY };
    const redisStore = new RedisBudgetStore(r.redis, r.prefix);
    await insertLedgerRows(db.db, [ledgerRow(tenantId, "c-a", 1_000n)]);
    await redisStore.settle({ ...ref, requestId: "c-a", actualMicro: 1_000n });
    // Settled (the version moved before any snapshot), its row still in the stream.
    await redisStore.settle({ ...ref, requestId: "c-late", actualMicro: 400n });
    const order: string[] = [];
    const store = new InterposedStore(redisStore, async () => {});
    store.snapshot = (t: number, d: string) => (order.push("snapshot"), redisStore.snapshot(t, d));
    const res = await reconcileBudgetDay(db.db, store, tenantId, DAY, {
      drainLedger: async () => {
        order.push("drain");
        await insertLedgerRows(db.db, [ledgerRow(tenantId, "c-late", 400n)]);
      },
    });
    expect(order).toEqual(["snapshot", "drain"]);
    expect(res).toMatchObject({ attempts: 1, spentMicro: 1_400n });
    expect((await redisStore.snapshot(tenantId, DAY)).spentMicro).toBe(1_400n);
  });

  it("gives up with a clear error when the day keeps changing", async () => {
    const tenantId = await tenant("umbrella");
    const redisStore = new RedisBudgetStore(r.redis, r.prefix);
    let n = 0;
    // Every rebuild loses the race to yet another settle.
    const store = new InterposedStore(redisStore, async () => {
      await redisStore.settle({ tenantId, day: DAY, requestId: `u-${++n}`, actualMicro: 1n });
    });
    await expect(reconcileBudgetDay(db.db, store, tenantId, DAY, { maxAttempts: 3 })).rejects.toThrow(ReconcileConflictError);
    expect(store.rebuilds).toBe(3);
    await expect(reconcileBudgetDay(db.db, store, tenantId, DAY, { maxAttempts: 2 })).rejects.toThrow(
      new RegExp(`budget of tenant ${tenantId} on ${DAY} kept changing during reconcile \\(2 attempts, last version \\d+\\); run it again`),
    );
    // Nothing was overwritten: the counters are the settles', not a stale rebuild's.
    expect(await redisStore.snapshot(tenantId, DAY)).toMatchObject({ spentMicro: 5n });
  });
});

describe("reconcileAllBudgets (what a router runs when Redis came back empty)", () => {
  it("rebuilds every budgeted tenant's today from the ledger, and tries a day that kept changing again in a later round", async () => {
    const tenantId = await tenant("tyrell");
    await setBudget(db.db, { tenantId, dailyLimitCents: 100n, timeZone: "UTC" });
    const redisStore = new RedisBudgetStore(r.redis, r.prefix);
    await insertLedgerRows(db.db, [ledgerRow(tenantId, "s-a", 4_000n)]);
    // Redis back empty: the day reads as unspent.
    expect((await redisStore.snapshot(tenantId, DAY)).spentMicro).toBe(0n);
    const now = Date.parse(`${DAY}T12:00:00Z`);
    let n = 0;
    // Its first two rebuilds lose the race to a settle (another router's, a live request's).
    const racing = () =>
      new InterposedStore(redisStore, async (_call, input) => {
        if (input.tenantId === tenantId && ++n <= 2) await redisStore.settle({ tenantId, day: DAY, requestId: `s-race-${n}`, actualMicro: 0n });
      });
    const short = await reconcileAllBudgets(db.db, racing(), now, { maxAttempts: 1, rounds: 2, pauseMs: 10 });
    expect(short.failed.map((f) => [f.tenantId, f.day])).toEqual([[tenantId, DAY]]);
    expect(short.failed[0]!.error).toMatch(/kept changing/);
    n = 0;
    const res = await reconcileAllBudgets(db.db, racing(), now, { maxAttempts: 1, rounds: 3, pauseMs: 10 });
    expect(res.failed).toEqual([]);
    expect(res.reconciled).toBeGreaterThanOrEqual(1);
    expect((await redisStore.snapshot(tenantId, DAY)).spentMicro).toBe(4_000n);
  });
});
