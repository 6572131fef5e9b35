// Issue 10 item 6: one tenant must not deny another at admission. The two
// attacks, through a real router and a sim worker pool: alpha floods the
// queue (1000 requests) — beta is still queued and served, not 503; alpha
// holds every slot with long streams and a backlog behind them — beta gets
// the next slot that frees, not a place after alpha's backlog. And the
// other side of fair share: a lone tenant still uses the whole pool, and
// weights divide it.
import { beforeAll, describe, expect, it } from "vitest";
import { sleep, waitFor } from "../helpers/env.ts";
import { call, harnessHooks, MODEL, startHarness, waiting, type Call, type Harness } from "../admission/harness.ts";

let h: Harness;

beforeAll(async () => {
  h = await startHarness(["alpha", "beta", "heavy", "light", "holder"], {
    "admission.tenants": { heavy: { weight: 3 } },
  });
});

const { start, pool } = harnessHooks(() => h);

const tenantState = (tenant: string) => h.gate.inspect(MODEL)?.tenants.get(tenant);

describe("a tenant's queue flood", () => {
  it("alpha fills the 8 slots and sends 1000 more: past its own bound it gets 429, and beta is queued and served first", async () => {
    const w = await pool("flood", 8);
    const holders = Array.from({ length: 8 }, () => start("alpha", { hold: true }));
    await waitFor(() => w.inFlight === 8, { what: "alpha holds the 8 slots" });

    const flood = Array.from({ length: 1000 }, (_, i) => start("alpha", { label: `A${i}` }));
    const answers = new Map<Call, Awaited<Call["done"]>>();
    for (const c of flood) void c.done.then((r) => answers.set(c, r), () => {});
    // The default per-tenant bound is 100 waiting requests per pool: the other 900 are refused.
    await waitFor(() => answers.size === 900 && waiting(h, "standard") === 100, { timeoutMs: 30_000, what: () => `900 answered, 100 waiting (${answers.size}, ${waiting(h, "standard")})` });
    for (const r of answers.values()) {
      expect(r.status).toBe(429);
      expect(r.headers.get("retry-after")).toBe("2");
      expect(JSON.parse(r.body).error).toMatchObject({ code: "tenant_queue_full", type: "rate_limit_error" });
    }
    const queuedAlpha = flood.filter((c) => !answers.has(c));
    expect(waiting(h, "standard")).toBe(100);
    expect(h.fx.router.deps.metrics.admissionRejections.get({ band: "standard", reason: "tenant_queue_full" })).toBeGreaterThanOrEqual(900);

    // Beta is not refused: it waits, behind nobody of its own.
    const beta = start("beta", { label: "beta" });
    await waitFor(() => tenantState("beta")?.waiting === 1, { what: "beta queued" });
    expect(waiting(h, "standard")).toBe(101);
    // Fair shares while both compete: 4 slots each; alpha holds all 8.
    expect(tenantState("alpha")).toMatchObject({ held: 8, waiting: 100, share: 4 });
    expect(tenantState("beta")).toMatchObject({ held: 0, waiting: 1, share: 4 });

    // One slot frees: it goes to beta (0 held), not to alpha's first queued request (8 held).
    holders[0]!.abort();
    const r = await beta.done;
    expect(r.status).toBe(200);
    expect(r.body).toContain("[DONE]");
    // Beta ran in the freed slot; only once it ended did the slot go back to alpha's backlog.
    const firstAlpha = await Promise.race(queuedAlpha.map((c) => c.done));
    expect(firstAlpha.status).toBe(200);
    expect(firstAlpha.headersAt).toBeGreaterThan(r.headersAt);
  }, 60_000);
});

describe("a tenant holding every slot with long streams", () => {
  it("beta gets the next slot that frees, ahead of alpha's backlog queued before it", async () => {
    const w = await pool("long", 4);
    // Alpha's streams end one after another, 2.5 s apart (80 ms per token).
    const holders = [20, 50, 80, 110].map((tokens, i) => start("alpha", { label: `H${i}`, sim: { tokens, interTokenMs: 80 } }));
    await waitFor(() => w.inFlight === 4, { what: "alpha holds the 4 slots" });
    // A backlog of alpha's long streams, queued before beta (first in the ring).
    const backlog = Array.from({ length: 12 }, (_, i) => start("alpha", { label: `B${i}`, sim: { tokens: 50, interTokenMs: 80 } }));
    await waitFor(() => waiting(h, "standard") === 12, { what: "alpha's backlog queued" });
    const t0 = performance.now();
    const beta = start("beta", { label: "beta" });
    await waitFor(() => waiting(h, "standard") === 13, { what: "beta queued" });

    const rb = await beta.done;
    expect(rb.status).toBe(200);
    const waited = rb.headersAt - t0;
    const [h0, h1] = await Promise.all([holders[0]!.done, holders[1]!.done]);
    // Beta started when the first of alpha's streams ended, before the second did…
    expect(h0.status).toBe(200);
    expect(rb.headersAt).toBeLessThan(h1.endAt);
    // …and ahead of every request of alpha's backlog (round-robin alone gave that slot to alpha's B0).
    const firstBacklog = await Promise.race(backlog.map((c) => c.done));
    expect(firstBacklog.headersAt).toBeGreaterThan(rb.headersAt);
    // Alpha's whole backlog needs 3 waves of 4 s streams after its holders; beta waited about one stream's remaining time.
    expect(waited).toBeLessThan(6_000);
  }, 60_000);
});

describe("work-conserving", () => {
  it("a lone tenant uses the whole pool; a second one gets the next free slots up to its share", async () => {
    const w = await pool("lone", 4);
    const holders = Array.from({ length: 4 }, () => start("alpha", { hold: true }));
    await waitFor(() => w.inFlight === 4, { what: "alpha alone runs on all 4 slots" });
    expect(waiting(h, "standard")).toBe(0);
    expect(tenantState("alpha")).toMatchObject({ held: 4, waiting: 0, share: 4 });

    // Alpha wants more, then beta: both wait; freed slots go to beta until it holds its share (2 of 4).
    for (let i = 0; i < 4; i++) start("alpha", { hold: true, label: `more${i}` });
    await waitFor(() => waiting(h, "standard") === 4, { what: "alpha's extra queued" });
    for (let i = 0; i < 3; i++) start("beta", { hold: true, label: `beta${i}` });
    await waitFor(() => waiting(h, "standard") === 7, { what: "beta queued" });
    holders[0]!.abort();
    holders[1]!.abort();
    await waitFor(() => tenantState("beta")?.held === 2, { what: () => `beta holds 2 (${JSON.stringify(tenantState("beta"))})` });
    expect(tenantState("alpha")).toMatchObject({ held: 2, waiting: 4 });
    // At their shares, a slot alpha gives back goes to alpha (1 held) rather than beta (2): they stay even.
    holders[2]!.abort();
    await waitFor(() => tenantState("alpha")!.held === 2 && tenantState("alpha")!.waiting === 3, { what: () => `alpha refilled (${JSON.stringify(tenantState("alpha"))})` });
    expect(tenantState("beta")).toMatchObject({ held: 2, waiting: 1 });
  }, 30_000);

  it("weights divide the pool: weight 3 against weight 1 gets 3 of 4 freed slots", async () => {
    const w = await pool("weights", 4);
    const holders = Array.from({ length: 4 }, () => start("holder", { hold: true }));
    await waitFor(() => w.inFlight === 4, { what: "pool held" });
    for (let i = 0; i < 6; i++) start("heavy", { hold: true });
    await waitFor(() => waiting(h, "standard") === 6, { what: "heavy queued" });
    for (let i = 0; i < 6; i++) start("light", { hold: true });
    await waitFor(() => waiting(h, "standard") === 12, { what: "light queued" });
    expect(tenantState("heavy")!.share).toBeCloseTo(4 * (3 / 5));
    for (const c of holders) {
      c.abort();
      await sleep(50);
    }
    await waitFor(() => (tenantState("heavy")?.held ?? 0) + (tenantState("light")?.held ?? 0) === 4, { what: "freed slots refilled" });
    expect(tenantState("heavy")!.held).toBe(3);
    expect(tenantState("light")!.held).toBe(1);
  }, 30_000);
});
