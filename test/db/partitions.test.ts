// spend_ledger upkeep (issue 12 item 5): routers create the coming months'
// partitions themselves, one at a time under an advisory lock, and
// `switchyard ledger retention` archives old months to CSV and detaches them.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { connectDb, createTenant, ensureLedgerPartitionsAhead, insertLedgerRows, listLedgerPartitions, partitionName, schema, utcMonthStart } from "@switchyard/db";
import { createLogger, loadConfig, startRouter, type RouterHandle } from "@switchyard/router";
import { createTestDb, createTestRedis, REDIS_URL, type TestDb, type TestRedis } from "../helpers/env.ts";

const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const root = path.resolve(import.meta.dirname, "../..");

let t: TestDb;
let redis: TestRedis;
let tenantId: number;
const archiveDir = mkdtempSync(path.join(tmpdir(), "sy-ledger-archive-"));

beforeAll(async () => {
  t = await createTestDb();
  redis = await createTestRedis();
  const r = await createTenant(t.db, "ledger-upkeep");
  if (!r.ok) throw new Error(r.reason);
  tenantId = r.tenant.id;
});
afterAll(async () => {
  await t?.drop();
  await redis?.cleanup();
  rmSync(archiveDir, { recursive: true, force: true });
});

function ledgerCli(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, [bin, "ledger", ...args], { cwd: root, env: { ...process.env, DATABASE_URL: t.url }, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, out, err })));
}

let seq = 0;
function row(startedAt: Date, over: Partial<schema.NewLedgerRow> = {}): schema.NewLedgerRow {
  return {
    requestId: `req_${(++seq).toString(16).padStart(32, "0")}`,
    tenantId,
    keyId: null,
    backend: "openrouter",
    model: "openai/gpt-4o-mini",
    worker: null,
    promptTokens: 10 + seq,
    completionTokens: seq,
    cachedTokens: 0,
    costMicro: BigInt(seq) * 1_000_003n,
    costSource: "provider",
    status: "ok",
    startedAt,
    firstTokenAt: new Date(startedAt.getTime() + 123),
    finishedAt: new Date(startedAt.getTime() + 987),
    ttftMs: 123,
    durationMs: 987,
    providerGenerationId: `gen-${seq}`,
    ...over,
  };
}

/** A CSV file as records of fields (RFC 4180 quoting, as COPY writes it). */
function parseCsv(text: string): string[][] {
  const records: string[][] = [];
  let field = "";
  let rec: string[] = [];
  let quoted = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (quoted) {
      if (ch === '"' && text[i + 1] === '"') (field += '"'), i++;
      else if (ch === '"') quoted = false;
      else field += ch;
    } else if (ch === '"') quoted = true;
    else if (ch === ",") rec.push(field), (field = "");
    else if (ch === "\n") rec.push(field), records.push(rec), (rec = []), (field = "");
    else field += ch;
  }
  if (field !== "" || rec.length > 0) rec.push(field), records.push(rec);
  return records;
}

describe("partitions ahead", () => {
  it("3 routers starting together create each coming month's partition once, and a row dated next month lands in its own", async () => {
    const now = new Date();
    const months = [0, 1, 2, 3, 4].map((i) => partitionName(utcMonthStart(now, i)));
    // The migration made this month and three ahead; drop them (empty) so the routers must make all five.
    for (const m of months) await t.sql.unsafe(`drop table if exists "${m}"`);
    const lines: Array<Record<string, unknown>> = [];
    const config = loadConfig({
      env: {},
      overrides: {
        "router.port": 0,
        "router.adminPort": 0,
        "redis.url": REDIS_URL,
        "redis.keyPrefix": redis.prefix,
        "database.url": t.url,
        "router.ledgerMonthsAhead": 4,
      },
    });
    const routers: RouterHandle[] = await Promise.all(
      [0, 1, 2].map((i) => startRouter(config, { log: createLogger("info", { router: i }, (l) => lines.push(JSON.parse(l) as Record<string, unknown>)) })),
    );
    try {
      const created = lines.filter((l) => l.msg === "spend_ledger partitions created").flatMap((l) => l.partitions as string[]);
      // Each month made by exactly one router, none failed.
      expect([...created].sort()).toEqual([...months].sort());
      expect(lines.filter((l) => l.level === "warn" || l.level === "error").map((l) => l.msg)).not.toContain("spend_ledger partition upkeep failed; retrying tomorrow");
      const attached = (await listLedgerPartitions(t.sql)).filter((p) => p.attached).map((p) => p.name);
      for (const m of months) expect(attached).toContain(m);
      // A row dated next month, inserted as any client would (no partition made on the way): it lands in next month's partition.
      const next = utcMonthStart(now, 1);
      const started = new Date(next.getTime() + 3 * 86_400_000);
      await t.sql`insert into spend_ledger (request_id, tenant_id, backend, model, cost_micro, cost_source, status, started_at, finished_at, duration_ms)
        values ('req_next_month', ${tenantId}, 'worker', 'sim', 0, 'price_table', 'ok', ${started.toISOString()}::timestamptz, ${started.toISOString()}::timestamptz, 1)`;
      const [where] = await t.sql<{ p: string }[]>`select tableoid::regclass::text as p from spend_ledger where request_id = 'req_next_month'`;
      expect(where!.p).toBe(partitionName(next));
    } finally {
      await Promise.all(routers.map((r) => r.close()));
    }
  }, 60_000);

  it("many sessions racing for the same months: every call succeeds and each partition is created by one of them", async () => {
    const future = new Date(Date.UTC(new Date().getUTCFullYear() + 3, 0, 15));
    const handles = Array.from({ length: 8 }, () => connectDb(t.url, { max: 1 }));
    try {
      const results = await Promise.all(handles.map((h) => ensureLedgerPartitionsAhead(h.sql, { now: future, monthsAhead: 5 })));
      const all = results.flat();
      const expected = [0, 1, 2, 3, 4, 5].map((i) => partitionName(utcMonthStart(future, i)));
      expect(all.sort()).toEqual(expected.sort());
    } finally {
      await Promise.all(handles.map((h) => h.close()));
    }
  }, 60_000);
});

describe("switchyard ledger retention", () => {
  it("refuses bad input with exit 2", async () => {
    for (const args of [["retention", "--keep-months", "0"], ["retention", "--keep-months", "1.5"], ["retention", "--keep-months", "two"], ["retention", "--keep-months", "-1"], ["retention"], ["retention", "--keep-months", "3", "--drop"], ["vacuum"]]) {
      const r = await ledgerCli(args);
      expect(r.code, `${args.join(" ")}: ${r.err}`).toBe(2);
      expect(r.err).toMatch(/ledger/);
    }
  }, 60_000);

  it("archives an old month to a CSV whose rows equal the partition's, then detaches it; --drop deletes it", async () => {
    const now = new Date();
    const old = utcMonthStart(now, -14);
    const older = utcMonthStart(now, -15);
    const oldName = partitionName(old);
    const olderName = partitionName(older);
    // Values a float or a careless CSV would damage: 2^53 + 1 micro-cents, commas, quotes, a line break, nulls.
    const rows = [
      row(new Date(old.getTime() + 86_400_000 + 1), { costMicro: 9_007_199_254_740_993n, model: 'vendor/model,with "quotes"' }),
      row(new Date(old.getTime() + 2 * 86_400_000), { providerGenerationId: null, firstTokenAt: null, ttftMs: null, status: "client_cancelled", costSource: "estimate" }),
      row(new Date(old.getTime() + 3 * 86_400_000 + 456), { worker: "w-1", backend: "worker", model: "line\nbreak", costMicro: 0n }),
    ];
    await insertLedgerRows(t.db, rows);
    // A row of an even older month written without its partition: it waits in the default partition.
    const stray = row(new Date(older.getTime() + 5 * 86_400_000));
    await t.sql`insert into spend_ledger (request_id, tenant_id, backend, model, cost_micro, cost_source, status, started_at, finished_at, duration_ms)
      values (${stray.requestId}, ${tenantId}, 'openrouter', 'x', 42, 'provider', 'ok', ${stray.startedAt.toISOString()}::timestamptz, ${stray.finishedAt.toISOString()}::timestamptz, 5)`;
    const before = await t.sql<Record<string, string | null>[]>`
      select request_id, tenant_id::text, key_id::text, backend, model, worker, prompt_tokens::text, completion_tokens::text, cost_micro::text,
        cost_source::text, status::text, started_at, first_token_at, provider_generation_id
      from spend_ledger where started_at >= ${old.toISOString()}::timestamptz and started_at < ${utcMonthStart(now, -13).toISOString()}::timestamptz order by started_at`;
    expect(before).toHaveLength(3);

    const r = await ledgerCli(["retention", "--keep-months", "3", "--archive-dir", archiveDir]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain(`${oldName}: 3 rows, archived to ${path.join(archiveDir, `${oldName}.csv`)}, detached (kept as a table)`);
    expect(r.out).toContain(`${olderName}: 1 rows`);

    const csv = parseCsv(readFileSync(path.join(archiveDir, `${oldName}.csv`), "utf8"));
    const [header, ...records] = csv;
    expect(header).toEqual([
      "request_id", "tenant_id", "key_id", "backend", "model", "worker", "prompt_tokens", "completion_tokens", "cached_tokens", "cost_micro",
      "cost_source", "status", "started_at", "first_token_at", "finished_at", "ttft_ms", "duration_ms", "provider_generation_id", "created_at", "cache_write_tokens", "cache_write_1h_tokens",
    ]);
    expect(records).toHaveLength(before.length);
    const col = (rec: string[], name: string) => rec[header!.indexOf(name)]!;
    records.forEach((rec, i) => {
      const b = before[i]!;
      for (const k of ["request_id", "tenant_id", "backend", "model", "prompt_tokens", "completion_tokens", "cost_micro", "cost_source", "status"]) expect(col(rec, k), k).toBe(b[k]);
      // NULL is an empty unquoted field.
      for (const k of ["key_id", "worker", "provider_generation_id"]) expect(col(rec, k), k).toBe(b[k] ?? "");
      expect(new Date(col(rec, "started_at").replace(" ", "T").replace(/\+00$/, "Z")).getTime()).toBe(new Date(b.started_at!).getTime());
      expect(col(rec, "started_at")).toMatch(/\+00$/); // written in UTC
    });
    expect(col(records[0]!, "cost_micro")).toBe("9007199254740993");

    // Detached: the ledger no longer holds the month, the table still does.
    const parts = await listLedgerPartitions(t.sql);
    expect(parts.find((p) => p.name === oldName)?.attached).toBe(false);
    expect(parts.find((p) => p.name === olderName)?.attached).toBe(false);
    const [inLedger] = await t.sql`select count(*)::int as n from spend_ledger where started_at < ${utcMonthStart(now, -13).toISOString()}::timestamptz`;
    expect(inLedger!.n).toBe(0);
    const [kept] = await t.sql.unsafe(`select count(*)::int as n from "${oldName}"`);
    expect(kept!.n).toBe(3);
    // The kept months are untouched.
    expect(parts.find((p) => p.name === partitionName(utcMonthStart(now, -1)))?.attached).toBe(true);
    expect(parts.find((p) => p.name === partitionName(now))?.attached).toBe(true);

    // Nothing left to do: a second run changes nothing.
    const again = await ledgerCli(["retention", "--keep-months", "3", "--archive-dir", archiveDir]);
    expect(again.code, again.err).toBe(0);
    expect(again.out).toMatch(/nothing to do/);

    // --drop: archived, detached and deleted.
    const gone = utcMonthStart(now, -20);
    await insertLedgerRows(t.db, [row(new Date(gone.getTime() + 1000))]);
    const d = await ledgerCli(["retention", "--keep-months", "3", "--archive-dir", archiveDir, "--drop"]);
    expect(d.code, d.err).toBe(0);
    expect(d.out).toContain(`${partitionName(gone)}: 1 rows, archived to`);
    expect(d.out).toContain("detached and dropped");
    const [exists] = await t.sql`select to_regclass(${partitionName(gone)}) is not null as e`;
    expect(exists!.e).toBe(false);
    expect(parseCsv(readFileSync(path.join(archiveDir, `${partitionName(gone)}.csv`), "utf8"))).toHaveLength(2);
  }, 90_000);
});
