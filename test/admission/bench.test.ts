// The admission benchmark in its CI size, as users run it: `switchyard bench
// admission --quick` must pass both directions (admission on keeps
// interactive TTFT p99 within 1.25× of idle under 500 batch streams; off, it
// is at least 10× — the load is real). About a minute.
import { describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli-run.ts";

describe("switchyard bench admission --quick", () => {
  it("passes: on ≤ 1.25× idle, off ≥ 10× idle, every interactive request answered", async () => {
    const { code, out } = await runCli(["bench", "admission", "--quick"]);
    expect(out).toContain("| on | 500 streams |");
    expect(out).toContain("| off | 500 streams |");
    expect(out).toMatch(/PASS {2}admission on: interactive TTFT p99 under load ≤ 1\.25× idle/);
    expect(out).toMatch(/PASS {2}admission off: interactive TTFT p99 under load ≥ 10× idle/);
    expect(out).toContain("Admission: PASS (3/3)");
    expect(code).toBe(0);
  }, 300_000);
});
