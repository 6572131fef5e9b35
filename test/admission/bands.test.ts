// Admission bands through a real router and sim workers with decode slots:
// each band's saturation ceiling (counted locally between heartbeats, so a
// burst does not overshoot), higher bands first, and the priority header.
import { beforeAll, describe, expect, it } from "vitest";
import { sleep, waitFor } from "../helpers/env.ts";
import { call, harnessHooks, startHarness, waiting, type Harness } from "./harness.ts";

let h: Harness;

beforeAll(async () => {
  h = await startHarness(["live", "bulk"], {
    "admission.tenants": { live: { defaultBand: "interactive" }, bulk: { defaultBand: "batch", maxBand: "batch" } },
  });
});

const { start, pool } = harnessHooks(() => h);

describe("ceilings", () => {
  it("batch < 0.7, standard < 0.9, interactive < 1.0 of the pool's slots; the rest wait; a burst does not overshoot", async () => {
    const w = await pool("ceil", 10);
    // A burst of 10 batch streams at once, with the worker's heartbeat far away:
    // only the router's own count stops it at the ceiling.
    for (let i = 0; i < 10; i++) start("bulk", { hold: true });
    await waitFor(() => w.inFlight === 7 && waiting(h, "batch") === 3, { what: () => `7 batch running, 3 waiting (running ${w.inFlight}, waiting ${waiting(h, "batch")})` });
    await sleep(200);
    expect(w.inFlight).toBe(7);
    // Standard (acme's default) goes up to 9 of 10; interactive to all 10.
    for (let i = 0; i < 3; i++) start("acme", { hold: true });
    await waitFor(() => w.inFlight === 9 && waiting(h, "standard") === 1, { what: () => `9 running, 1 standard waiting (running ${w.inFlight})` });
    for (let i = 0; i < 2; i++) start("live", { hold: true });
    await waitFor(() => w.inFlight === 10 && waiting(h, "interactive") === 1, { what: () => `10 running, 1 interactive waiting (running ${w.inFlight})` });
    await sleep(200);
    expect(w.inFlight).toBe(10);
    expect(w.decoding).toBe(10);
    expect(w.queueDepth).toBe(0); // the worker itself never queues: admission does
    expect(h.gate.inspect("adm-m")).toMatchObject({ capacity: 10, outstanding: 10, waiting: { interactive: 1, standard: 1, batch: 3 } });
    expect(h.gate.inspect("adm-m")!.saturation).toBeCloseTo(1.0);
  });
});

describe("band order", () => {
  it("higher bands go first, whatever the arrival order; lower ones wait for their own ceiling", async () => {
    const w = await pool("order", 4);
    const holders = Array.from({ length: 4 }, () => start("live", { hold: true }));
    await waitFor(() => w.inFlight === 4, { what: "4 holders running" });
    const b1 = start("bulk", { label: "batch" });
    await waitFor(() => waiting(h, "batch") === 1, { what: "batch queued" });
    const s1 = start("acme", { label: "standard" });
    await waitFor(() => waiting(h, "standard") === 1, { what: "standard queued" });
    const i1 = start("live", { label: "interactive" });
    await waitFor(() => waiting(h, "interactive") === 1, { what: "interactive queued" });

    // One slot frees: 3/4 busy. Interactive (< 1.0) runs; then, once it has
    // ended, standard (3/4 < 0.9); batch needs < 0.7 and keeps waiting.
    holders[0]!.abort();
    const [ri, rs] = await Promise.all([i1.done, s1.done]);
    expect(ri.status).toBe(200);
    expect(rs.status).toBe(200);
    expect(ri.endAt).toBeLessThan(rs.headersAt);
    await sleep(150);
    expect(waiting(h, "batch")).toBe(1);

    // Another frees: 2/4 < 0.7, batch runs.
    holders[1]!.abort();
    const rb = await b1.done;
    expect(rb.status).toBe(200);
    expect(rb.headersAt).toBeGreaterThan(rs.endAt);
  });
});

describe("x-switchyard-priority", () => {
  it("asking above the tenant's maximum is refused with 403 priority_not_allowed; an unknown band with 400", async () => {
    const w = await pool("prio", 4);
    const before = h.fx.router.deps.metrics.admissionRejections.get({ band: "interactive", reason: "priority_not_allowed" });
    const r = await call(h, "acme", { priority: "interactive" }).done;
    expect(r.status).toBe(403);
    const err = JSON.parse(r.body).error;
    expect(err).toMatchObject({ code: "priority_not_allowed", type: "permission_error", param: "x-switchyard-priority" });
    expect(err.message).toContain("'standard'");
    expect(h.fx.router.deps.metrics.admissionRejections.get({ band: "interactive", reason: "priority_not_allowed" })).toBe(before + 1);

    const bulk = await call(h, "bulk", { priority: "standard" }).done;
    expect(bulk.status).toBe(403);

    const bad = await call(h, "acme", { priority: "urgent" }).done;
    expect(bad.status).toBe(400);
    expect(JSON.parse(bad.body).error).toMatchObject({ code: "invalid_request", param: "x-switchyard-priority" });
    expect(w.served.get("/v1/chat/completions") ?? 0).toBe(0);
  });

  it("asking for a lower band (or the own default) is served in that band", async () => {
    const w = await pool("prio-low", 4);
    const admitted = (band: string) => h.fx.router.deps.metrics.admissionAdmitted.get({ band, queued: "false" });
    const [b0, s0, i0] = [admitted("batch"), admitted("standard"), admitted("interactive")];
    expect((await call(h, "acme", { priority: "batch" }).done).status).toBe(200);
    expect(admitted("batch")).toBe(b0 + 1);
    expect((await call(h, "acme").done).status).toBe(200);
    expect(admitted("standard")).toBe(s0 + 1);
    expect((await call(h, "live", { priority: "interactive" }).done).status).toBe(200);
    expect((await call(h, "live").done).status).toBe(200);
    expect(admitted("interactive")).toBe(i0 + 2);

    // The band decides the ceiling: with 3 of 4 slots held, acme's request
    // asked as batch waits (0.75 ≥ 0.7) while its standard one runs (< 0.9).
    for (let i = 0; i < 3; i++) start("live", { hold: true });
    await waitFor(() => w.inFlight === 3, { what: "3 holders" });
    const asBatch = start("acme", { priority: "batch", label: "as-batch" });
    await waitFor(() => waiting(h, "batch") === 1, { what: "batch-asked request queued" });
    expect((await call(h, "acme").done).status).toBe(200);
    expect(waiting(h, "batch")).toBe(1);
    asBatch.abort();
    // The client gone: out of the queue at once, not at the band's TTL.
    await waitFor(() => waiting(h, "batch") === 0, { what: "the aborted request out of the batch queue", timeoutMs: 2_000 });
  });
});
