// The sign test `bench router --against` prints beside its round counts.
import { describe, expect, it } from "vitest";
import { signTestP, winsOf } from "../../bench/lib/sign-test.ts";

describe("signTestP", () => {
  it("gives the two-sided binomial tail of a fair coin", () => {
    // 6 of 6: 2 × 1/64.
    expect(signTestP(6, 6)).toBeCloseTo(2 / 64, 12);
    expect(signTestP(0, 6)).toBeCloseTo(2 / 64, 12);
    // 5 of 6: 2 × (1 + 6)/64.
    expect(signTestP(5, 6)).toBeCloseTo(14 / 64, 12);
    // 4 of 6: 2 × (1 + 6 + 15)/64.
    expect(signTestP(4, 6)).toBeCloseTo(44 / 64, 12);
    // An even split (and anything nearer than a whole tail) is no evidence at all.
    expect(signTestP(3, 6)).toBe(1);
    expect(signTestP(2, 4)).toBe(1);
    // 9 of 10: 2 × (1 + 10)/1024.
    expect(signTestP(9, 10)).toBeCloseTo(22 / 1024, 12);
    // Symmetric.
    for (let n = 1; n <= 12; n++) for (let k = 0; k <= n; k++) expect(signTestP(k, n)).toBeCloseTo(signTestP(n - k, n), 12);
  });

  it("matches a direct enumeration of every outcome for small n", () => {
    for (let n = 1; n <= 10; n++) {
      for (let k = 0; k <= n; k++) {
        const dist = Math.abs(k - n / 2);
        let extreme = 0;
        for (let mask = 0; mask < 2 ** n; mask++) {
          let ones = 0;
          for (let b = 0; b < n; b++) ones += (mask >> b) & 1;
          if (Math.abs(ones - n / 2) >= dist - 1e-9) extreme++;
        }
        expect(signTestP(k, n), `${k} of ${n}`).toBeCloseTo(Math.min(1, extreme / 2 ** n), 12);
      }
    }
  });

  it("refuses counts that are not a split of n rounds", () => {
    expect(() => signTestP(7, 6)).toThrow(RangeError);
    expect(() => signTestP(-1, 6)).toThrow(RangeError);
    expect(() => signTestP(1.5, 6)).toThrow(RangeError);
    expect(signTestP(0, 0)).toBe(1);
  });

  it("prints the count with its p", () => {
    expect(winsOf(6, 6)).toBe("6 of 6 rounds (sign test p = 0.031)");
    expect(winsOf(5, 6)).toBe("5 of 6 rounds (sign test p = 0.22)");
    expect(winsOf(20, 20)).toBe("20 of 20 rounds (sign test p < 0.001)");
  });
});
