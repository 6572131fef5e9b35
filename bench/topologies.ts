// Money and lease figures on a single Redis node next to a Redis Cluster, in
// one run (`switchyard bench router --only money --cluster h:p,h:p,…`): the
// budget's reserve + settle and the lease store's acquire + release, at
// concurrency 1 and 64, each client connected as a router connects
// (openRedis: auto-pipelined on one node; a Cluster client routes each
// script to its slot's master), and the overspend race (1,000 attempts at a
// limit worth 100) on each. Own key prefix, removed after.
import { randomBytes } from "node:crypto";
import { budgetDay, newLeaseId, openRedis, RedisBudgetStore, RedisLeaseStore, scanKeys, type RedisTarget } from "@switchyard/state";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
const int = (x: number) => (Number.isFinite(x) ? Math.round(x).toLocaleString("en-US") : "-");

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

async function drive(n: number, concurrency: number, one: (i: number, client: number) => Promise<unknown>): Promise<{ latUs: number[]; wallS: number }> {
  const latUs: number[] = [];
  let next = 0;
  const t0 = performance.now();
  await Promise.all(
    Array.from({ length: concurrency }, async (_, c) => {
      for (let i = next++; i < n; i = next++) {
        const s = performance.now();
        await one(i, c);
        latUs.push((performance.now() - s) * 1000);
      }
    }),
  );
  return { latUs, wallS: (performance.now() - t0) / 1000 };
}

export async function benchStateTopologies(opts: { quick: boolean; single: string; cluster: string[]; log: (s: string) => void }): Promise<{ ok: boolean }> {
  const { quick, log } = opts;
  const day = budgetDay(new Date());
  const n1 = quick ? 2_000 : 10_000;
  const n64 = quick ? 10_000 : 30_000;
  const rounds = quick ? 1 : 3;
  const topologies: Array<{ name: string; target: RedisTarget }> = [
    { name: "single node", target: { url: opts.single } },
    { name: `cluster (${opts.cluster.length} seeds)`, target: { cluster: opts.cluster } },
  ];
  const conns = await Promise.all(topologies.map((t) => openRedis(t.target, { autoPipelining: true })));
  const prefix = `bench_topo_${randomBytes(4).toString("hex")}:`;
  const rows: string[][] = [];
  const races: string[][] = [];
  let ok = true;
  try {
    const acc = new Map<string, { latUs: number[]; wallS: number; n: number }>();
    let rid = 0;
    const ops = topologies.flatMap((t, ti) => {
      const budget = new RedisBudgetStore(conns[ti]!, prefix);
      const leases = new RedisLeaseStore(conns[ti]!, prefix);
      let token = 0;
      return [
        {
          key: `${t.name}|budget reserve + settle`,
          pair: async (_i: number, c: number) => {
            const requestId = `req_topo_${(rid++).toString(36)}`;
            const tenantId = 1 + (c % 20);
            const r = await budget.reserve({ tenantId, day, requestId, amountMicro: 500_000n, limitMicro: 10n ** 15n, ttlMs: 660_000 });
            if (!r.ok) throw new Error("reserve refused under a roomy limit");
            await budget.settle({ tenantId, day, requestId, actualMicro: 120_000n });
          },
        },
        {
          key: `${t.name}|lease acquire + release`,
          pair: async (_i: number, c: number) => {
            // One worker per client: every acquire is granted (the cost, not the contention).
            const r = await leases.acquire({ leaseId: newLeaseId(), workerId: `w${c}`, tenantId: 1, durationMs: 60_000, fencingToken: ++token });
            if (!r.ok) throw new Error(`lease refused: ${r.reason}`);
            await leases.release({ leaseId: r.lease.id, tenantId: 1 });
          },
        },
      ];
    });
    for (const op of ops) await drive(1_000, 8, op.pair); // warm-up: script load, JIT
    for (let round = 0; round < rounds; round++) {
      const order = ops.map((_, i) => ops[(i + round) % ops.length]!);
      for (const [conc, n] of [
        [1, n1],
        [64, n64],
      ] as const) {
        for (const op of order) {
          const r = await drive(n, conc, op.pair);
          const a = acc.get(`${op.key}@${conc}`) ?? { latUs: [], wallS: 0, n: 0 };
          a.latUs.push(...r.latUs);
          a.wallS += r.wallS;
          a.n += n;
          acc.set(`${op.key}@${conc}`, a);
        }
      }
    }
    for (const what of ["budget reserve + settle", "lease acquire + release"]) {
      for (const conc of [1, 64]) {
        for (const t of topologies) {
          const a = acc.get(`${t.name}|${what}@${conc}`)!;
          const mean = a.latUs.reduce((s, x) => s + x, 0) / a.latUs.length;
          rows.push([what, String(conc), t.name, int(a.n), fmt(mean), fmt(pct(a.latUs, 50)), fmt(pct(a.latUs, 99)), int(a.n / a.wallS)]);
        }
      }
    }
    // The overspend race on each: a limit worth 100, 1,000 attempts at once.
    for (const [ti, t] of topologies.entries()) {
      const budget = new RedisBudgetStore(conns[ti]!, prefix);
      const tenantId = 20_001 + ti;
      let admitted = 0;
      await Promise.all(
        Array.from({ length: 1_000 }, async (_, i) => {
          const requestId = `req_race_${i}`;
          const r = await budget.reserve({ tenantId, day, requestId, amountMicro: 100_000n, limitMicro: 10_000_000n, ttlMs: 660_000 });
          if (!r.ok) return;
          admitted++;
          await sleep(5);
          await budget.settle({ tenantId, day, requestId, actualMicro: 100_000n });
        }),
      );
      const spent = (await budget.snapshot(tenantId, day)).spentMicro;
      if (admitted !== 100 || spent !== 10_000_000n) ok = false;
      races.push([t.name, "1,000", "100", String(admitted), spent.toString()]);
    }
  } finally {
    for (const c of conns) {
      for (const k of await scanKeys(c, `${prefix}*`)) await c.del(k);
      c.disconnect();
    }
  }
  const table = (head: string[], body: string[][], right: boolean[]) => {
    const w = head.map((h, i) => Math.max(h.length, ...body.map((r) => r[i]!.length)));
    const line = (cells: string[]) => `| ${cells.map((c, i) => (right[i] ? c.padStart(w[i]!) : c.padEnd(w[i]!))).join(" | ")} |`;
    return [line(head), `|${w.map((n, i) => (right[i] ? `${"-".repeat(n + 1)}:` : "-".repeat(n + 2))).join("|")}|`, ...body.map(line)];
  };
  log("");
  log(`### Single node vs Redis Cluster (${rounds} round${rounds > 1 ? "s" : ""}, interleaved)`);
  log("");
  for (const l of table(["operation (one pair)", "concurrency", "Redis", "pairs", "mean µs", "p50 µs", "p99 µs", "pairs/s"], rows, [false, true, false, true, true, true, true, true])) log(l);
  log("");
  for (const l of table(["overspend race", "attempts", "worth", "admitted", "spent micro-cents"], races, [false, true, true, true, true])) log(l);
  log(ok ? "race: exactly the limit on both" : "race: FAILED (admitted or spent off the limit)");
  return { ok };
}
