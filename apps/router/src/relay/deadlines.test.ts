// The phase timer carries the request's total deadline too: whichever comes
// first ends the attempt, and progress (refresh) never moves the total.
import { describe, expect, it } from "vitest";
import { type DeadlineExceeded, PhaseTimer } from "./deadlines.ts";

function expiry(totalMs: number, run: (t: PhaseTimer) => void): Promise<{ err: DeadlineExceeded; afterMs: number }> {
  const t0 = performance.now();
  return new Promise((resolve) => {
    const t = new PhaseTimer((err) => resolve({ err, afterMs: performance.now() - t0 }), t0 + totalMs, totalMs);
    run(t);
  });
}

describe("PhaseTimer", () => {
  it.each([
    { when: "the phase when its limit comes before the total", totalMs: 5_000, phase: "headers" as const, ms: 30, ends: "headers", message: "headers deadline of 30 ms exceeded", after: 29 },
    { when: "the total when less of it is left than the phase's limit", totalMs: 60, phase: "first_token" as const, ms: 5_000, ends: "total", message: "total deadline of 60 ms exceeded", after: 59 },
  ])("ends with $when", async ({ totalMs, phase, ms, ends, message, after }) => {
    const { err, afterMs } = await expiry(totalMs, (t) => t.arm(phase, ms));
    expect(err.phase).toBe(ends);
    expect(err.message).toBe(message);
    expect(afterMs).toBeGreaterThanOrEqual(after);
    expect(afterMs).toBeLessThan(1_000);
  });

  it("refresh restarts the phase but never passes the total", async () => {
    let ticks: NodeJS.Timeout | undefined;
    const { err, afterMs } = await expiry(150, (t) => {
      t.arm("idle", 50);
      // Progress every 20 ms: the idle limit alone would never pass.
      ticks = setInterval(() => t.refresh(), 20);
    });
    clearInterval(ticks);
    expect(err.phase).toBe("total");
    expect(afterMs).toBeGreaterThanOrEqual(149);
    expect(afterMs).toBeLessThan(1_000);
  });

  it("armWhile: armed again while the backend is alive, then ends as the answer's limit", async () => {
    let asked = 0;
    const { err, afterMs } = await expiry(5_000, (t) => t.armWhile("headers", 30, 100, () => (asked++, true)));
    expect(err.phase).toBe("answer");
    expect(err.message).toBe("answer deadline of 100 ms exceeded");
    expect(afterMs).toBeGreaterThanOrEqual(99);
    expect(afterMs).toBeLessThan(1_000);
    expect(asked).toBeGreaterThanOrEqual(3);
  });

  it("armWhile: a backend no longer alive ends the phase at its step", async () => {
    let alive = true;
    setTimeout(() => (alive = false), 45);
    const { err, afterMs } = await expiry(5_000, (t) => t.armWhile("headers", 30, 1_000, () => alive));
    expect(err.message).toBe("headers deadline of 30 ms exceeded");
    expect(afterMs).toBeGreaterThanOrEqual(59);
    expect(afterMs).toBeLessThan(500);
  });

  it("armWhile never passes the total deadline", async () => {
    const { err } = await expiry(50, (t) => t.armWhile("headers", 30, 1_000, () => true));
    expect(err.phase).toBe("total");
  });

  it("clear stops it", async () => {
    let fired = false;
    const t = new PhaseTimer(() => (fired = true), performance.now() + 40, 40);
    t.arm("headers", 20);
    t.clear();
    await new Promise((r) => setTimeout(r, 80));
    expect(fired).toBe(false);
  });
});
