// The spend ledger against a real Postgres: migrations, idempotent batched
// inserts, monthly partitions, exact sums and the finance views.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { sql } from "drizzle-orm";
import { createTenant, schema } from "@switchyard/db";
import { centsToMicro, decodeLedgerRow, encodeLedgerRow, ensurePartitions, insertLedgerRows, insertLedgerTexts, ledgerTextMonth, priceAt, spendByDay, tenantDaySpend, usdToMicro } from "@switchyard/db";
import { createTestDb, uniqueName, type TestDb } from "../helpers/env.ts";

let t: TestDb;
beforeAll(async () => {
  t = await createTestDb();
});
afterAll(async () => {
  await t?.drop();
});

async function newTenant(opts: { dailyLimitCents?: bigint; timeZone?: string } = {}) {
  const r = await createTenant(t.db, uniqueName("t").replace(/^sy_/, "").toLowerCase());
  if (!r.ok) throw new Error(r.reason);
  if (opts.dailyLimitCents !== undefined) {
    await t.db.insert(schema.budgets).values({ tenantId: r.tenant.id, dailyLimitCents: opts.dailyLimitCents, timeZone: opts.timeZone ?? "UTC" });
  }
  return r.tenant;
}

let seq = 0;
function row(tenantId: number, over: Partial<schema.NewLedgerRow> = {}): schema.NewLedgerRow {
  const startedAt = over.startedAt ?? new Date("2026-11-15T12:00:00Z");
  return {
    requestId: `req_${++seq}_${Math.random().toString(36).slice(2, 8)}`,
    tenantId,
    keyId: null,
    backend: "openrouter",
    model: "meta-llama/llama-3.1-8b-instruct",
    worker: null,
    promptTokens: 100,
    completionTokens: 20,
    cachedTokens: 0,
    costMicro: 1234n,
    costSource: "provider",
    status: "ok",
    startedAt,
    firstTokenAt: new Date(startedAt.getTime() + 150),
    finishedAt: new Date(startedAt.getTime() + 900),
    ttftMs: 150,
    durationMs: 900,
    providerGenerationId: "gen-1",
    ...over,
  };
}

async function partitionOf(requestId: string): Promise<string[]> {
  const rows = await t.sql<{ p: string }[]>`select tableoid::regclass::text as p from spend_ledger where request_id = ${requestId}`;
  return rows.map((r) => r.p);
}

describe("spend ledger", () => {
  it("migrations create the tables, the views and partitions around now", async () => {
    const rels = await t.sql<{ relname: string; relkind: string }[]>`
      select relname, relkind from pg_class
      where relname in ('budgets', 'prices', 'spend_ledger', 'budget_alerts', 'spend_daily', 'spend_vs_budget', 'spend_ledger_default')`;
    const kinds = Object.fromEntries(rels.map((r) => [r.relname, r.relkind]));
    expect(kinds).toEqual({
      budgets: "r",
      prices: "r",
      spend_ledger: "p", // partitioned
      spend_ledger_default: "r",
      budget_alerts: "r",
      spend_daily: "v",
      spend_vs_budget: "v",
    });
    const now = new Date();
    const month = `spend_ledger_p${now.toISOString().slice(0, 7).replace("-", "_")}`;
    const parts = await t.sql<{ name: string }[]>`select inhrelid::regclass::text as name from pg_inherits where inhparent = 'spend_ledger'::regclass`;
    expect(parts.map((p) => p.name)).toContain(month);
    expect(parts.map((p) => p.name)).toContain("spend_ledger_default");
  });

  it("a settle retried 5 times (in sequence and at once) leaves one row", async () => {
    const tenant = await newTenant();
    const r = row(tenant.id);
    let inserted = 0;
    for (let i = 0; i < 5; i++) inserted += (await insertLedgerRows(t.db, [r])).inserted;
    const parallel = await Promise.all(Array.from({ length: 5 }, () => insertLedgerRows(t.db, [{ ...r }])));
    inserted += parallel.reduce((s, p) => s + p.inserted, 0);
    // Duplicates inside one batch, too.
    inserted += (await insertLedgerRows(t.db, [r, r, r])).inserted;
    expect(inserted).toBe(1);
    const [c] = await t.sql<{ n: string }[]>`select count(*) as n from spend_ledger where request_id = ${r.requestId}`;
    expect(c?.n).toBe("1");
  });

  it("batched inserts sum exactly to the micro-cent, past 2^53 and across batches", async () => {
    const tenant = await newTenant();
    // Provider-reported costs as decimal USD strings, converted without floats.
    const costs = ["0.000123", "0.00000001", "0.1", "0.2", "0.30000000000000004", "12.34567891"];
    const rows = Array.from({ length: 2500 }, (_, i) => row(tenant.id, { costMicro: usdToMicro(costs[i % costs.length]!) }));
    // One very large row: beyond 2^53 micro-cents (≈ $90M), where a double would drop digits.
    rows.push(row(tenant.id, { costMicro: 2n ** 53n + 1n }));
    const expected = rows.reduce((s, r) => s + r.costMicro, 0n);
    expect((await insertLedgerRows(t.db, rows)).inserted).toBe(2501);
    expect((await insertLedgerRows(t.db, rows)).inserted).toBe(0);

    const [byDay] = await spendByDay(t.db, { from: "2026-11-15", to: "2026-11-15", tenantId: tenant.id });
    expect(byDay).toMatchObject({ tenantId: tenant.id, tenantName: tenant.name, day: "2026-11-15", requests: 2501 });
    expect(byDay?.costMicro).toBe(expected);

    const [view] = await t.sql<{ cost_micro: string; cost_usd: string }[]>`
      select sum(cost_micro)::text as cost_micro, sum(cost_usd)::text as cost_usd from spend_daily where tenant_id = ${tenant.id}`;
    expect(view?.cost_micro).toBe(expected.toString());
    const usd = `${expected / 100_000_000n}.${(expected % 100_000_000n).toString().padStart(8, "0")}`;
    expect(view?.cost_usd).toBe(usd);
  });

  it("rows land in their month's partition; an unseen month gets its partition created", async () => {
    const tenant = await newTenant();
    const nov = row(tenant.id, { startedAt: new Date("2026-11-30T23:59:59.999Z") });
    const dec = row(tenant.id, { startedAt: new Date("2026-12-01T00:00:00Z") });
    const far = row(tenant.id, { startedAt: new Date("2031-07-04T10:00:00Z") });
    await insertLedgerRows(t.db, [nov, dec, far]);
    expect(await partitionOf(nov.requestId)).toEqual(["spend_ledger_p2026_11"]);
    expect(await partitionOf(dec.requestId)).toEqual(["spend_ledger_p2026_12"]);
    expect(await partitionOf(far.requestId)).toEqual(["spend_ledger_p2031_07"]);
  });

  it("a row written around the ledger code falls into the default partition until ensurePartitions moves it", async () => {
    const tenant = await newTenant();
    const stray = row(tenant.id, { startedAt: new Date("2033-02-10T08:00:00Z"), costMicro: 777n });
    await t.db.insert(schema.spendLedger).values(stray);
    expect(await partitionOf(stray.requestId)).toEqual(["spend_ledger_default"]);
    const created = await ensurePartitions(t.db, new Date("2033-01-20T00:00:00Z"), new Date("2033-02-01T00:00:00Z"));
    expect(created).toEqual(["spend_ledger_p2033_01", "spend_ledger_p2033_02"]);
    expect(await partitionOf(stray.requestId)).toEqual(["spend_ledger_p2033_02"]);
    expect(await ensurePartitions(t.db, new Date("2033-01-20T00:00:00Z"), new Date("2033-02-28T00:00:00Z"))).toEqual([]);
    // Still idempotent after the move.
    expect((await insertLedgerRows(t.db, [stray])).inserted).toBe(0);
  });

  it("concurrent ensurePartitions calls create each month once", async () => {
    const results = await Promise.all(
      Array.from({ length: 4 }, () => ensurePartitions(t.db, new Date("2035-01-01T00:00:00Z"), new Date("2035-03-01T00:00:00Z"))),
    );
    expect(results.flat().sort()).toEqual(["spend_ledger_p2035_01", "spend_ledger_p2035_02", "spend_ledger_p2035_03"]);
  });

  it("is append-only: updates and deletes are refused", async () => {
    const tenant = await newTenant();
    const r = row(tenant.id);
    await insertLedgerRows(t.db, [r]);
    await expect(t.sql`update spend_ledger set cost_micro = 0 where request_id = ${r.requestId}`).rejects.toThrow(/append-only/);
    await expect(t.sql`delete from spend_ledger where request_id = ${r.requestId}`).rejects.toThrow(/append-only/);
  });

  it("no dates: each tenant's own today, which is not the UTC date for a tenant far from UTC", async () => {
    // At any UTC hour one of these two zones is on another date than UTC:
    // UTC+14 from 10:00 UTC on (already tomorrow), UTC−11 before 11:00 (still yesterday).
    const zone = new Date().getUTCHours() >= 10 ? "Pacific/Kiritimati" : "Pacific/Pago_Pago";
    const far = await newTenant({ dailyLimitCents: 100n, timeZone: zone });
    const near = await newTenant({ dailyLimitCents: 100n, timeZone: "UTC" });
    const now = new Date();
    const utcToday = now.toISOString().slice(0, 10);
    const farToday = new Intl.DateTimeFormat("en-CA", { timeZone: zone, year: "numeric", month: "2-digit", day: "2-digit" }).format(now);
    expect(farToday).not.toBe(utcToday);
    await insertLedgerRows(t.db, [
      row(far.id, { startedAt: now, costMicro: 7n }),
      row(near.id, { startedAt: now, costMicro: 11n }),
      // Two days back: no tenant's today.
      row(far.id, { startedAt: new Date(now.getTime() - 2 * 86_400_000), costMicro: 1000n }),
    ]);
    const today = (await spendByDay(t.db, {})).filter((r) => r.tenantId === far.id || r.tenantId === near.id);
    expect(today.map((r) => [r.tenantId, r.day, r.costMicro])).toEqual(
      [
        [far.id, farToday, 7n],
        [near.id, utcToday, 11n],
      ].sort((a, b) => String(a[1]).localeCompare(String(b[1])) || Number(a[0]) - Number(b[0])),
    );
    expect(await spendByDay(t.db, { tenantId: far.id })).toMatchObject([{ day: farToday, costMicro: 7n }]);
  });

  it("days follow the tenant's time zone; spend_vs_budget compares with the limit", async () => {
    const tokyo = await newTenant({ dailyLimitCents: 100n, timeZone: "Asia/Tokyo" });
    // 16:00Z on Nov 30 is 01:00 on Dec 1 in Tokyo.
    await insertLedgerRows(t.db, [
      row(tokyo.id, { startedAt: new Date("2026-11-30T14:59:00Z"), costMicro: centsToMicro(30) }),
      row(tokyo.id, { startedAt: new Date("2026-11-30T16:00:00Z"), costMicro: centsToMicro(25), backend: "anthropic", model: "claude" }),
      row(tokyo.id, { startedAt: new Date("2026-11-30T18:00:00Z"), costMicro: centsToMicro(50) }),
    ]);
    const days = await spendByDay(t.db, { from: "2026-11-29", to: "2026-12-02", tenantId: tokyo.id });
    expect(days.map((d) => [d.day, d.costMicro])).toEqual([
      ["2026-11-30", 30_000_000n],
      ["2026-12-01", 75_000_000n],
    ]);
    const byBackend = await spendByDay(t.db, { from: "2026-12-01", to: "2026-12-01", tenantId: tokyo.id, by: "backend" });
    expect(byBackend.map((d) => [d.backend, d.model, d.costMicro])).toEqual([
      ["anthropic", null, 25_000_000n],
      ["openrouter", null, 50_000_000n],
    ]);
    const byModel = await spendByDay(t.db, { from: "2026-12-01", to: "2026-12-01", tenantId: tokyo.id, by: "model" });
    expect(byModel.map((d) => d.model)).toEqual(["claude", "meta-llama/llama-3.1-8b-instruct"]);

    const vs = await t.db.select().from(schema.spendVsBudget).where(sql`${schema.spendVsBudget.tenantId} = ${tokyo.id}`).orderBy(schema.spendVsBudget.day);
    expect(vs.map((v) => [v.day, v.costMicro, v.limitMicro, v.remainingMicro, v.percentUsed])).toEqual([
      ["2026-11-30", 30_000_000n, 100_000_000n, 70_000_000n, "30.00"],
      ["2026-12-01", 75_000_000n, 100_000_000n, 25_000_000n, "75.00"],
    ]);
    const daily = await t.db.select().from(schema.spendDaily).where(sql`${schema.spendDaily.tenantId} = ${tokyo.id}`);
    expect(daily).toHaveLength(3);

    const recon = await tenantDaySpend(t.db, tokyo.id, "2026-12-01", ["nope"]);
    expect(recon).toEqual({ spentMicro: 75_000_000n, ledgeredRequestIds: [] });
  });

  it("tenantDaySpend names which held requests already have a ledger row", async () => {
    const tenant = await newTenant();
    const a = row(tenant.id, { startedAt: new Date("2026-11-20T10:00:00Z"), costMicro: 5n });
    await insertLedgerRows(t.db, [a]);
    expect(await tenantDaySpend(t.db, tenant.id, "2026-11-20", [a.requestId, "other"])).toEqual({ spentMicro: 5n, ledgeredRequestIds: [a.requestId] });
    expect(await tenantDaySpend(t.db, tenant.id, "2026-11-21")).toEqual({ spentMicro: 0n, ledgeredRequestIds: [] });
  });

  it("budgets default to UTC and 80/100 % alerts; alerts are unique per tenant, day and threshold", async () => {
    const tenant = await newTenant();
    const [b] = await t.db.insert(schema.budgets).values({ tenantId: tenant.id, dailyLimitCents: 500n }).returning();
    expect(b).toMatchObject({ timeZone: "UTC", alertThresholds: [80, 100], dailyLimitCents: 500n });
    const first = await t.db.insert(schema.budgetAlerts).values({ tenantId: tenant.id, day: "2026-11-30", threshold: 80 }).onConflictDoNothing().returning();
    const again = await t.db.insert(schema.budgetAlerts).values({ tenantId: tenant.id, day: "2026-11-30", threshold: 80 }).onConflictDoNothing().returning();
    expect([first.length, again.length]).toEqual([1, 0]);
    await expect(t.db.insert(schema.budgets).values({ tenantId: (await newTenant()).id, dailyLimitCents: -1n })).rejects.toThrow();
  });

  it("priceAt picks the price in force at the instant", async () => {
    const model = uniqueName("model");
    await t.db.insert(schema.prices).values([
      { backend: "openrouter", model, inputMicroPerMtok: 100n, outputMicroPerMtok: 200n, effectiveFrom: new Date("2026-01-01T00:00:00Z") },
      { backend: "openrouter", model, inputMicroPerMtok: 150n, outputMicroPerMtok: 300n, cachedInputMicroPerMtok: 15n, effectiveFrom: new Date("2026-06-01T00:00:00Z") },
    ]);
    expect((await priceAt(t.db, "openrouter", model, new Date("2026-03-01T00:00:00Z")))?.inputMicroPerMtok).toBe(100n);
    expect(await priceAt(t.db, "openrouter", model, new Date("2026-07-01T00:00:00Z"))).toMatchObject({ inputMicroPerMtok: 150n, cachedInputMicroPerMtok: 15n });
    expect(await priceAt(t.db, "openrouter", model, new Date("2025-07-01T00:00:00Z"))).toBeUndefined();
  });
  it("a row as text: every column round-trips, nulls and escapes included; its month is read from its first bytes", () => {
    // A row literal: quotes, backslashes, commas, parentheses, spaces and an empty text are all plain inside its quotes.
    const full = { ...row(7), keyId: 42, worker: 'w"1\\x, (y) ', cacheWriteTokens: 3, cacheWrite1hTokens: 0, costMicro: 2n ** 63n - 1n, model: "m/é", providerGenerationId: "" };
    const text = encodeLedgerRow(full);
    expect(text.startsWith("(2026-11-15T12:00:00.000Z,")).toBe(true);
    expect(decodeLedgerRow(text)).toEqual(full);
    const nulls = row(7, { firstTokenAt: null, ttftMs: null, providerGenerationId: null, keyId: null, worker: null });
    expect(decodeLedgerRow(encodeLedgerRow(nulls))).toEqual({ ...nulls, cacheWriteTokens: 0, cacheWrite1hTokens: 0 });
    expect(ledgerTextMonth(text)).toBe("2026-11");
    // A line break in a value: row literals travel one per line, so that row is written as JSON.
    const broken = { ...full, model: "m/é\n", providerGenerationId: "gen\r\n1", cacheWrite1hTokens: 2 };
    const json = encodeLedgerRow(broken);
    expect(json.startsWith('{"startedAt":"2026-11-15T12:00:00.000Z"')).toBe(true);
    expect(decodeLedgerRow(json)).toEqual(broken);
    // 1-hour cache writes, which the literal does not carry: JSON too.
    const hour = { ...full, cacheWrite1hTokens: 2 };
    expect(encodeLedgerRow(hour).startsWith("{")).toBe(true);
    expect(decodeLedgerRow(encodeLedgerRow(hour))).toEqual(hour);
    expect(ledgerTextMonth(json)).toBe("2026-11");
    // A row an older router wrote (JSON.stringify of the row, startedAt not first) still has a month.
    const older = JSON.stringify({ ...row(7, { startedAt: new Date("2026-10-31T23:59:59Z") }), costMicro: "5" });
    expect(ledgerTextMonth(older)).toBe("2026-10");
    expect(ledgerTextMonth("not json")).toBeUndefined();
    expect(() => decodeLedgerRow('(2026-11-15T12:00:00.000Z,"unterminated')).toThrow(SyntaxError);
  });

  it("a row's instants are written as toISOString writes them, across minutes and at the edges of the years it can write", () => {
    const iso = (ms: number) => new Date(ms).toISOString();
    const base = Date.parse("2026-12-31T23:58:59.000Z");
    for (const ms of [base, base + 1, base + 999, base + 1_000, base + 60_999, base + 61_001, 0, 59_999, -1, -60_001, 253_402_300_799_999, 253_402_300_800_000, Date.parse("2027-01-01T00:00:00.000Z")]) {
      const r = row(7, { startedAt: new Date(ms), firstTokenAt: new Date(ms + 1), finishedAt: new Date(ms + 59_999) });
      const literal = encodeLedgerRow(r);
      expect(literal.startsWith(`(${iso(ms)},`)).toBe(true);
      expect(literal).toContain(`,${iso(ms + 1)},${iso(ms + 59_999)},`);
      // The JSON form (a row with a line break) writes the same instants.
      const o = JSON.parse(encodeLedgerRow({ ...r, model: "m\n" })) as Record<string, string>;
      expect([o.startedAt, o.firstTokenAt, o.finishedAt]).toEqual([iso(ms), iso(ms + 1), iso(ms + 59_999)]);
    }
    expect(() => encodeLedgerRow(row(7, { startedAt: new Date(Number.NaN) }))).toThrow(RangeError);
  });

  it("rows inserted as their text equal the same rows inserted as rows; again adds nothing; older texts are read too", async () => {
    const tenant = await newTenant();
    const a = row(tenant.id, { costMicro: 2n ** 60n + 7n, keyId: null, worker: "w-1", cachedTokens: 5, cacheWriteTokens: 2 });
    const b = row(tenant.id, { firstTokenAt: null, ttftMs: null, providerGenerationId: null, status: "client_cancelled", costSource: "estimate", startedAt: new Date("2027-03-01T00:00:00.250Z") });
    const c = row(tenant.id);
    const older = JSON.stringify({ ...c, costMicro: String(c.costMicro) });
    // Texts a row literal must quote, and an empty one; and a line break (that row goes as JSON).
    const d = row(tenant.id, { worker: 'w "q" \\ (x), y', model: "", providerGenerationId: "gen-1,2" });
    const e = row(tenant.id, { providerGenerationId: "gen\nline" });
    expect(encodeLedgerRow(d).startsWith("(")).toBe(true);
    expect(encodeLedgerRow(e).startsWith("{")).toBe(true);
    // Both forms in one batch, as a stream holds them while routers upgrade.
    expect(await insertLedgerTexts(t.db, [encodeLedgerRow(a), encodeLedgerRow(b), older, encodeLedgerRow(d), encodeLedgerRow(e)])).toEqual({ inserted: 5 });
    expect(await insertLedgerTexts(t.db, [encodeLedgerRow(a), older, encodeLedgerRow(e)])).toEqual({ inserted: 0 });
    const read = async (id: string) => (await t.sql`select * from spend_ledger where request_id = ${id}`)[0];
    const viaText = await Promise.all([a, b, c, d, e].map((r) => read(r.requestId!)));
    // The same rows through the row path, under new ids, read back alike.
    const twins = [a, b, c, d, e].map((r) => ({ ...r, requestId: `${r.requestId}-rows` }));
    expect(await insertLedgerRows(t.db, twins)).toEqual({ inserted: 5 });
    const viaRows = await Promise.all(twins.map((r) => read(r.requestId!)));
    const strip = (r: Record<string, unknown> | undefined) => ({ ...r, request_id: undefined, created_at: undefined });
    expect(viaText.map(strip)).toEqual(viaRows.map(strip));
    expect(viaText[0]!.cost_micro).toBe(String(2n ** 60n + 7n));
    // A month not seen before got its partition.
    expect(await partitionOf(b.requestId!)).toEqual(["spend_ledger_p2027_03"]);
  });

  it("the 1-hour cache writes are kept on the row, through both text forms and the row path; the row literal stays the one routers from before the column read and write", async () => {
    const tenant = await newTenant();
    const withHour = (over: Partial<schema.NewLedgerRow> = {}) => row(tenant.id, { backend: "anthropic", promptTokens: 1_000, cacheWriteTokens: 300, cacheWrite1hTokens: 200, ...over });
    const hour = withHour();
    const hourBroken = withHour({ providerGenerationId: "msg\n1" });
    const direct = withHour();
    const plain = row(tenant.id, { cacheWriteTokens: 7 });
    // A row with none is the literal every router since migration 0009 writes (19 fields); one with some goes as JSON.
    expect(encodeLedgerRow(plain).startsWith("(")).toBe(true);
    expect(encodeLedgerRow(plain)).toBe(literalBefore0013(plain));
    expect(encodeLedgerRow(hour).startsWith("{")).toBe(true);
    expect(await insertLedgerTexts(t.db, [encodeLedgerRow(plain), encodeLedgerRow(hour), encodeLedgerRow(hourBroken)])).toEqual({ inserted: 3 });
    expect(await insertLedgerRows(t.db, [direct])).toEqual({ inserted: 1 });
    const got = async () =>
      new Map(
        (await t.sql<{ request_id: string; cache_write_tokens: number; cache_write_1h_tokens: number }[]>`
          select request_id, cache_write_tokens, cache_write_1h_tokens from spend_ledger where tenant_id = ${tenant.id}`).map((r) => [r.request_id, [r.cache_write_tokens, r.cache_write_1h_tokens]]),
      );
    const by = await got();
    for (const r of [hour, hourBroken, direct]) expect(by.get(r.requestId!)).toEqual([300, 200]);
    expect(by.get(plain.requestId!)).toEqual([7, 0]);
    // While routers upgrade, one from before migration 0013 drains this build's rows with its own statements: every row lands (the 1-hour split, which it does not know, as 0).
    const upgrade = [row(tenant.id, { cacheWriteTokens: 5 }), withHour(), withHour({ providerGenerationId: "msg\n2" })];
    const texts = upgrade.map(encodeLedgerRow);
    expect(await insertBefore0013(texts.filter((x) => x.startsWith("(")), texts.filter((x) => x.startsWith("{")))).toBe(3);
    const after = await got();
    expect(upgrade.map((r) => after.get(r.requestId!))).toEqual([[5, 0], [300, 0], [300, 0]]);
  });

  it("an abandoned attempt's row (`<id>/a<n>`) counts its cost on its own backend and model, not as a request: spend_daily, spend_vs_budget and spendByDay", async () => {
    const tenant = await newTenant({ dailyLimitCents: 1n });
    const at = new Date("2026-11-20T10:00:00Z");
    const request = row(tenant.id, { requestId: "req_abandoned_1", backend: "worker", model: "smol", costMicro: 0n, costSource: "price_table", startedAt: at });
    const attempts = [
      row(tenant.id, { requestId: "req_abandoned_1/a1", backend: "openrouter", model: "openai/gpt-4o-mini", costMicro: 300n, costSource: "estimate", status: "timeout", startedAt: at }),
      row(tenant.id, { requestId: "req_abandoned_1/a2", backend: "anthropic", model: "claude-3-5-haiku-latest", costMicro: 1_400n, costSource: "estimate", status: "timeout", startedAt: at }),
    ];
    const other = row(tenant.id, { requestId: "req_abandoned_2", backend: "openrouter", model: "openai/gpt-4o-mini", costMicro: 1_000n, startedAt: at });
    expect(await insertLedgerRows(t.db, [request, ...attempts, other])).toEqual({ inserted: 4 });
    const daily = await t.sql<{ backend: string; requests: string; abandoned_attempts: string; cost_micro: string }[]>`
      select backend, requests::text, abandoned_attempts::text, cost_micro::text from spend_daily where tenant_id = ${tenant.id} order by backend`;
    expect(daily).toEqual([
      { backend: "anthropic", requests: "0", abandoned_attempts: "1", cost_micro: "1400" },
      { backend: "openrouter", requests: "1", abandoned_attempts: "1", cost_micro: "1300" },
      { backend: "worker", requests: "1", abandoned_attempts: "0", cost_micro: "0" },
    ]);
    const [vs] = await t.sql<{ requests: string; cost_micro: string }[]>`select requests::text, cost_micro::text from spend_vs_budget where tenant_id = ${tenant.id}`;
    expect(vs).toEqual({ requests: "2", cost_micro: "2700" });
    const [perDay] = await spendByDay(t.db, { from: "2026-11-20", to: "2026-11-20", tenantId: tenant.id, by: "day" });
    expect(perDay).toMatchObject({ requests: 2, abandonedAttempts: 2, costMicro: 2_700n });
    const byModel = await spendByDay(t.db, { from: "2026-11-20", to: "2026-11-20", tenantId: tenant.id, by: "model" });
    expect(byModel.map((r) => [r.backend, r.requests, r.abandonedAttempts, r.costMicro])).toEqual([
      ["anthropic", 0, 1, 1_400n],
      ["openrouter", 1, 1, 1_300n],
      ["worker", 1, 0, 0n],
    ]);
    // The day's spend (what reconcile rebuilds the counters from) is the whole request's.
    expect((await tenantDaySpend(t.db, tenant.id, "2026-11-20", ["req_abandoned_1"])).spentMicro).toBe(2_700n);
  });

  it("a batch with a text Postgres cannot read fails with a data exception (SQLSTATE 22…)", async () => {
    const tenant = await newTenant();
    const good = encodeLedgerRow(row(tenant.id));
    await expect(insertLedgerTexts(t.db, [good, "not json"])).rejects.toMatchObject({ code: expect.stringMatching(/^22/) });
    // A row literal whose tenant id is no number, one that is no literal at all, and a JSON row with the same fault.
    await expect(insertLedgerTexts(t.db, [good, encodeLedgerRow(row(tenant.id)).replace(/^(\([^,]*,"[^"]*"),\d+,/, "$1,abc,")])).rejects.toMatchObject({ code: expect.stringMatching(/^22/) });
    await expect(insertLedgerTexts(t.db, [good, "(garbage"])).rejects.toMatchObject({ code: expect.stringMatching(/^22/) });
    await expect(insertLedgerTexts(t.db, [good, encodeLedgerRow(row(tenant.id, { model: "m\n" })).replace(/"tenantId":\d+/, '"tenantId":"abc"')])).rejects.toMatchObject({ code: expect.stringMatching(/^22/) });
    expect(await t.sql`select 1 from spend_ledger where tenant_id = ${tenant.id}`).toHaveLength(0);
  });
});

/** A row literal as a router from before migration 0013 wrote it (its encodeLedgerRow, field for field). */
function literalBefore0013(r: schema.NewLedgerRow): string {
  const text = (v: string | null | undefined) => (v == null ? "" : `"${v.replace(/["\\]/g, "$&$&")}"`);
  const int = (n: number | null | undefined) => (n == null ? "" : String(n));
  const time = (d: Date | null | undefined) => (d == null ? "" : d.toISOString());
  return (
    `(${time(r.startedAt)},${text(r.requestId)},${int(r.tenantId)},${int(r.keyId)},${text(r.backend)},${text(r.model)},${text(r.worker)}` +
    `,${int(r.promptTokens ?? 0)},${int(r.completionTokens ?? 0)},${int(r.cachedTokens ?? 0)},${int(r.cacheWriteTokens ?? 0)}` +
    `,${String(r.costMicro)},${text(r.costSource)},${text(r.status)},${time(r.firstTokenAt)},${time(r.finishedAt)},${int(r.ttftMs)},${int(r.durationMs)}` +
    `,${text(r.providerGenerationId)})`
  );
}

/** The two statements a router from before migration 0013 drains the ledger stream with (db/ledger.ts at d030d36), verbatim. */
async function insertBefore0013(records: string[], jsons: string[]): Promise<number> {
  let n = 0;
  if (records.length > 0) {
    n += (
      await t.sql`
    insert into spend_ledger (request_id, tenant_id, key_id, backend, model, worker, prompt_tokens, completion_tokens,
      cached_tokens, cache_write_tokens, cost_micro, cost_source, status, started_at, first_token_at, finished_at,
      ttft_ms, duration_ms, provider_generation_id)
    select (r).request_id, (r).tenant_id, (r).key_id, (r).backend, (r).model, (r).worker, (r).prompt_tokens, (r).completion_tokens,
      (r).cached_tokens, (r).cache_write_tokens, (r).cost_micro, (r).cost_source, (r).status, (r).started_at, (r).first_token_at, (r).finished_at,
      (r).ttft_ms, (r).duration_ms, (r).provider_generation_id
    from (select line::spend_ledger_text as r from string_to_table(${records.join("\n")}::text, E'\n') as line offset 0) as rows
    on conflict (request_id, started_at) do nothing`
    ).count;
  }
  if (jsons.length > 0) {
    n += (
      await t.sql`
    insert into spend_ledger (request_id, tenant_id, key_id, backend, model, worker, prompt_tokens, completion_tokens,
      cached_tokens, cache_write_tokens, cost_micro, cost_source, status, started_at, first_token_at, finished_at,
      ttft_ms, duration_ms, provider_generation_id)
    select "requestId", "tenantId", "keyId", backend, model, worker, coalesce("promptTokens", 0), coalesce("completionTokens", 0),
      coalesce("cachedTokens", 0), coalesce("cacheWriteTokens", 0), "costMicro", "costSource", status, "startedAt", "firstTokenAt", "finishedAt",
      "ttftMs", "durationMs", "providerGenerationId"
    from json_to_recordset(${"[" + jsons.join(",") + "]"}::json) as r("requestId" text, "tenantId" bigint, "keyId" bigint,
      backend text, model text, worker text, "promptTokens" int, "completionTokens" int, "cachedTokens" int, "cacheWriteTokens" int,
      "costMicro" bigint, "costSource" cost_source, status request_status, "startedAt" timestamptz, "firstTokenAt" timestamptz,
      "finishedAt" timestamptz, "ttftMs" int, "durationMs" int, "providerGenerationId" text)
    on conflict (request_id, started_at) do nothing`
    ).count;
  }
  return n;
}
