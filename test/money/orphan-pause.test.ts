// A router frozen (SIGSTOP) past its hold's TTL mid-stream: another router
// takes the request over and finishes it at OpenRouter's cost. When the
// frozen one resumes (SIGCONT) and ends the request, it finds it finished and
// does nothing: no second row, no second settle, no duplicate in the buffer.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { budgetDay, RedisBudgetStore } from "@switchyard/state";
import { freePort } from "#testkit/procs";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { createTestDb, createTestRedis, sleep, waitFor, type TestDb, type TestRedis } from "../helpers/env.ts";
import { spawnRouter, type RouterProc } from "../helpers/router-proc.ts";
import { HOLD_TTL_MS, openStream, routerEnv, seedTenant } from "./crash-helpers.ts";

let db: TestDb;
let redis: TestRedis;
let fake: FakeOpenRouter;
let a: RouterProc;
let b: RouterProc;
let adminA: string;
let adminB: string;
let key: string;
let tenantId: number;
let logA = "";

beforeAll(async () => {
  db = await createTestDb();
  redis = await createTestRedis();
  fake = await new FakeOpenRouter({ apiKey: "sk-or-pause" }).start();
  ({ tenantId, key } = await seedTenant(db, "paused"));
  const env = routerEnv(db, redis, fake, "sk-or-pause");
  const [pa, pb] = await Promise.all([freePort(), freePort()]);
  adminA = `http://127.0.0.1:${pa}`;
  adminB = `http://127.0.0.1:${pb}`;
  [a, b] = await Promise.all([spawnRouter({ ...env, SWITCHYARD_ROUTER__ADMIN_PORT: String(pa) }, "router-a"), spawnRouter({ ...env, SWITCHYARD_ROUTER__ADMIN_PORT: String(pb) }, "router-b")]);
  const keep = (d: Buffer) => (logA += d.toString());
  a.proc.child.stdout?.on("data", keep);
  a.proc.child.stderr?.on("data", keep);
}, 180_000);

afterAll(async () => {
  if (a?.proc.child.pid) process.kill(a.proc.child.pid, "SIGCONT");
  await a?.stop();
  await b?.stop();
  await fake?.stop();
  await db?.drop();
  await redis?.cleanup();
});

async function duplicates(admin: string): Promise<number> {
  const text = await (await fetch(`${admin}/metrics`)).text();
  const m = /switchyard_ledger_rows_total\{outcome="duplicate"\} (\d+)/.exec(text);
  return m ? Number(m[1]) : 0;
}

describe("a router paused past the hold's TTL", () => {
  it("finds its request finished by the other router and writes nothing: one row, one settle", async () => {
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    const day = budgetDay(Date.now(), "UTC");
    // A whole generation reaches the frozen router's socket buffer: OpenRouter charges all of it.
    fake.enqueue({ kind: "slow", interTokenMs: 30, completionTokens: 20 });
    const s = await openStream(a.url, key, "pause me");
    const pid = a.proc.child.pid!;
    process.kill(pid, "SIGSTOP");
    try {
      await waitFor(() => [...fake.generations.values()].some((g) => !g.cancelled), { what: "the fake to finish the generation" });
      // Router B takes the silent intent over and finishes it once the hold has expired.
      const row = await waitFor(
        async () => (await db.sql<{ request_id: string; cost_micro: string; cost_source: string; provider_generation_id: string }[]>`
          select request_id, cost_micro::text, cost_source, provider_generation_id from spend_ledger where tenant_id = ${tenantId}`)[0],
        { timeoutMs: HOLD_TTL_MS + 15_000, intervalMs: 100, what: "router B to finish the frozen router's request" },
      );
      expect(row.request_id).toBe(s.requestId);
      expect(row.cost_source).toBe("provider_lookup");
      const generation = fake.generations.get(row.provider_generation_id)!;
      expect(generation.cancelled).toBe(false);
      expect(BigInt(row.cost_micro)).toBe(fake.chargedMicro([generation.id]));
      expect(await store.snapshot(tenantId, day)).toMatchObject({ spentMicro: BigInt(row.cost_micro), heldMicro: 0n });
      await sleep(500); // still well past the TTL when it wakes
    } finally {
      process.kill(pid, "SIGCONT");
    }
    // A wakes, ends the stream (its deadline has long passed) and tries to settle it.
    await s.rest;
    await waitFor(() => logA.includes("request already finished by another router"), { timeoutMs: 10_000, what: "router A to find its request finished" });
    expect(logA).toContain(s.requestId);
    await sleep(500); // anything A might still write would be drained by now
    const rows = await db.sql`select request_id, cost_micro::text as cost_micro from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows).toHaveLength(1);
    const cost = BigInt(rows[0]!.cost_micro as string);
    expect(await store.snapshot(tenantId, day)).toMatchObject({ spentMicro: cost, heldMicro: 0n });
    expect(await redis.redis.xlen(`${redis.prefix}{ledger}:stream`)).toBe(0);
    expect((await duplicates(adminA)) + (await duplicates(adminB))).toBe(0);
    expect(await redis.redis.xlen(`${redis.prefix}{ledger}:intents`)).toBe(0);

    // Router A is still a good router: its next paid request is billed normally.
    const r = await fetch(`${a.url}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "openai/gpt-4o-mini", max_tokens: 20, messages: [{ role: "user", content: "after" }] }),
    });
    expect(r.status).toBe(200);
    await r.text();
    await waitFor(async () => (await db.sql`select 1 from spend_ledger where tenant_id = ${tenantId}`).length === 2, { what: "the next request's row" });
    const sources = await db.sql`select cost_source from spend_ledger where tenant_id = ${tenantId} order by started_at`;
    expect(sources.map((x) => x.cost_source)).toEqual(["provider_lookup", "provider"]);
  }, 90_000);
});
