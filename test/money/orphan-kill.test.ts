// kill -9 of a router in the middle of 50 paid streams: the other router
// takes its intents over and, once their holds have expired, finishes each
// request at what OpenRouter says the generation cost (GET /generation).
// Every request gets exactly one row, the ledger equals what the provider
// charged to the micro-cent, and the tenant's day in Redis equals the ledger.
import { describe, expect, it } from "vitest";
import { budgetDay, RedisBudgetStore } from "@switchyard/state";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import { CLAIM_IDLE_MS, generationNotes, HOLD_TTL_MS, ORPHAN_SCAN_MS, openStream, reconcileCli, routerEnv, seedTenant, twoRouters } from "./crash-helpers.ts";

const STREAMS = 50;

let fake: FakeOpenRouter;
let key: string;
let tenantId: number;

const rig = twoRouters(
  async (db, redis) => {
    fake = await new FakeOpenRouter({ apiKey: "sk-or-kill" }).start();
    // Long enough to be cut by the kill: 40 tokens, 100 ms apart.
    fake.defaultScenario = { kind: "slow", interTokenMs: 100, completionTokens: 40 };
    ({ tenantId, key } = await seedTenant(db, "killed"));
    return routerEnv(db, redis, fake, "sk-or-kill");
  },
  () => fake?.stop(),
);

describe("kill -9 in the middle of 50 paid streams", () => {
  it("every request is finished once, at the provider's own cost; Redis equals the ledger equals the invoice", async () => {
    const { db, redis, a } = rig;
    const streams = await Promise.all(Array.from({ length: STREAMS }, (_, i) => openStream(a.url, key, `stream ${i} ${"x".repeat(i)}`)));
    const ids = streams.map((s) => s.requestId);
    expect(new Set(ids).size).toBe(STREAMS);
    // Every stream's generation id noted beside its intent (crash-helpers generationNotes), or its orphan has nothing to look up.
    await waitFor(async () => (await generationNotes(redis)).length === STREAMS, { timeoutMs: 5_000, what: "the 50 streams' generation ids noted beside their intents" });
    const killedAt = Date.now();
    await a.kill9();
    await Promise.all(streams.map((s) => s.rest));
    // The fake saw every stream cut short, and charged each for what it generated.
    await waitFor(() => fake.generations.size === STREAMS && [...fake.generations.values()].every((g) => g.cancelled), { what: "the fake to book 50 cut-short generations" });

    // Every attempt started before the kill: within the hold's TTL + the
    // take-over idle time + a scan and a drain of it (+ slack for a loaded box).
    const bound = HOLD_TTL_MS + CLAIM_IDLE_MS + 2 * ORPHAN_SCAN_MS + 3_000;
    await waitFor(async () => (await db.sql`select count(*)::int as n from spend_ledger where tenant_id = ${tenantId}`)[0]!.n >= STREAMS, {
      timeoutMs: bound + 10_000,
      intervalMs: 100,
      what: "a ledger row for each of the 50 killed requests",
    });
    const took = Date.now() - killedAt;
    console.log(`50 orphaned streams finished ${took} ms after the kill (hold TTL ${HOLD_TTL_MS} ms, claim idle ${CLAIM_IDLE_MS} ms)`);
    expect(took).toBeLessThanOrEqual(bound);

    const rows = await db.sql<{ request_id: string; cost_micro: string; cost_source: string; provider_generation_id: string | null; prompt_tokens: number; completion_tokens: number; status: string }[]>`
      select request_id, cost_micro::text, cost_source, provider_generation_id, prompt_tokens, completion_tokens, status from spend_ledger where tenant_id = ${tenantId}`;
    expect(rows).toHaveLength(STREAMS); // exactly one each
    expect(new Set(rows.map((r) => r.request_id))).toEqual(new Set(ids));
    for (const r of rows) {
      expect(r.cost_source).toBe("provider_lookup");
      expect(r.status).toBe("error");
      const g = fake.generations.get(r.provider_generation_id ?? "");
      expect(g, `generation of ${r.request_id}`).toBeDefined();
      expect(BigInt(r.cost_micro)).toBe(fake.chargedMicro([g!.id]));
      expect([r.prompt_tokens, r.completion_tokens]).toEqual([g!.prompt, g!.completion]);
      expect(g!.completion).toBeGreaterThanOrEqual(2);
    }
    const ledger = rows.reduce((s, r) => s + BigInt(r.cost_micro), 0n);
    expect(ledger).toBe(fake.chargedMicro()); // the invoice, to the micro-cent
    expect(ledger).toBeGreaterThan(0n);
    // Each request was looked up (and only those).
    expect(fake.requests.filter((r) => r.path.startsWith("/api/v1/generation?id=")).length).toBeGreaterThanOrEqual(STREAMS);

    // The day was charged once per request: the counters already equal the ledger…
    const store = new RedisBudgetStore(redis.redis, redis.prefix);
    const day = budgetDay(Date.now(), "UTC");
    expect(await store.snapshot(tenantId, day)).toMatchObject({ spentMicro: ledger, heldMicro: 0n });
    // …and `budgets reconcile` agrees.
    const rec = await reconcileCli(db, redis, "killed");
    expect(rec.code, rec.out).toBe(0);
    expect(await store.snapshot(tenantId, day)).toMatchObject({ spentMicro: ledger, heldMicro: 0n });
    // Nothing is left in the journal.
    expect(await redis.redis.xlen(`${redis.prefix}{ledger}:intents`)).toBe(0);
  }, 120_000);
});
