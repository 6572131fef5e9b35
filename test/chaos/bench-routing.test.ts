// The routing benchmark in its CI size, as users run it: `switchyard bench
// routing --quick` must show latency-aware routing's p95 below round-robin's
// over three workers of different speeds, and resume completing every
// stream whose worker was killed mid-way (and without resume, one error
// event each).
import { describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli-run.ts";

describe("switchyard bench routing --quick", () => {
  it("latency-aware p95 below round-robin's; resume completes every killed stream", async () => {
    const { code, out } = await runCli(["bench", "routing", "--quick"]);
    expect(out).toMatch(/\| latency-aware \|/);
    expect(out).toMatch(/\| round-robin \|/);
    expect(out).toContain("below round-robin's with every request ok: met");
    expect(out).toContain("without it each ends in one error event: met");
    expect(code).toBe(0);
  }, 300_000);
});
