// `switchyard bench registry`: what one registry poll costs as the rest of
// Redis grows, side by side in one run — the keys found by SCAN MATCH on
// every poll (how routers listed before) and by the registry's sets (now),
// each followed by the same Lua read of the records. A private redis-server
// (on a spare port, removed at the end) holds W workers and K other keys
// (what a fabric keeps besides its workers: stored responses, rate-limit
// windows, budgets); for each K both listings poll P times. Per poll: the
// round trips (client commands, from INFO commandstats), the wall time, this process's CPU and
// the Redis server's CPU. Exit code 1 when the sets' listing does not stay at
// two round trips per poll at every K.
import { Redis } from "ioredis";
import { globEscape, RedisRegistryStore, scanKeys, workerKey } from "@switchyard/state";
import { startPrivateRedis } from "#testkit/redis-server";
import { percentile } from "./lib/load.ts";

const fmt = (x: number, d = 1) => (Number.isFinite(x) ? x.toFixed(d) : "-");
const PREFIX = "sy:";

interface Row {
  listing: string;
  otherKeys: number;
  commands: number;
  wallP50: number;
  wallP99: number;
  clientCpuMs: number;
  redisCpuMs: number;
  workers: number;
}

async function redisCpuS(r: Redis): Promise<number> {
  const info = await r.info("cpu");
  const v = (k: string) => Number(new RegExp(`${k}:([0-9.]+)`).exec(info)?.[1] ?? NaN);
  return v("used_cpu_sys") + v("used_cpu_user");
}

/** The listing before: the worker keys found by SCAN MATCH over the whole keyspace on every poll; the same read and checks after. */
class ScanListingStore extends RedisRegistryStore {
  constructor(private readonly conn: Redis) {
    super(conn, PREFIX, { sweepMs: 0 });
  }

  protected override async workerIds(): Promise<{ epoch: string; ids: string[] }> {
    const keyPrefix = workerKey(PREFIX, "");
    return { epoch: "scan", ids: (await scanKeys(this.conn, `${globEscape(keyPrefix)}*`)).map((k) => k.slice(keyPrefix.length)) };
  }
}

/** Client commands (round trips) so far: those a script runs inside count apart in commandstats and are left out. */
async function roundTrips(r: Redis): Promise<number> {
  let n = 0;
  for (const m of (await r.info("commandstats")).matchAll(/cmdstat_(scan|evalsha|eval):calls=(\d+)/g)) n += Number(m[2]);
  return n;
}

export async function runRegistryBench(opts: { quick: boolean; log?: (line: string) => void }): Promise<number> {
  const out = (s = "") => process.stdout.write(`${s}\n`);
  const log = opts.log ?? ((l: string) => process.stderr.write(`${l}\n`));
  const workers = opts.quick ? 50 : 200;
  const sizes = opts.quick ? [0, 100_000] : [0, 100_000, 1_000_000];
  const polls = opts.quick ? 10 : 30;
  const server = await startPrivateRedis();
  const redis = new Redis(server.url);
  const rows: Row[] = [];
  try {
    const now = Date.now();
    const writer = new RedisRegistryStore(redis, PREFIX);
    for (let i = 0; i < workers; i++) {
      const r = await writer.publish({ id: `w${i}`, url: `http://10.0.${i >> 8}.${i & 255}:9100`, models: [`m${i % 5}`], state: "ready", inFlight: 0, queueDepth: 0, capacity: 8, device: "cpu", layerRanges: [], prefixes: [], version: "1", startedAt: now, updatedAt: now }, 600_000);
      if (!r.ok) throw new Error(`publish w${i}: ${r.reason}`);
    }
    const store = new RedisRegistryStore(redis, PREFIX, { sweepMs: 0 });
    const scanning = new ScanListingStore(redis);
    let filled = 0;
    for (const size of sizes) {
      log(`registry bench: ${workers} workers, ${size} other keys`);
      // Other keys, 50k per script call (a private server: nothing else waits on it).
      while (filled < size) {
        const n = Math.min(50_000, size - filled);
        await redis.eval(`for i = ${filled + 1}, ${filled + n} do redis.call('SET', 'sy:resp:' .. i, 'x') end return 1`, 0);
        filled += n;
      }
      const listings: Array<[string, RedisRegistryStore]> = [
        ["SCAN per poll (before)", scanning],
        ["registry sets (now)", store],
      ];
      // The store's one sweep at its first listing is not a poll: done before counting.
      await store.listing();
      for (const [name, lister] of listings) {
        const list = async () => (await lister.listing()).workers.length;
        await list(); // warm
        const calls0 = await roundTrips(redis);
        const redis0 = await redisCpuS(redis);
        const cpu0 = process.cpuUsage();
        const walls: number[] = [];
        let seen = 0;
        for (let p = 0; p < polls; p++) {
          const t = performance.now();
          seen = await list();
          walls.push(performance.now() - t);
        }
        const cpu = process.cpuUsage(cpu0);
        const redisCpu = (await redisCpuS(redis)) - redis0;
        const commands = ((await roundTrips(redis)) - calls0) / polls;
        rows.push({ listing: name, otherKeys: size, commands, wallP50: percentile(walls, 50), wallP99: percentile(walls, 99), clientCpuMs: (cpu.user + cpu.system) / 1000 / polls, redisCpuMs: (redisCpu * 1000) / polls, workers: seen });
      }
    }
  } finally {
    redis.disconnect();
    await server.stop();
  }
  out(`### Registry poll cost vs keyspace size (${workers} workers, ${polls} polls per row; a private redis-server)`);
  out();
  out("| listing | other keys in Redis | workers listed | round trips / poll | wall p50 ms | wall p99 ms | router CPU ms / poll | Redis CPU ms / poll |");
  out("|---|---:|---:|---:|---:|---:|---:|---:|");
  for (const r of rows) out(`| ${r.listing} | ${r.otherKeys} | ${r.workers} | ${fmt(r.commands, 1)} | ${fmt(r.wallP50, 2)} | ${fmt(r.wallP99, 2)} | ${fmt(r.clientCpuMs, 2)} | ${fmt(r.redisCpuMs, 2)} |`);
  out();
  const sets = rows.filter((r) => r.listing.startsWith("registry sets"));
  const flat = sets.every((r) => Math.round(r.commands) === 2 && r.workers === workers);
  out(`The sets' listing at two round trips per poll, every worker listed, at every keyspace size: ${flat ? "met" : "NOT met"}`);
  return flat ? 0 : 1;
}
