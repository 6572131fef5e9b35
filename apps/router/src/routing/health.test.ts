import { describe, expect, it } from "vitest";
import type { WorkerRecord } from "@switchyard/state";
import { RouterMetrics } from "../observability/metrics.ts";
import { WorkerHealth } from "./health.ts";

const cfg = { failureThreshold: 3, hardFailureThreshold: 1, baseEjectMs: 1_000, maxEjectMs: 4_000 };

function setup() {
  let t = 0;
  const metrics = new RouterMetrics();
  const health = new WorkerHealth(cfg, { now: () => t, metrics });
  return { health, metrics, advance: (ms: number) => (t += ms) };
}

const hb = (id: string, over: Partial<WorkerRecord> = {}): WorkerRecord => ({
  id,
  url: "http://127.0.0.1:1",
  models: ["m"],
  state: "ready",
  inFlight: 0,
  queueDepth: 0,
  capacity: 8,
  device: "sim",
  layerRanges: [],
  prefixes: [],
  version: "1",
  startedAt: 1,
  updatedAt: 1,
  ...over,
});

describe("WorkerHealth", () => {
  it("ejects after consecutive failures, for a growing interval, until a success puts it back", () => {
    const { health, metrics, advance } = setup();
    health.record("w", "failed", "bad_status");
    health.record("w", "failed", "bad_status");
    expect(health.isEjected("w")).toBe(false);
    health.record("w", "failed", "protocol");
    expect(health.isEjected("w")).toBe(true);
    expect(health.view("w").ejectedForMs).toBe(1_000);
    advance(1_000);
    // Back on probation: the next failure ejects again, for twice as long.
    expect(health.isEjected("w")).toBe(false);
    health.record("w", "failed", "bad_status");
    expect(health.view("w").ejectedForMs).toBe(2_000);
    advance(2_000);
    health.record("w", "failed", "bad_status");
    expect(health.view("w").ejectedForMs).toBe(4_000);
    advance(4_000);
    health.record("w", "failed", "bad_status");
    expect(health.view("w").ejectedForMs).toBe(4_000); // capped
    advance(4_000);
    health.record("w", "ok");
    expect(health.view("w")).toMatchObject({ ejected: false, probation: false, consecutiveFailures: 0 });
    // Recovery reset the interval: the next ejection is short again.
    for (let i = 0; i < 3; i++) health.record("w", "failed", "bad_status");
    expect(health.view("w").ejectedForMs).toBe(1_000);
    expect(metrics.ejections.get({ reason: "failing" })).toBe(5);
  });

  it("a success in between resets the count", () => {
    const { health } = setup();
    health.record("w", "failed", "bad_status");
    health.record("w", "failed", "bad_status");
    health.record("w", "ok");
    health.record("w", "failed", "bad_status");
    expect(health.isEjected("w")).toBe(false);
  });

  it("an unreachable or hung worker is ejected at once; load and the client's doing never count", () => {
    const { health, metrics } = setup();
    health.record("a", "failed", "connect");
    expect(health.isEjected("a")).toBe(true);
    health.record("b", "failed", "timeout");
    expect(health.isEjected("b")).toBe(true);
    expect(metrics.ejections.get({ reason: "unreachable" })).toBe(2);
    for (let i = 0; i < 10; i++) {
      health.record("c", "failed", "bad_status", 429);
      health.record("c", "neutral", "aborted");
    }
    expect(health.isEjected("c")).toBe(false);
    expect(health.ejectedCount()).toBe(2);
  });

  it("failures of requests sent before the ejection do not stack", () => {
    const { health, advance } = setup();
    health.record("w", "failed", "connect");
    for (let i = 0; i < 5; i++) health.record("w", "failed", "connect");
    expect(health.view("w").ejectedForMs).toBe(1_000);
    advance(1_000);
    health.record("w", "failed", "connect");
    expect(health.view("w").ejectedForMs).toBe(2_000);
  });

  it("a heartbeat showing recovery puts the worker back at once", () => {
    const { health } = setup();
    health.observeHeartbeats([hb("r", { startedAt: 1 }), hb("d", { state: "degraded" })]);
    health.record("r", "failed", "connect");
    health.record("d", "failed", "connect");
    health.observeHeartbeats([hb("r", { startedAt: 1 }), hb("d", { state: "degraded" })]);
    expect(health.isEjected("r")).toBe(true);
    expect(health.isEjected("d")).toBe(true);
    // r's process restarted; d's engine came back from its CPU fallback.
    health.observeHeartbeats([hb("r", { startedAt: 2 }), hb("d", { state: "ready" })]);
    expect(health.isEjected("r")).toBe(false);
    expect(health.isEjected("d")).toBe(false);
    expect(health.view("r").probation).toBe(false);
  });

  it("a worker that stopped heartbeating (frozen, dead) stays out after the interval until a fresh beat", () => {
    const { health, advance } = setup();
    health.observeHeartbeats([hb("f", { updatedAt: 10 })]);
    health.record("f", "failed", "timeout");
    advance(5_000);
    health.observeHeartbeats([hb("f", { updatedAt: 10 })]); // the same, stale record
    expect(health.isEjected("f")).toBe(true);
    expect(health.view("f")).toMatchObject({ ejectedForMs: 0, awaitingHeartbeat: true });
    health.observeHeartbeats([hb("f", { updatedAt: 5_010 })]);
    expect(health.isEjected("f")).toBe(false);
    expect(health.view("f").probation).toBe(true);
  });

  it("forgets workers that left the registry", () => {
    const { health } = setup();
    health.record("gone", "failed", "connect");
    health.observeHeartbeats([]);
    expect(health.isEjected("gone")).toBe(false);
    expect(health.ejectedCount()).toBe(0);
  });
});
