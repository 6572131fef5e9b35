// The admission benchmark in its CI size, as users run it: `switchyard bench
// admission --quick` must pass both directions (admission on keeps
// interactive TTFT p99 within 1.25× of idle under 500 batch streams; off, it
// is at least 10× — the load is real). About a minute.
import { spawn } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

describe("switchyard bench admission --quick", () => {
  it("passes: on ≤ 1.25× idle, off ≥ 10× idle, every interactive request answered", async () => {
    const child = spawn(process.execPath, [path.join(root, "apps/cli/bin/switchyard.mjs"), "bench", "admission", "--quick"], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (err += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
    if (code !== 0) console.error(`${out}\n${err.slice(-4000)}`);
    expect(out).toContain("| on | 500 streams |");
    expect(out).toContain("| off | 500 streams |");
    expect(out).toMatch(/PASS {2}admission on: interactive TTFT p99 under load ≤ 1\.25× idle/);
    expect(out).toMatch(/PASS {2}admission off: interactive TTFT p99 under load ≥ 10× idle/);
    expect(out).toContain("Admission: PASS (3/3)");
    expect(code).toBe(0);
  }, 300_000);
});
