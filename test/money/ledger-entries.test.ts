// The ledger buffer appends the rows settled in one turn of the event loop
// as one stream entry (issue 14: one XADD per turn, not per request), its
// drain lets rows that trickle in share an INSERT (up to flushMs), and
// every row of every entry reaches Postgres once — a single-row entry (an
// intent's finish) included; rows Redis loses before they are drained are
// appended again by the router that wrote them.
import { describe, expect, it } from "vitest";
import type { NewLedgerRow } from "@switchyard/db";
import { decodeLedgerRow, encodeLedgerRow, KEEP_CHECK_MS, LEDGER_KEPT_ROWS_MAX, LEDGER_ROWS_PER_ENTRY, RedisLedgerBuffer } from "../../apps/router/src/billing/ledger-stream.ts";
import { ledgerMarkKey } from "@switchyard/state";
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

  it("keeps the rows it appended until they leave the stream; when Redis loses them (its ledger data gone) it appends them again and each lands once", async () => {
    const r = await createTestRedis();
    const metrics = new RouterMetrics();
    const lines: string[] = [];
    let postgresUp = false;
    const written: string[] = [];
    const buffer = new RedisLedgerBuffer(
      r.redis,
      async (texts) => {
        if (!postgresUp) throw new Error("connect ECONNREFUSED (Postgres away)");
        const fresh = texts.map((x) => decodeLedgerRow(x).requestId).filter((id) => !written.includes(id));
        written.push(...fresh);
        return { inserted: fresh.length };
      },
      { prefix: r.prefix, consumer: "keeper", batch: 100, flushMs: 20, claimIdleMs: 10_000, log: createLogger("warn", {}, (l) => lines.push(l)), metrics },
    );
    try {
      await buffer.start();
      // Drained as they come: let go at the next look at the stream (every KEEP_CHECK_MS).
      postgresUp = true;
      await Promise.all(Array.from({ length: 5 }, (_, i) => buffer.record(row(i))));
      expect(buffer.keptCount).toBe(5);
      await waitUntil(() => written.length === 5 && buffer.keptCount === 0, "drained rows let go");
      // Postgres away: 12 rows wait in the stream (two turns, two entries), kept here too.
      postgresUp = false;
      await Promise.all(Array.from({ length: 7 }, (_, i) => buffer.record(row(10 + i))));
      await Promise.all(Array.from({ length: 5 }, (_, i) => buffer.record(row(20 + i))));
      await new Promise((done) => setTimeout(done, 2 * KEEP_CHECK_MS));
      expect(buffer.keptCount).toBe(12);
      expect(await buffer.depth()).toBe(2);
      // Redis loses the ledger's data (its stream, its group and its mark: a restart without persistence does as much).
      await r.redis.del(buffer.key, ledgerMarkKey(r.prefix));
      postgresUp = true;
      await waitUntil(() => written.length === 17, "the lost rows to land");
      expect(written.slice(5).sort()).toEqual([...Array.from({ length: 7 }, (_, i) => `req_batch_${10 + i}`), ...Array.from({ length: 5 }, (_, i) => `req_batch_${20 + i}`)].sort());
      expect(metrics.ledgerRows.get({ outcome: "replayed" })).toBe(12);
      expect(lines.filter((l) => l.includes("Redis may have lost ledger rows"))).toHaveLength(1);
      await waitUntil(() => buffer.keptCount === 0, "replayed rows let go once drained");
      expect(await buffer.depth()).toBe(0);
      // Nothing lost: recover() (before a budget rebuild) returns at once.
      const t0 = Date.now();
      await buffer.recover();
      expect(Date.now() - t0).toBeLessThan(KEEP_CHECK_MS);
      // Lost again while Postgres is away: recover() (before a budget rebuild) appends the rows again at once,
      // but cannot drain them, and says so: a rebuild now would read a ledger known to be behind.
      postgresUp = false;
      await Promise.all(Array.from({ length: 4 }, (_, i) => buffer.record(row(60 + i))));
      await r.redis.del(buffer.key, ledgerMarkKey(r.prefix));
      await expect(buffer.recover()).rejects.toThrow(/Postgres away/);
      expect(metrics.ledgerRows.get({ outcome: "replayed" })).toBe(16);
      // Postgres back: recover() returns once the stream is drained, another router's row in it included.
      postgresUp = true;
      await r.redis.xadd(buffer.key, "*", "r", encodeLedgerRow(row(70)));
      await buffer.recover();
      expect(written.filter((id) => /^req_batch_[67]\d$/.test(id)).sort()).toEqual(["req_batch_60", "req_batch_61", "req_batch_62", "req_batch_63", "req_batch_70"]);
      await waitUntil(() => buffer.keptCount === 0, "the drained rows let go");
      // Past the most kept, the oldest are let go (counted): Redis' own persistence is all they have.
      buffer.keep("1-0", new Array<string>(LEDGER_KEPT_ROWS_MAX).fill("x"));
      buffer.keep("2-0", ["y"]);
      expect(buffer.keptCount).toBe(1);
      expect(metrics.ledgerRows.get({ outcome: "unkept" })).toBe(LEDGER_KEPT_ROWS_MAX);
    } finally {
      await buffer.close();
      await r.cleanup();
    }
  });
});

async function waitUntil(ok: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((done) => setTimeout(done, 20));
  }
}
