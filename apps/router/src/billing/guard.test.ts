// The settle runs off the request path (the next turn of the loop), counted
// rather than chained: drain() still waits for every settle asked for, one
// not yet started included, and a settle that fails is logged, not thrown.
import { describe, expect, it } from "vitest";
import type { NewLedgerRow } from "@switchyard/db";
import { MemoryBudgetStore } from "@switchyard/state";
import type { Backend } from "../backends/types.ts";
import { createLogger } from "../observability/log.ts";
import { RouterMetrics } from "../observability/metrics.ts";
import { StaticBudgets } from "./budgets.ts";
import { BudgetGuard, bodyFacts } from "./guard.ts";
import type { LedgerSink } from "./ledger.ts";
import { StaticPriceBook } from "./prices.ts";
import { loadConfig } from "../config.ts";

const worker = { id: "worker:w1", kind: "worker", model: "m", paid: false, workerId: "w1" } as unknown as Backend;

function guardWith(ledger: LedgerSink, lines: string[] = []) {
  return new BudgetGuard({
    store: new MemoryBudgetStore(),
    budgets: new StaticBudgets(),
    prices: new StaticPriceBook(),
    ledger,
    alerts: async () => true,
    billing: loadConfig({ env: {} }).billing,
    log: createLogger("error", {}, (l) => lines.push(l)),
    metrics: new RouterMetrics(),
  });
}

const tabOf = (guard: BudgetGuard, i: number) =>
  guard.open({ requestId: `req_${i}`, tenant: { tenantId: 1, tenantName: "t", keyId: 1, prefix: "sy_x", revoked: false }, path: "/v1/chat/completions", facts: bodyFacts("/v1/chat/completions", {}), model: "m", arrivedAtMs: Date.now(), startedAtPerf: performance.now() });

describe("BudgetGuard settles", () => {
  it("drain() waits for settles asked for in this turn (not started yet) and for rows still being written", async () => {
    const rows: NewLedgerRow[] = [];
    // A sink that takes 30 ms per row, like a Redis round trip under load.
    const slow: LedgerSink = { record: (r) => new Promise((done) => setTimeout(() => (rows.push(r), done()), 30)), flush: async () => {}, close: async () => {} };
    const guard = guardWith(slow);
    for (let i = 0; i < 5; i++) tabOf(guard, i).settle({ backend: worker, status: "ok", usage: { prompt: 3, completion: 2, cached: 0, cacheWrite: 0 } });
    // Nothing has run yet: the settles wait for the next turn.
    expect(rows).toHaveLength(0);
    await guard.drain();
    expect(rows.map((r) => r.requestId).sort()).toEqual(["req_0", "req_1", "req_2", "req_3", "req_4"]);
    expect(rows[0]!.promptTokens).toBe(3);
  });

  it("a settle whose row cannot be written is logged, and drain() still returns", async () => {
    const lines: string[] = [];
    const failing: LedgerSink = { record: () => Promise.reject(new Error("sink down")), flush: async () => {}, close: async () => {} };
    const guard = guardWith(failing, lines);
    tabOf(guard, 9).settle({ backend: worker, status: "ok" });
    await guard.drain();
    expect(lines.some((l) => l.includes("settle failed") && l.includes("sink down"))).toBe(true);
  });
});
