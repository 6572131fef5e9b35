// Unit tests of admission's parts: the fair queue, the pool load estimate and
// band choice. The gate itself is tested through a real router in test/admission/.
import { describe, expect, it } from "vitest";
import type { WorkerRecord } from "@switchyard/state";
import { loadConfig } from "../config.ts";
import { bandPolicy, chooseBand, tenantWeight } from "./bands.ts";
import { FairQueue } from "./fair-queue.ts";
import { PoolLoad } from "./pool.ts";
import { AdmissionGate } from "./gate.ts";
import { RouterMetrics } from "../observability/metrics.ts";
import { createLogger } from "../observability/log.ts";
import type { WorkerDirectory } from "../routing/directory.ts";
import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";

describe("FairQueue", () => {
  it("serves tenants round-robin, each in arrival order", () => {
    const q = new FairQueue<{ tenant: string; n: number }>();
    for (let n = 0; n < 5; n++) q.push({ tenant: "a", n });
    q.push({ tenant: "b", n: 0 });
    q.push({ tenant: "c", n: 0 });
    q.push({ tenant: "b", n: 1 });
    const order: string[] = [];
    while (q.size > 0) {
      const e = q.shift()!;
      order.push(`${e.tenant}${e.n}`);
    }
    expect(order).toEqual(["a0", "b0", "c0", "a1", "b1", "a2", "a3", "a4"]);
  });

  it("removes an entry wherever it stands, once", () => {
    const q = new FairQueue<{ tenant: string; n: number }>();
    const entries = [0, 1, 2].map((n) => ({ tenant: "a", n }));
    for (const e of entries) q.push(e);
    expect(q.remove(entries[1]!)).toBe(true);
    expect(q.remove(entries[1]!)).toBe(false);
    expect(q.size).toBe(2);
    expect([q.shift()!.n, q.shift()!.n]).toEqual([0, 2]);
    expect(q.shift()).toBeUndefined();
  });

  it("shiftFairest serves the lowest-ranked tenant first, equals in ring order, and counts per tenant", () => {
    const q = new FairQueue<{ tenant: string; n: number }>();
    for (let n = 0; n < 3; n++) q.push({ tenant: "a", n });
    q.push({ tenant: "b", n: 0 });
    q.push({ tenant: "c", n: 0 });
    expect([q.countOf("a"), q.countOf("b"), q.countOf("nobody")]).toEqual([3, 1, 0]);
    // a holds 4 slots, b 1, c 1: b and c (equal) go first in ring order, a last.
    const held: Record<string, number> = { a: 4, b: 1, c: 1 };
    const order: string[] = [];
    while (q.size > 0) {
      const e = q.shiftFairest((t) => held[t]!)!;
      held[e.tenant]!++;
      order.push(`${e.tenant}${e.n}`);
    }
    expect(order).toEqual(["b0", "c0", "a0", "a1", "a2"]);
  });

  it("a tenant that empties and comes back joins the end of the ring", () => {
    const q = new FairQueue<{ tenant: string; n: number }>();
    q.push({ tenant: "a", n: 0 });
    q.push({ tenant: "b", n: 0 });
    q.push({ tenant: "b", n: 1 });
    expect(q.shift()!.tenant).toBe("a");
    q.push({ tenant: "a", n: 1 });
    expect([q.shift()!.tenant, q.shift()!.tenant, q.shift()!.tenant]).toEqual(["b", "a", "b"]);
  });
});

const rec = (over: Partial<WorkerRecord>): WorkerRecord => ({
  id: "w1",
  url: "http://127.0.0.1:1",
  models: ["m"],
  state: "ready",
  inFlight: 0,
  queueDepth: 0,
  capacity: 10,
  device: "sim",
  layerRanges: [],
  prefixes: [],
  version: "0",
  startedAt: 0,
  updatedAt: 1,
  ...over,
});

describe("PoolLoad", () => {
  it("is the worse of occupancy and queue depth over the pool's capacity", () => {
    const p = new PoolLoad("m");
    p.observe([rec({ id: "a", inFlight: 5, capacity: 10 }), rec({ id: "b", inFlight: 1, capacity: 10, queueDepth: 0 })]);
    expect(p.saturation()).toBeCloseTo(0.3);
    p.observe([rec({ id: "a", inFlight: 2, queueDepth: 12, capacity: 10, updatedAt: 2 })]);
    expect(p.saturation()).toBeCloseTo(1.2);
  });

  it("ignores workers that take no new work; none left → capacity 0", () => {
    const p = new PoolLoad("m");
    p.observe([rec({ state: "draining", inFlight: 9 }), rec({ id: "b", state: "warming" })]);
    expect(p.capacity).toBe(0);
    expect(p.saturation()).toBe(0);
  });

  it("counts its own admissions between heartbeats, and a refresh without a new beat forgets nothing", () => {
    const p = new PoolLoad("m");
    const beat = [rec({ inFlight: 2, updatedAt: 100 })];
    p.observe(beat);
    for (let i = 0; i < 5; i++) p.admitted();
    expect(p.inFlight()).toBe(7);
    p.observe(beat); // same heartbeat re-read
    expect(p.inFlight()).toBe(7);
    p.finished();
    expect(p.inFlight()).toBe(6);
    // The next beat saw all of them (2 others + our 4): the base moves, nothing counted twice.
    p.observe([rec({ inFlight: 6, updatedAt: 200 })]);
    expect(p.inFlight()).toBe(6);
    p.finished();
    expect(p.inFlight()).toBe(5);
  });

  it("never estimates below what this router alone has outstanding (a beat taken before our requests arrived)", () => {
    const p = new PoolLoad("m");
    for (let i = 0; i < 4; i++) p.admitted();
    p.observe([rec({ inFlight: 0, updatedAt: 300 })]);
    expect(p.inFlight()).toBe(4);
  });
});

describe("bands", () => {
  const cfg = loadConfig({
    env: {},
    overrides: {
      "admission.tenants": { live: { defaultBand: "interactive" }, bulk: { defaultBand: "batch", maxBand: "batch" }, mid: { maxBand: "interactive" } },
    },
  }).admission;

  it("defaults: standard, may ask up to standard", () => {
    expect(bandPolicy(cfg, "anyone")).toEqual({ defaultBand: "standard", maxBand: "standard" });
    expect(chooseBand(cfg, "anyone", undefined)).toEqual({ ok: true, band: "standard" });
    expect(chooseBand(cfg, "anyone", "batch")).toEqual({ ok: true, band: "batch" });
    expect(chooseBand(cfg, "anyone", " Interactive ")).toMatchObject({ ok: false, reason: "priority_not_allowed", asked: "interactive", maxBand: "standard" });
  });

  it("a tenant's default band raises its maximum to at least that band", () => {
    expect(bandPolicy(cfg, "live")).toEqual({ defaultBand: "interactive", maxBand: "interactive" });
    expect(chooseBand(cfg, "bulk", "standard")).toMatchObject({ ok: false, reason: "priority_not_allowed" });
    expect(chooseBand(cfg, "mid", "interactive")).toEqual({ ok: true, band: "interactive" });
    expect(chooseBand(cfg, "mid", undefined)).toEqual({ ok: true, band: "standard" });
  });

  it("fair-share keys: maxQueuedPerTenant (default 100, env too) and a positive weight per tenant, looked up by own keys only", () => {
    expect(cfg.maxQueuedPerTenant).toBe(100);
    expect(loadConfig({ env: { SWITCHYARD_ADMISSION__MAX_QUEUED_PER_TENANT: "5" } }).admission.maxQueuedPerTenant).toBe(5);
    expect(() => loadConfig({ env: {}, overrides: { "admission.tenants": { x: { weight: 0 } } } })).toThrow();
    const weighted = loadConfig({ env: {}, overrides: { "admission.tenants": { heavy: { weight: 3 } } } }).admission;
    expect([tenantWeight(weighted, "heavy"), tenantWeight(weighted, "anyone"), tenantWeight(weighted, "constructor")]).toEqual([3, 1, 1]);
    expect(bandPolicy(weighted, "constructor")).toEqual({ defaultBand: "standard", maxBand: "standard" });
  });

  it("an unknown band is invalid", () => {
    expect(chooseBand(cfg, "anyone", "urgent")).toMatchObject({ ok: false, reason: "invalid_priority" });
  });

  it("config refuses ceilings that rise as priority falls, and a default above the maximum", () => {
    expect(() => loadConfig({ env: {}, overrides: { "admission.bands.batch.ceiling": 0.95 } })).toThrow(/ceilings/);
    expect(() => loadConfig({ env: {}, overrides: { "admission.tenants": { x: { defaultBand: "interactive", maxBand: "batch" } } } })).toThrow(/defaultBand/);
    expect(loadConfig({ env: { SWITCHYARD_ADMISSION__ENABLED: "false" } }).admission.enabled).toBe(false);
  });
});

describe("AdmissionGate places", () => {
  /** A gate on pool "m" (one worker of `capacity` slots) whose places are reclaimed 100 ms after their grant; its log lines. */
  const sweptGate = (capacity: number) => {
    const lines: string[] = [];
    const records = [rec({ id: "a", inFlight: 0, capacity })];
    const directory = { onChange: () => () => {}, models: () => new Map([["m", records]]) } as unknown as WorkerDirectory;
    const config = loadConfig({ env: {} }).admission;
    const gate = new AdmissionGate({
      config: { ...config, enabled: true },
      maxHoldMs: 100,
      holdGraceMs: 0,
      directory,
      chain: { workerPool: () => "m" },
      metrics: new RouterMetrics(),
      log: createLogger("warn", {}, (l) => lines.push(l)),
    });
    return { gate, lines };
  };
  /** Until pool "m" holds nothing (the sweep runs once a second), at most 3 s. */
  const untilAllBack = async (gate: AdmissionGate) => {
    const deadline = Date.now() + 3_000;
    while (gate.inspect("m")!.outstanding > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  };

  it("a place nobody gives back is reclaimed by the sweep after maxHoldMs + grace, and the pool has room again", async () => {
    const { gate, lines } = sweptGate(1);
    const signal = new AbortController().signal;
    const first = await gate.admit({ model: "m", tenantName: "t", signal });
    expect(first.pool).toBe("m");
    expect(gate.inspect("m")!.outstanding).toBe(1);
    // Never released: the sweep gives it back after 100 ms.
    await untilAllBack(gate);
    expect(gate.inspect("m")!.outstanding).toBe(0);
    expect(lines.filter((l) => l.includes("admission place reclaimed") && l.includes('"pool":"m"'))).toHaveLength(1);
    // A release after the reclaim changes nothing (once).
    first.release();
    expect(gate.inspect("m")!.outstanding).toBe(0);
  });

  it("places go back in any order, by release or by their response closing; the sweep reclaims only the rest", async () => {
    const { gate, lines } = sweptGate(10);
    const signal = new AbortController().signal;
    const responses = [0, 1, 2, 3, 4].map(() => new EventEmitter() as unknown as ServerResponse);
    const places = [];
    for (const [i, outgoing] of responses.entries()) places.push(await gate.admit({ model: "m", tenantName: `t${i}`, signal, outgoing }));
    expect(gate.inspect("m")!.outstanding).toBe(5);
    places[2]!.release(); // the middle one
    responses[0]!.emit("close"); // the oldest, by its response
    places[0]!.release(); // again: once
    places[4]!.release(); // the newest
    expect(gate.inspect("m")!.outstanding).toBe(2);
    // 1 and 3 were never given back: the sweep reclaims both, and nothing else.
    await untilAllBack(gate);
    expect(gate.inspect("m")!.outstanding).toBe(0);
    expect(lines.filter((l) => l.includes("admission place reclaimed"))).toHaveLength(2);
    // Their responses closing later changes nothing.
    responses[1]!.emit("close");
    responses[3]!.emit("close");
    expect(gate.inspect("m")!.outstanding).toBe(0);
    // The list is whole again: a new place is held and released as usual.
    const next = await gate.admit({ model: "m", tenantName: "t9", signal });
    expect(gate.inspect("m")!.outstanding).toBe(1);
    next.release();
    expect(gate.inspect("m")!.outstanding).toBe(0);
  });
});
