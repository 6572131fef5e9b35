import { describe, expect, it } from "vitest";
import { budgetDay, isValidTimeZone } from "./day.ts";

describe("budgetDay", () => {
  it("is the calendar date in the tenant's zone", () => {
    const at = new Date("2026-11-30T16:00:00Z");
    expect(budgetDay(at)).toBe("2026-11-30");
    expect(budgetDay(at, "UTC")).toBe("2026-11-30");
    expect(budgetDay(at, "Asia/Tokyo")).toBe("2026-12-01"); // 01:00 next day
    expect(budgetDay(new Date("2026-12-01T03:00:00Z"), "America/Los_Angeles")).toBe("2026-11-30");
    expect(budgetDay(at.getTime(), "Pacific/Kiritimati")).toBe("2026-12-01"); // UTC+14
  });

  it("rolls over exactly at the zone's midnight, DST included", () => {
    // Paris is UTC+1 in winter: midnight is 23:00Z the day before.
    expect(budgetDay(new Date("2026-11-30T22:59:59.999Z"), "Europe/Paris")).toBe("2026-11-30");
    expect(budgetDay(new Date("2026-11-30T23:00:00Z"), "Europe/Paris")).toBe("2026-12-01");
    // UTC+2 in summer.
    expect(budgetDay(new Date("2026-07-14T21:59:59Z"), "Europe/Paris")).toBe("2026-07-14");
    expect(budgetDay(new Date("2026-07-14T22:00:00Z"), "Europe/Paris")).toBe("2026-07-15");
  });

  it("the UTC fast path agrees with the calendar lookup", () => {
    for (let t = Date.UTC(2026, 0, 1) - 3; t < Date.UTC(2027, 0, 1); t += 3_600_000 * 7 + 1) {
      expect(budgetDay(t, "UTC")).toBe(budgetDay(t, "Etc/UTC"));
    }
  });

  it("rejects unknown zones", () => {
    expect(() => budgetDay(0, "Mars/Olympus")).toThrow(RangeError);
    expect(isValidTimeZone("Mars/Olympus")).toBe(false);
    expect(isValidTimeZone("Europe/Paris")).toBe(true);
  });
});
