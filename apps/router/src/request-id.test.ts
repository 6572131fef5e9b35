// Request ids: unique, unguessable past their millisecond, and ordered by the
// time they were minted — the ledger's primary key grows at its right edge.
import { describe, expect, it } from "vitest";
import { newRequestId } from "./middleware.ts";

describe("newRequestId", () => {
  it("is req_ and 32 hex digits, the first 12 the minting millisecond", () => {
    const now = Date.UTC(2026, 11, 5, 23, 59, 59, 999);
    const id = newRequestId(now);
    expect(id).toMatch(/^req_[0-9a-f]{32}$/);
    expect(parseInt(id.slice(4, 16), 16)).toBe(now);
    // Today's clock as well, not only a given instant.
    const t0 = Date.now();
    const live = parseInt(newRequestId().slice(4, 16), 16);
    expect(live).toBeGreaterThanOrEqual(t0);
    expect(live).toBeLessThanOrEqual(Date.now());
  });

  it("sorts by minting time, and ids of one millisecond differ in their 80 random bits", () => {
    const ids: string[] = [];
    // Through several refills of the random pool (256 ids per fill).
    for (let ms = 1_700_000_000_000; ms < 1_700_000_000_000 + 1000; ms++) ids.push(newRequestId(ms));
    expect([...ids].sort()).toEqual(ids);
    const same = Array.from({ length: 2000 }, () => newRequestId(1_700_000_000_000));
    expect(new Set(same).size).toBe(same.length);
    // The random part is not a counter: its bits look random (about half set, every hex digit seen in every position).
    const tails = same.map((id) => id.slice(16));
    for (let pos = 0; pos < 20; pos++) expect(new Set(tails.map((t) => t[pos])).size).toBe(16);
    const ones = tails.join("").split("").reduce((n, h) => n + [...parseInt(h, 16).toString(2)].filter((b) => b === "1").length, 0);
    expect(ones / (tails.length * 80)).toBeGreaterThan(0.48);
    expect(ones / (tails.length * 80)).toBeLessThan(0.52);
  });
});
