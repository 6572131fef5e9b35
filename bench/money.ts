// The money path's price, the last section of `switchyard bench router`:
// reserve + settle against the real RedisBudgetStore (Lua) next to a naive
// check-then-increment, and the Redis-stream ledger buffer's throughput and
// lag into Postgres. Own database and Redis key prefix, both removed after.
import { randomUUID } from "node:crypto";
import os from "node:os";
import { connectDb, decodeLedgerRow, insertLedgerRows, insertLedgerTexts, type DbHandle, type NewLedgerRow } from "@switchyard/db";
import { RedisBudgetStore, RedisIntentJournal, budgetDay, connectRedis } from "@switchyard/state";
import type { Redis } from "ioredis";
import { encodeLedgerRow, RedisLedgerBuffer } from "@switchyard/router/billing";
import { createLogger } from "@switchyard/router";
import { percentile } from "./lib/load.ts";
import { benchScratch } from "./lib/scratch.ts";

const REDIS = process.env.BENCH_REDIS_URL ?? "redis://127.0.0.1:6379";

const RESERVE_SETTLE_TARGET_US = 200;
const LAG_P99_TARGET_MS = 1000;

export interface MoneyCheck {
  name: string;
  pass: boolean;
  detail: string;
}

const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
const int = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "-");
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** A markdown table padded so it also reads aligned in a terminal; `right` marks numeric columns. */
function table(head: string[], rows: string[][], right: boolean[]): string[] {
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) => `| ${cells.map((c, i) => (right[i] ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join(" | ")} |`;
  const rule = `|${w.map((n, i) => (right[i] ? `${"-".repeat(n + 1)}:` : "-".repeat(n + 2))).join("|")}|`;
  return [line(head), rule, ...rows.map(line)];
}

/** Runs `one(i)` for i in [0, n) from `concurrency` loops; per-call latency (µs) and wall time. */
async function drive(n: number, concurrency: number, one: (i: number) => Promise<unknown>): Promise<{ latUs: number[]; wallS: number }> {
  const latUs = new Array<number>(n);
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      for (let i = next++; i < n; i = next++) {
        const s = performance.now();
        await one(i);
        latUs[i] = (performance.now() - s) * 1000;
      }
    }),
  );
  return { latUs, wallS: (performance.now() - t0) / 1000 };
}

/** Redis' own time in `commands` so far (INFO commandstats: the whole server, other clients included). */
async function serverUsec(redis: Redis, commands: readonly string[]): Promise<number> {
  const info = await redis.info("commandstats");
  let usec = 0;
  for (const c of commands) usec += Number(new RegExp(`^cmdstat_${c}:.*?usec=(\\d+)`, "m").exec(info)?.[1] ?? 0);
  return usec;
}

/** A spend_ledger row as the router writes it for a paid request (gpt-4o-mini-like prices). */
function ledgerRow(i: number, finishedAt: Date): NewLedgerRow {
  const durationMs = 400 + ((i * 37) % 4000);
  const ttftMs = 80 + ((i * 13) % 400);
  const prompt = 200 + ((i * 7919) % 3000);
  const completion = 20 + ((i * 104729) % 800);
  const cached = i % 3 === 0 ? Math.floor(prompt / 2) : 0;
  const started = finishedAt.getTime() - durationMs;
  return {
    requestId: `req_${randomUUID().replaceAll("-", "")}`,
    tenantId: 1 + (i % 20),
    keyId: 100 + (i % 20),
    backend: "openrouter",
    model: "openai/gpt-4o-mini",
    worker: null,
    promptTokens: prompt,
    completionTokens: completion,
    cachedTokens: cached,
    cacheWriteTokens: 0,
    // Micro-cents per token: 15 input (7.5 cached), 60 output.
    costMicro: BigInt((prompt - cached) * 15 + Math.round(cached * 7.5) + completion * 60),
    costSource: "provider",
    status: "ok",
    startedAt: new Date(started),
    firstTokenAt: new Date(started + ttftMs),
    finishedAt,
    ttftMs,
    durationMs,
    providerGenerationId: `gen-${i}-${started.toString(36)}`,
  };
}

export async function benchMoney(opts: { quick: boolean; log: (s: string) => void }): Promise<{ ok: boolean; checks: MoneyCheck[] }> {
  const { quick, log } = opts;
  const scratch = await benchScratch("money_");
  const { prefix, dbUrl } = scratch;
  const redis = connectRedis(REDIS);
  // As the router connects: commands issued in one tick share a round trip.
  const piped = connectRedis(REDIS, { autoPipelining: true });
  let dbh: DbHandle | undefined;
  let ledger: RedisLedgerBuffer | undefined;
  const out: string[] = [];
  const checks: MoneyCheck[] = [];
  try {
    // The router's pool size (connectDb's default).
    dbh = connectDb(dbUrl);
    const db = dbh.db;
    const day = budgetDay(new Date());
    const store = new RedisBudgetStore(redis, prefix);
    const naiveKey = (tenantId: number) => `${prefix}{tenant:${tenantId}}:naive:${day}`;

    // ---- a. reserve + settle, one pair per request ----
    const holdMicro = 500_000n; // worst case held: half a cent
    const actualMicro = 120_000n; // what it cost
    const roomy = 1_000_000_000_000_000n; // a limit these runs never reach
    const rounds = quick ? 1 : 3;
    const n1 = quick ? 2_000 : 10_000;
    const n64 = quick ? 10_000 : 30_000;
    let rid = 0;
    const luaPair = async (tenantId: number) => {
      const requestId = `req_bench_${(rid++).toString(36)}`;
      const r = await store.reserve({ tenantId, day, requestId, amountMicro: holdMicro, limitMicro: roomy, ttlMs: 660_000 });
      if (!r.ok) throw new Error("reserve refused under a roomy limit");
      await store.settle({ tenantId, day, requestId, actualMicro });
    };
    const naivePair = async (tenantId: number) => {
      const spent = Number((await redis.get(naiveKey(tenantId))) ?? 0);
      if (spent + Number(holdMicro) > Number(roomy)) throw new Error("naive check refused under a roomy limit");
      await redis.incrby(naiveKey(tenantId), Number(actualMicro));
    };
    const floorPair = async () => {
      await redis.ping();
      await redis.ping();
    };
    // The whole money path of a paid request as the router runs it (auto-pipelined
    // connection): reserve, the row into the ledger stream, settle — and the same
    // with the crash intent (issue 18): intent + reserve in one round trip, then the
    // row written by the script that retires the intent, then settle.
    const pstore = new RedisBudgetStore(piped, prefix);
    const benchLedgerKey = `${prefix}{ledger}:bench-stream`;
    const journal = new RedisIntentJournal(piped, { prefix, ledgerKey: benchLedgerKey, consumer: "bench", claimIdleMs: 15_000 });
    await journal.ensureGroup();
    const rowText = encodeLedgerRow(ledgerRow(0, new Date()));
    const rowPair = async (tenantId: number) => {
      const requestId = `req_bench_${(rid++).toString(36)}`;
      const r = await pstore.reserve({ tenantId, day, requestId, amountMicro: holdMicro, limitMicro: roomy, ttlMs: 660_000 });
      if (!r.ok) throw new Error("reserve refused under a roomy limit");
      await piped.xadd(benchLedgerKey, "*", "r", rowText);
      await pstore.settle({ tenantId, day, requestId, actualMicro });
    };
    const intentPair = async (tenantId: number) => {
      const requestId = `req_bench_${(rid++).toString(36)}`;
      const intent = JSON.stringify({ requestId, tenantId, keyId: 1, day, backend: "openrouter", model: "openai/gpt-4o-mini", holdMicro: String(holdMicro), held: true, startedAtMs: Date.now(), attemptAtMs: Date.now(), holdTtlMs: 660_000 });
      const [id, r] = await Promise.all([journal.open(intent, `${requestId}:1`, 660_000), pstore.reserve({ tenantId, day, requestId, amountMicro: holdMicro, limitMicro: roomy, ttlMs: 660_000 })]);
      if (!r.ok) throw new Error("reserve refused under a roomy limit");
      if (!(await journal.finish(id, rowText))) throw new Error("intent already finished");
      await pstore.settle({ tenantId, day, requestId, actualMicro });
    };
    const paths = [
      { name: "lua reserve + settle", pair: luaPair, commands: ["evalsha", "eval"] },
      { name: "reserve + row XADD + settle", pair: rowPair, commands: ["evalsha", "eval", "xadd"] },
      { name: "+ crash intent (issue 18)", pair: intentPair, commands: ["evalsha", "eval"] },
      { name: "naive GET, compare, INCRBY", pair: naivePair, commands: ["get", "incrby"] },
      { name: "2× PING (round-trip floor)", pair: floorPair, commands: ["ping"] },
    ];
    // Warm up: script load (EVALSHA → NOSCRIPT → EVAL), JIT.
    for (const p of paths) await drive(2_000, 8, (i) => p.pair(1 + (i % 20)));
    const acc: Record<string, { latUs: number[]; wallS: number; n: number; serverUs: number }> = {};
    for (let round = 0; round < rounds; round++) {
      // Interleaved, order rotated per round, so background load hits every path alike.
      const order = paths.map((_, i) => paths[(i + round) % paths.length]!);
      for (const [conc, n] of [
        [1, n1],
        [64, n64],
      ] as const) {
        for (const p of order) {
          const u0 = await serverUsec(redis, p.commands);
          const r = await drive(n, conc, (i) => p.pair(conc === 1 ? 1 : 1 + (i % 20)));
          const a = (acc[`${p.name}@${conc}`] ??= { latUs: [], wallS: 0, n: 0, serverUs: 0 });
          a.serverUs += (await serverUsec(redis, p.commands)) - u0;
          for (const x of r.latUs) a.latUs.push(x);
          a.wallS += r.wallS;
          a.n += n;
        }
      }
    }
    const pairRows: string[][] = [];
    for (const conc of [1, 64]) {
      for (const p of paths) {
        const a = acc[`${p.name}@${conc}`]!;
        const mean = a.latUs.reduce((s, x) => s + x, 0) / a.latUs.length;
        pairRows.push([
          p.name,
          conc === 1 ? "1" : "64 (20 tenants)",
          int(a.n),
          fmt(mean),
          fmt(percentile(a.latUs, 50)),
          fmt(percentile(a.latUs, 99)),
          int(a.n / a.wallS),
          fmt((a.wallS * 1e6) / a.n),
          fmt(a.serverUs / a.n),
        ]);
      }
    }
    await redis.del(benchLedgerKey, `${prefix}{ledger}:intents`);
    const lua1 = acc[`lua reserve + settle@1`]!;
    const lua64 = acc[`lua reserve + settle@64`]!;
    const lua1Mean = lua1.latUs.reduce((s, x) => s + x, 0) / lua1.latUs.length;
    const lua64Cost = (lua64.wallS * 1e6) / lua64.n;
    checks.push({ name: `reserve + settle latency, concurrency 1, mean ≤ ${RESERVE_SETTLE_TARGET_US} µs`, pass: lua1Mean <= RESERVE_SETTLE_TARGET_US, detail: `${fmt(lua1Mean)} µs` });
    checks.push({ name: `reserve + settle cost, concurrency 64, wall/pairs ≤ ${RESERVE_SETTLE_TARGET_US} µs`, pass: lua64Cost <= RESERVE_SETTLE_TARGET_US, detail: `${fmt(lua64Cost)} µs` });

    // Overspend: a limit worth 100 requests, 1000 attempts at once, each
    // holding (or checking) its cost, calling the upstream, then settling.
    const attempts = 1000;
    const worth = 100;
    const cost = 100_000n;
    const limit = cost * BigInt(worth);
    const upstreamMs = 5;
    const raceTenant = 10_001;
    let luaAdmitted = 0;
    await Promise.all(
      Array.from({ length: attempts }, async (_, i) => {
        const requestId = `req_race_${i}`;
        const r = await store.reserve({ tenantId: raceTenant, day, requestId, amountMicro: cost, limitMicro: limit, ttlMs: 660_000 });
        if (!r.ok) return;
        luaAdmitted++;
        await sleep(upstreamMs);
        await store.settle({ tenantId: raceTenant, day, requestId, actualMicro: cost });
      }),
    );
    const luaSpent = (await store.snapshot(raceTenant, day)).spentMicro;
    let naiveAdmitted = 0;
    await Promise.all(
      Array.from({ length: attempts }, async () => {
        const spent = BigInt((await redis.get(naiveKey(raceTenant))) ?? 0);
        if (spent + cost > limit) return;
        naiveAdmitted++;
        await sleep(upstreamMs);
        await redis.incrby(naiveKey(raceTenant), Number(cost));
      }),
    );
    const naiveSpent = BigInt((await redis.get(naiveKey(raceTenant))) ?? 0);
    const pct = (spent: bigint) => `${fmt((Number(spent) / Number(limit)) * 100, 0)}%`;
    checks.push({
      name: `Lua store holds the limit under ${attempts} concurrent attempts`,
      pass: luaAdmitted === worth && luaSpent === limit,
      detail: `${luaAdmitted} admitted, spent ${pct(luaSpent)} of limit`,
    });

    // ---- b(i). ledger throughput: the Redis stream buffer vs row-at-a-time ----
    const log2 = createLogger("warn", { bench: "money" }, (l) => process.stderr.write(`${l}\n`));
    const phase = { committed: 0, batches: 0, lastCommit: 0, lagJsMs: [] as number[], trackLag: false };
    const write = async (texts: string[]) => {
      const r = await insertLedgerTexts(db, texts);
      const now = Date.now();
      phase.committed += r.inserted;
      phase.batches++;
      phase.lastCommit = performance.now();
      if (phase.trackLag) for (const text of texts) phase.lagJsMs.push(now - decodeLedgerRow(text).finishedAt.getTime());
      return r;
    };
    ledger = new RedisLedgerBuffer(redis, write, { prefix, consumer: `bench-${process.pid}`, batch: 500, flushMs: 100, claimIdleMs: 15_000, log: log2 });
    await ledger.start();
    const resetPhase = async () => {
      await dbh!.sql`truncate spend_ledger`;
      Object.assign(phase, { committed: 0, batches: 0, lastCommit: 0, lagJsMs: [], trackLag: false });
    };
    const waitCommitted = async (n: number, timeoutMs: number) => {
      const deadline = Date.now() + timeoutMs;
      while (phase.committed < n && Date.now() < deadline) await sleep(2);
      return phase.committed >= n;
    };
    const tableCount = async () => Number((await dbh!.sql`select count(*)::int as n from spend_ledger`)[0]!.n);

    // Warm up the stream, the drainer and the partition (truncate keeps it).
    for (let i = 0; i < 1_000; i++) void ledger.record(ledgerRow(i, new Date()));
    await waitCommitted(1_000, 30_000);
    for (let i = 0; i < 200; i++) await insertLedgerRows(db, [ledgerRow(i, new Date())]);

    const nRows = quick ? 5_000 : 50_000;
    const producers = 64;
    const tpRows: string[][] = [];
    const tp: Record<string, number> = {};

    await resetPhase();
    const streamRows = Array.from({ length: nRows }, (_, i) => ledgerRow(i, new Date()));
    let t0 = performance.now();
    const push = await drive(nRows, producers, (i) => ledger!.record(streamRows[i]!));
    const drained = await waitCommitted(nRows, 300_000);
    const streamWall = (phase.lastCommit - t0) / 1000;
    const streamInTable = await tableCount();
    tp.stream = streamInTable / streamWall;
    tpRows.push(["redis stream → batched INSERT (router's path)", int(nRows), int(streamInTable), fmt(streamWall, 2), int(tp.stream), int(nRows / push.wallS), fmt(phase.committed / phase.batches, 0)]);
    checks.push({ name: "every streamed row committed once", pass: drained && streamInTable === nRows, detail: `${streamInTable}/${nRows}` });

    await resetPhase();
    const directRows = Array.from({ length: nRows }, (_, i) => ledgerRow(i, new Date()));
    t0 = performance.now();
    for (let i = 0; i < nRows; i += 500) await insertLedgerRows(db, directRows.slice(i, i + 500));
    const directWall = (performance.now() - t0) / 1000;
    const directInTable = await tableCount();
    tpRows.push(["batched INSERT, 500 rows, no Redis", int(nRows), int(directInTable), fmt(directWall, 2), int(directInTable / directWall), "-", "500"]);

    await resetPhase();
    const singleRows = Array.from({ length: nRows }, (_, i) => ledgerRow(i, new Date()));
    const single = await drive(nRows, producers, (i) => insertLedgerRows(db, [singleRows[i]!]));
    const singleInTable = await tableCount();
    tp.single = singleInTable / single.wallS;
    tpRows.push([`row-at-a-time INSERT (${producers} callers, pool 10)`, int(nRows), int(singleInTable), fmt(single.wallS, 2), int(tp.single), "-", "1"]);

    // ---- b(ii). lag at a fixed offered load ----
    await resetPhase();
    phase.trackLag = true;
    const rate = 1000;
    const lagS = quick ? 5 : 20;
    const total = rate * lagS;
    const pending: Promise<void>[] = [];
    let sent = 0;
    t0 = performance.now();
    while (sent < total) {
      const due = Math.min(total, Math.floor(((performance.now() - t0) * rate) / 1000));
      for (; sent < due; sent++) pending.push(ledger.record(ledgerRow(sent, new Date())));
      await sleep(1);
    }
    const offeredS = (performance.now() - t0) / 1000;
    await Promise.all(pending);
    const lagDrained = await waitCommitted(total, 60_000);
    const [lag] = await dbh.sql<{ n: number; p50: number; p99: number; max: number }[]>`
      select count(*)::int as n,
             percentile_cont(0.5) within group (order by ms) as p50,
             percentile_cont(0.99) within group (order by ms) as p99,
             max(ms) as max
      from (select extract(epoch from created_at - finished_at) * 1000 as ms from spend_ledger) x`;
    const pgLag = { n: Number(lag!.n), p50: Number(lag!.p50), p99: Number(lag!.p99), max: Number(lag!.max) };
    const js = phase.lagJsMs;
    checks.push({ name: `ledger lag p99 < ${LAG_P99_TARGET_MS} ms at ${rate} rows/s`, pass: lagDrained && pgLag.n === total && pgLag.p99 < LAG_P99_TARGET_MS, detail: `${fmt(pgLag.p99)} ms, ${pgLag.n}/${total} rows` });

    // ---- report ----
    const cpu = os.cpus()[0]?.model.trim() ?? "unknown CPU";
    out.push(`### Money: reserve + settle, ledger throughput and lag — ${os.availableParallelism()} cores (${cpu}), ${new Date().toISOString().slice(0, 16).replace("T", " ")} UTC${quick ? ", --quick" : ""}`);
    out.push("");
    out.push(`Reserve + settle per request against the real RedisBudgetStore (two Lua scripts, two round trips), next to a naive check-then-increment (GET, compare in JS, INCRBY: also two round trips, no hold) and two PINGs (the round-trip floor). One ioredis connection, as a router has; ${rounds} interleaved round(s); µs. Redis-side = the server's own time in those commands (INFO commandstats; whole server, so other clients' calls count too).`);
    out.push("");
    out.push(...table(["path", "concurrency", "pairs", "mean µs", "p50 µs", "p99 µs", "pairs/s", "µs/pair (wall/pairs)", "Redis-side µs/pair"], pairRows, [false, true, true, true, true, true, true, true, true]));
    out.push("");
    out.push(`Overspend: limit worth ${worth} requests, ${attempts} attempts at once, each ${upstreamMs} ms upstream between check/hold and settle.`);
    out.push("");
    out.push(
      ...table(
        ["path", "attempts", "admitted", "spent / limit"],
        [
          ["lua reserve + settle", int(attempts), int(luaAdmitted), pct(luaSpent)],
          ["naive GET, compare, INCRBY", int(attempts), int(naiveAdmitted), pct(naiveSpent)],
        ],
        [false, true, true, true],
      ),
    );
    out.push("");
    out.push(`Ledger throughput: ${int(nRows)} realistic spend_ledger rows pushed by ${producers} concurrent producers; RedisLedgerBuffer drains with batch 500, flushMs 100 into insertLedgerTexts (the rows as their stream text); rows/s = rows in the table / (first push → last commit).`);
    out.push("");
    out.push(...table(["path", "rows", "in table", "wall s", "rows/s committed", "push rows/s", "mean batch"], tpRows, [false, true, true, true, true, true, true]));
    out.push("");
    out.push(`Ledger lag at ${rate} rows/s offered for ${lagS} s (achieved ${int(total / offeredS)}/s), finished_at = when recorded. created_at is the INSERT's transaction start, so the drainer's view (insert returned) is shown too.`);
    out.push("");
    out.push(
      ...table(
        ["lag measure", "rows", "p50 ms", "p99 ms", "max ms"],
        [
          ["Postgres created_at − finished_at", int(pgLag.n), fmt(pgLag.p50), fmt(pgLag.p99), fmt(pgLag.max)],
          ["insert returned − finished_at", int(js.length), fmt(percentile(js, 50)), fmt(percentile(js, 99)), fmt(js.reduce((m, x) => Math.max(m, x), -Infinity))],
        ],
        [false, true, true, true, true],
      ),
    );
    out.push("");
    out.push(`Batching: ${fmt(tp.stream / tp.single, 1)}× the row-at-a-time rows/s.`);
    for (const c of checks) out.push(`${c.pass ? "PASS" : "FAIL"}  ${c.name} (${c.detail})`);
    const ok = checks.every((c) => c.pass);
    out.push(`Money: ${ok ? "PASS" : "FAIL"} (${checks.filter((c) => c.pass).length}/${checks.length})`);
    for (const l of out) log(l);
    return { ok, checks };
  } finally {
    await ledger?.close().catch(() => {});
    await dbh?.close().catch(() => {});
    await scratch.drop(redis);
    redis.disconnect();
    piped.disconnect();
  }
}
