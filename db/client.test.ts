import { describe, expect, it } from "vitest";
import { reconnectDelayS } from "./client.ts";

describe("reconnectDelayS (how long a pooled connection waits before trying Postgres again)", () => {
  it("starts at 25–50 ms, doubles, and never passes 2 s however long Postgres was away", () => {
    for (let i = 0; i < 200; i++) {
      const first = reconnectDelayS(0);
      expect(first).toBeGreaterThanOrEqual(0.025);
      expect(first).toBeLessThanOrEqual(0.05);
      const fourth = reconnectDelayS(3);
      expect(fourth).toBeGreaterThanOrEqual(0.2);
      expect(fourth).toBeLessThanOrEqual(0.4);
      // postgres.js' own: (0.5–1) × min(3^n / 100, 20) s — 10–20 s after 7 failed attempts.
      expect(reconnectDelayS(7)).toBeLessThanOrEqual(2);
      expect(reconnectDelayS(1_000)).toBeLessThanOrEqual(2);
      expect(reconnectDelayS(1_000)).toBeGreaterThanOrEqual(1);
    }
  });
});
