// The registry benchmark in its CI size, as users run it: `switchyard bench
// registry --quick` must show a poll through the registry's sets at two
// round trips whatever else Redis holds, while a SCAN-based poll (the
// listing before) grows with the keyspace — and both list every worker.
import { describe, expect, it } from "vitest";
import { runCli } from "../helpers/cli-run.ts";

describe("switchyard bench registry --quick", () => {
  it("a poll through the sets stays at two round trips; a SCAN poll grows with the keyspace", async () => {
    const { code, out } = await runCli(["bench", "registry", "--quick"]);
    const rows = [...out.matchAll(/^\| (SCAN per poll \(before\)|registry sets \(now\)) \| (\d+) \| (\d+) \| ([\d.]+) \|/gm)].map((m) => ({ listing: m[1]!, otherKeys: Number(m[2]), listed: Number(m[3]), roundTrips: Number(m[4]) }));
    expect(rows).toHaveLength(4);
    for (const r of rows) expect(r.listed).toBe(50);
    const at = (listing: string, keys: number) => rows.find((r) => r.listing.startsWith(listing) && r.otherKeys === keys)!.roundTrips;
    expect(at("registry sets", 0)).toBe(2);
    expect(at("registry sets", 100_000)).toBe(2);
    // SCAN COUNT 1000 over 100k other keys: a hundred round trips per poll.
    expect(at("SCAN", 100_000)).toBeGreaterThanOrEqual(100);
    expect(out).toContain("at every keyspace size: met");
    expect(code).toBe(0);
  }, 300_000);
});
