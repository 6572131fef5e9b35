// The routing benchmark in its CI size, as users run it: `switchyard bench
// routing --quick` must show latency-aware routing's p95 below round-robin's
// over three workers of different speeds, and resume completing every
// stream whose worker was killed mid-way (and without resume, one error
// event each).
import { spawn } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

describe("switchyard bench routing --quick", () => {
  it("latency-aware p95 below round-robin's; resume completes every killed stream", async () => {
    const child = spawn(process.execPath, [path.join(root, "apps/cli/bin/switchyard.mjs"), "bench", "routing", "--quick"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    if (code !== 0) console.error(`${out}\n${err.slice(-4000)}`);
    expect(out).toMatch(/\| latency-aware \|/);
    expect(out).toMatch(/\| round-robin \|/);
    expect(out).toContain("below round-robin's with every request ok: met");
    expect(out).toContain("without it each ends in one error event: met");
    expect(code).toBe(0);
  }, 300_000);
});
