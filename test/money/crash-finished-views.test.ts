// Crash-finished rows stand out where finance looks: spend_daily and
// spend_vs_budget count them apart, and spendByDay (what `switchyard spend`
// prints) carries their count and cost.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTenant, insertLedgerRows, setBudget, spendByDay, type CostSource, type NewLedgerRow } from "@switchyard/db";
import { createTestDb, type TestDb } from "../helpers/env.ts";

let db: TestDb;

beforeAll(async () => {
  db = await createTestDb();
}, 120_000);

afterAll(async () => {
  await db?.drop();
});

const row = (tenantId: number, i: number, costSource: CostSource, costMicro: bigint): NewLedgerRow => ({
  requestId: `req_${i}`,
  tenantId,
  backend: "openrouter",
  model: "openai/gpt-4o-mini",
  costMicro,
  costSource,
  status: costSource === "provider" ? "ok" : "error",
  startedAt: new Date("2026-11-20T10:00:00Z"),
  finishedAt: new Date("2026-11-20T10:00:01Z"),
  durationMs: 1000,
});

describe("crash-finished rows in the finance views", () => {
  it("are counted apart, by source, and included in the totals", async () => {
    const t = await createTenant(db.db, "views");
    if (!t.ok) throw new Error("tenant");
    const id = t.tenant.id;
    await setBudget(db.db, { tenantId: id, dailyLimitCents: 1n });
    await insertLedgerRows(db.db, [row(id, 1, "provider", 100n), row(id, 2, "provider_lookup", 20n), row(id, 3, "hold_on_crash", 3_000n), row(id, 4, "usage_on_crash", 4n)]);
    const [daily] = await db.sql`select requests::int, cost_micro::text, crash_finished_requests::int, crash_finished_cost_micro::text, hold_on_crash_requests::int from spend_daily where tenant_id = ${id}`;
    expect(daily).toEqual({ requests: 4, cost_micro: "3124", crash_finished_requests: 3, crash_finished_cost_micro: "3024", hold_on_crash_requests: 1 });
    const [vs] = await db.sql`select cost_micro::text, crash_finished_requests::int, crash_finished_cost_micro::text from spend_vs_budget where tenant_id = ${id}`;
    expect(vs).toEqual({ cost_micro: "3124", crash_finished_requests: 3, crash_finished_cost_micro: "3024" });
    const [spend] = await spendByDay(db.db, { from: "2026-11-20", to: "2026-11-20", tenantId: id });
    expect(spend).toMatchObject({ requests: 4, costMicro: 3124n, crashFinishedRequests: 3, crashFinishedCostMicro: 3024n });
  });
});
