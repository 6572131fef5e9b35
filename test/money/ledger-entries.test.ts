// The ledger buffer appends the rows settled in one turn of the event loop
// as one stream entry (issue 14: one XADD per turn, not per request), its
// drain lets rows that trickle in share an INSERT (up to flushMs), and
// every row of every entry reaches Postgres once — a single-row entry (an
// intent's finish) included.
import { describe, expect, it } from "vitest";
import type { NewLedgerRow } from "@switchyard/db";
import { decodeLedgerRow, encodeLedgerRow, LEDGER_ROWS_PER_ENTRY, RedisLedgerBuffer } from "../../apps/router/src/billing/ledger-stream.ts";
import { silentLogger } from "../../apps/router/src/observability/log.ts";
import { createTenant, insertLedgerTexts } from "@switchyard/db";
import { RouterMetrics } from "../../apps/router/src/observability/metrics.ts";
import { createLogger } from "../../apps/router/src/observability/log.ts";
import { createTestDb, createTestRedis } from "../helpers/env.ts";

const row = (i: number): NewLedgerRow => ({
  requestId: `req_batch_${i}`,
  tenantId: 1,
  keyId: 1,
  backend: "worker",
  model: "m",
  worker: "w1",
  promptTokens: i,
  completionTokens: 1,
  cachedTokens: 0,
  cacheWriteTokens: 0,
  costMicro: BigInt(i),
  costSource: "price_table",
  status: "ok",
  startedAt: new Date(1_764_633_600_000 + i),
  firstTokenAt: null,
  finishedAt: new Date(1_764_633_600_100 + i),
  ttftMs: null,
  durationMs: 100,
  providerGenerationId: null,
});

describe("RedisLedgerBuffer entries", () => {
  it("rows recorded together share one entry (at most LEDGER_ROWS_PER_ENTRY each); all of them are written once", async () => {
    const r = await createTestRedis();
    const written: NewLedgerRow[] = [];
    const buffer = new RedisLedgerBuffer(
      r.redis,
      async (texts) => {
        written.push(...texts.map(decodeLedgerRow));
        return { inserted: texts.length };
      },
      { prefix: r.prefix, consumer: "c1", batch: 100, flushMs: 50, claimIdleMs: 10_000, log: silentLogger },
    );
    try {
      // One turn: 10 rows → one entry. The next turn: 150 rows → 64 + 64 + 22.
      await Promise.all(Array.from({ length: 10 }, (_, i) => buffer.record(row(i))));
      expect(await buffer.depth()).toBe(1);
      const entries = (await r.redis.xrange(buffer.key, "-", "+")) as Array<[string, string[]]>;
      const fields = entries[0]![1];
      expect(fields.filter((_: string, k: number) => k % 2 === 0)).toEqual(new Array(10).fill("r"));
      expect(fields[1]).toBe(encodeLedgerRow(row(0)));
      await Promise.all(Array.from({ length: 150 }, (_, i) => buffer.record(row(100 + i))));
      expect(await buffer.depth()).toBe(1 + Math.ceil(150 / LEDGER_ROWS_PER_ENTRY));
      // An intent's finish appends a one-row entry of its own.
      await r.redis.xadd(buffer.key, "*", "r", encodeLedgerRow(row(999)));
      await buffer.flush();
      expect(await buffer.depth()).toBe(0);
      const ids = written.map((w) => w.requestId).sort();
      expect(ids).toHaveLength(161);
      expect(new Set(ids).size).toBe(161);
      // billing.ledgerBatch still bounds each INSERT, however many rows an entry holds.
      const sizes: number[] = [];
      const small = new RedisLedgerBuffer(r.redis, async (rows) => (sizes.push(rows.length), { inserted: rows.length }), { prefix: `${r.prefix}small:`, consumer: "c1b", batch: 25, flushMs: 50, claimIdleMs: 10_000, log: silentLogger });
      await Promise.all(Array.from({ length: 60 }, (_, i) => small.record(row(500 + i))));
      await small.flush();
      await small.close();
      expect(sizes).toEqual([25, 25, 10]);
      const w5 = written.find((w) => w.requestId === "req_batch_5")!;
      expect(w5.costMicro).toBe(5n);
      expect(w5.startedAt).toEqual(new Date(1_764_633_600_005));
    } finally {
      await buffer.close();
      await r.cleanup();
    }
  });

  it("the drain lets a first row wait up to flushMs for company: rows that trickle in share one INSERT", async () => {
    const r = await createTestRedis();
    const inserts: string[][] = [];
    const buffer = new RedisLedgerBuffer(r.redis, async (texts) => (inserts.push(texts.map((x) => decodeLedgerRow(x).requestId)), { inserted: texts.length }), {
      prefix: r.prefix,
      consumer: "c3",
      batch: 100,
      flushMs: 300,
      claimIdleMs: 10_000,
      log: silentLogger,
    });
    try {
      await buffer.start();
      await buffer.record(row(1));
      await new Promise((done) => setTimeout(done, 60));
      await buffer.record(row(2));
      await new Promise((done) => setTimeout(done, 60));
      await buffer.record(row(3));
      const deadline = Date.now() + 5_000;
      while (inserts.flat().length < 3 && Date.now() < deadline) await new Promise((done) => setTimeout(done, 20));
      expect(inserts).toEqual([["req_batch_1", "req_batch_2", "req_batch_3"]]);
    } finally {
      await buffer.close();
      await r.cleanup();
    }
  });

  it("a record() in flight when flush() is called is in Postgres when flush() returns", async () => {
    const r = await createTestRedis();
    const written: string[] = [];
    const buffer = new RedisLedgerBuffer(r.redis, async (texts) => (written.push(...texts.map((x) => decodeLedgerRow(x).requestId)), { inserted: texts.length }), {
      prefix: r.prefix,
      consumer: "c2",
      batch: 100,
      flushMs: 50,
      claimIdleMs: 10_000,
      log: silentLogger,
    });
    try {
      void buffer.record(row(1));
      void buffer.record(row(2));
      await buffer.flush();
      expect(written.sort()).toEqual(["req_batch_1", "req_batch_2"]);
    } finally {
      await buffer.close();
      await r.cleanup();
    }
  });
  it("rows reach Postgres as their text; a text Postgres cannot read is dropped alone (logged, counted), the rest of its batch commits", async () => {
    const r = await createTestRedis();
    const db = await createTestDb();
    const lines: string[] = [];
    const metrics = new RouterMetrics();
    const buffer = new RedisLedgerBuffer(r.redis, (texts) => insertLedgerTexts(db.db, texts), {
      prefix: r.prefix,
      consumer: "c4",
      batch: 100,
      flushMs: 20,
      claimIdleMs: 10_000,
      log: createLogger("error", {}, (l) => lines.push(l)),
      metrics,
    });
    try {
      const t = await createTenant(db.db, "dropper");
      if (!t.ok) throw new Error(t.reason);
      const mine = (i: number) => ({ ...row(i), tenantId: t.tenant.id });
      // One entry: two good rows around a text that is no row at all and a row literal whose tenant id is no number.
      const bad = encodeLedgerRow(mine(3)).replace(/^(\([^,]*,"[^"]*"),\d+,/, "$1,abc,");
      expect(bad).toContain(',"req_batch_3",abc,');
      await r.redis.xadd(buffer.key, "*", "r", encodeLedgerRow(mine(1)), "r", "not json", "r", bad, "r", encodeLedgerRow(mine(2)));
      await buffer.record(mine(4));
      await buffer.flush();
      const ids = (await db.sql<{ request_id: string }[]>`select request_id from spend_ledger where tenant_id = ${t.tenant.id} order by request_id`).map((x) => x.request_id);
      expect(ids).toEqual(["req_batch_1", "req_batch_2", "req_batch_4"]);
      expect(await buffer.depth()).toBe(0);
      expect(metrics.ledgerRows.get({ outcome: "committed" })).toBe(3);
      expect(metrics.ledgerRows.get({ outcome: "dropped" })).toBe(2);
      expect(lines.filter((l) => l.includes("unreadable ledger row dropped"))).toHaveLength(2);
      expect(metrics.ledgerLag.render()).toMatch(/switchyard_ledger_lag_seconds_count 3/);
    } finally {
      await buffer.close();
      await r.cleanup();
      await db.drop();
    }
  });
});
