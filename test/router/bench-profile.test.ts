// `switchyard bench router --profile DIR` in its CI size: a CPU profile of one
// router under the non-streaming closed loop is written and summarised, then
// the async resources a router creates per request are counted on a second
// run (bench/lib/async-census.mjs): one upstream request per request served,
// and some promises — the figure issue 14's async-layer work is tracked by.
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli-run.ts";

describe("switchyard bench router --profile", () => {
  it("writes a CPU profile, prints its top functions, then the async resources per request", async () => {
    const dir = mkdtempSync(path.join(tmpdir(), "sy-profile-"));
    try {
      const { code, out } = await runCli(["bench", "router", "--profile", dir, "--only", "non-streaming", "--quick"]);
      expect(code, out).toBe(0);
      const file = /CPU profile: (\S+\.cpuprofile)/.exec(out)?.[1];
      expect(file && existsSync(file), out).toBe(true);
      expect(out).toMatch(/\| self % \| function \|/);
      const perRequest = (resource: string) => Number(new RegExp(`\\| ${resource} \\| ([0-9.]+) \\|`).exec(out)?.[1]);
      expect(out).toMatch(/Async resources created per request \(\d+ requests, non-streaming closed loop/);
      // Each request served made exactly one upstream request: the census counts requests and resources alike.
      expect(perRequest("UNDICI_REQUEST")).toBeGreaterThan(0.95);
      expect(perRequest("UNDICI_REQUEST")).toBeLessThan(1.05);
      expect(perRequest("PROMISE")).toBeGreaterThan(1);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 240_000);
});
