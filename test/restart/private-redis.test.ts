// The private redis-server of `switchyard up --processes N` holds money
// (ledger rows not yet in Postgres): what is in it when it is SIGKILLed, or
// when an `up` is killed and leaves it running, reaches Postgres through
// the routers of the next start on the same home.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { afterAll, describe, expect, it } from "vitest";
import { createTenant, type NewLedgerRow } from "@switchyard/db";
import { findOnPath, startPrivateRedis, type PrivateRedis } from "../../apps/cli/src/private-redis.ts";
import { encodeLedgerRow, ledgerStreamKey } from "../../apps/router/src/billing/ledger-stream.ts";
import { createTestDb, waitFor, type TestDb } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { alive } from "#testkit/procs";

const PREFIX = "sy:"; // the router's default redis.keyPrefix, as under `up`
const stream = ledgerStreamKey(PREFIX);
const home = mkdtempSync(path.join(tmpdir(), "sy-private-redis-"));
const servers: PrivateRedis[] = [];
let db: TestDb | undefined;
let router: RouterProc | undefined;


const start = async (): Promise<PrivateRedis> => {
  const s = await startPrivateRedis(findOnPath("redis-server")!, home, () => {});
  servers.push(s);
  return s;
};

afterAll(async () => {
  await router?.stop();
  for (const s of servers) if (alive(s.pid)) process.kill(s.pid, "SIGKILL");
  await db?.drop();
  rmSync(home, { recursive: true, force: true });
});

describe("the private redis-server of up --processes", () => {
  it("keeps ledger rows through its own SIGKILL and a left-over server's stop; the next start's router drains them into Postgres", async () => {
    expect(findOnPath("redis-server"), "redis-server on PATH").toBeDefined();
    db = await createTestDb();
    const t = await createTenant(db.db, "durable");
    if (!t.ok) throw new Error("tenant");
    const row = (id: string): NewLedgerRow => {
      const now = Date.now();
      return { requestId: id, tenantId: t.tenant.id, backend: "worker", model: "m", costMicro: 1234n, costSource: "price_table", status: "ok", startedAt: new Date(now - 5), finishedAt: new Date(now), durationMs: 5 };
    };
    const append = async (s: PrivateRedis, ids: string[]) => {
      const c = new Redis(s.url);
      for (const id of ids) await c.xadd(stream, "*", "r", encodeLedgerRow(row(id)));
      return c;
    };

    // A router of the first start appended three rows and read one of them without acknowledging it (it died mid-batch) ...
    const first = await start();
    const c1 = await append(first, ["killed-1", "killed-2", "killed-3"]);
    await c1.xgroup("CREATE", stream, "ledger", "0", "MKSTREAM");
    await c1.xreadgroup("GROUP", "ledger", "dead-router", "COUNT", 1, "STREAMS", stream, ">");
    // Written to the append-only file (not yet fsynced: a killed process loses none of that). While a slow
    // disk is still fsyncing, everysec postpones the write up to 2 s, replies going out meanwhile: a CI box
    // running many tests once lost two of the three rows so. That window is Redis's everysec (private-redis.ts).
    await waitFor(async () => /aof_buffer_length:0\r?\n/.test(await c1.info("persistence")), { timeoutMs: 5_000, what: "the AOF buffer written" });
    c1.disconnect();
    // ... then the server itself is SIGKILLed: no shutdown, no final save.
    process.kill(first.pid, "SIGKILL");
    await waitFor(() => !alive(first.pid), { timeoutMs: 5_000, what: "the first redis-server gone" });

    // The second start loads what the first left, and gets two more rows; its `up` is killed, leaving it running.
    const second = await start();
    expect(second.dir).toBe(first.dir);
    const c2 = await append(second, ["leftover-1", "leftover-2"]);
    expect(await c2.xlen(stream)).toBe(5);
    c2.disconnect();

    // The third start stops the left-over server without discarding its data.
    const third = await start();
    expect(alive(second.pid)).toBe(false);
    const c3 = new Redis(third.url);
    expect(await c3.xlen(stream)).toBe(5);
    c3.disconnect();

    // A router on it drains all five into Postgres, the dead router's unacknowledged one taken over.
    router = await spawnRouter({ DATABASE_URL: db.url, REDIS_URL: third.url, SWITCHYARD_REDIS__KEY_PREFIX: PREFIX, SWITCHYARD_BILLING__LEDGER_CLAIM_IDLE_MS: "200" });
    const ids = await waitFor(
      async () => {
        const rows = await db!.sql`select request_id, cost_micro from spend_ledger where tenant_id = ${t.tenant.id} order by request_id`;
        return rows.length === 5 ? rows : undefined;
      },
      { timeoutMs: 20_000, what: "the five rows in Postgres" },
    );
    expect(ids.map((r) => r.request_id)).toEqual(["killed-1", "killed-2", "killed-3", "leftover-1", "leftover-2"]);
    expect(ids.every((r) => BigInt(r.cost_micro) === 1234n)).toBe(true);
    const c4 = new Redis(third.url);
    await waitFor(async () => (await c4.xlen(stream)) === 0, { timeoutMs: 5_000, what: "the stream emptied" });
    c4.disconnect();
    await router.stop();
    router = undefined;
    await third.stop();
    expect(alive(third.pid)).toBe(false);
  }, 60_000);
});
