// A router killed with SIGKILL in the middle of a paid stream: its budget
// hold expires by itself, nothing it already recorded is lost or counted
// twice (another router takes over its unacknowledged ledger rows), the
// killed request is finished by the other router from its intent (issue 18;
// test/money/orphan-*.test.ts go further), and reconcile makes the Redis
// counters equal the ledger.
import { describe, expect, it } from "vitest";
import { budgetDay, RedisBudgetStore } from "@switchyard/state";
import { reconcileBudgetDay } from "../../apps/router/src/billing/reconcile.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import type { RouterProc } from "../helpers/router-proc.ts";
import { generationNotes, HOLD_TTL_MS, MODEL, routerEnv, seedTenant, twoRouters } from "./crash-helpers.ts";

let fake: FakeOpenRouter;
let key: string;
let tenantId: number;

const rig = twoRouters(
  async (db, redis) => {
    fake = await new FakeOpenRouter({ apiKey: "sk-or-crash" }).start();
    ({ tenantId, key } = await seedTenant(db, "crashy", 100n));
    return routerEnv(db, redis, fake, "sk-or-crash");
  },
  () => fake?.stop(),
);

const post = (router: RouterProc, body: Record<string, unknown>) =>
  fetch(`${router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, max_tokens: 100, messages: [{ role: "user", content: "hello" }], ...body }),
  });

describe("kill -9 of a router mid-stream", () => {
  it("the hold expires, nothing is double-counted, reconcile makes Redis equal the ledger", async () => {
    const { db, redis, a, b } = rig;
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    const day = budgetDay(Date.now(), "UTC");
    const done: string[] = [];
    for (let i = 0; i < 5; i++) {
      const r = await post(a, { stream: i % 2 === 0 });
      expect(r.status).toBe(200);
      await r.text();
      done.push(r.headers.get("x-request-id")!);
    }
    await waitFor(async () => (await generationNotes(redis)).length === 0, { timeoutMs: 5_000, what: "the finished requests' intents retired" });
    // A long paid stream on router A; its hold is live while it runs.
    fake.enqueue({ kind: "slow", interTokenMs: 100, completionTokens: 100 });
    const victim = await post(a, { stream: true });
    const reader = victim.body!.getReader();
    await reader.read();
    expect((await store.snapshot(tenantId, day)).heldMicro).toBeGreaterThan(0n);
    // Killed before the stream's generation id is noted, the orphan is charged at its hold: this test is about the lookup.
    await waitFor(async () => (await generationNotes(redis)).length === 1, { timeoutMs: 5_000, what: "the stream's generation id noted beside its intent" });
    await a.kill9();
    await reader.read().catch(() => undefined); // the connection dies with the router
    // Router B keeps serving the same tenant meanwhile.
    for (let i = 0; i < 5; i++) {
      const r = await post(b, { stream: i % 2 === 1 });
      expect(r.status).toBe(200);
      await r.text();
      done.push(r.headers.get("x-request-id")!);
    }
    // The dead router's hold frees itself.
    await waitFor(async () => (await store.snapshot(tenantId, day)).heldMicro === 0n, { timeoutMs: HOLD_TTL_MS + 3_000, what: "the orphaned hold to expire" });
    // Router B finishes the killed request from its intent, at OpenRouter's own cost.
    const victimId = victim.headers.get("x-request-id")!;
    await waitFor(async () => (await db.sql`select 1 from spend_ledger where request_id = ${victimId} and cost_source = 'provider_lookup'`).length === 1, {
      timeoutMs: HOLD_TTL_MS + 10_000,
      what: "the killed request's row",
    });
    done.push(victimId);
    // B drains everything still buffered (A's unacknowledged rows included) on shutdown.
    await b.stop();
    const rows = await db.sql`select request_id, cost_micro from spend_ledger where tenant_id = ${tenantId}`;
    const ids = rows.map((r) => r.request_id as string);
    expect(new Set(ids).size).toBe(ids.length); // never twice
    expect(new Set(ids)).toEqual(new Set(done)); // every request, the killed one included, once
    const ledger = rows.reduce((acc, r) => acc + BigInt(r.cost_micro), 0n);
    // Reconcile: the counters become ledger + live holds (there are none left).
    await reconcileBudgetDay(db.db, store, tenantId, day);
    const after = await store.snapshot(tenantId, day);
    expect(after.spentMicro).toBe(ledger);
    expect(after.heldMicro).toBe(0n);
  }, 60_000);
});
