import { describe, expect, it } from "vitest";
import {
  centsToMicro,
  formatMicroAsCents,
  formatMicroAsUsd,
  parseMicro,
  tokensCostMicro,
  usageCostMicro,
  usdToMicro,
  worstCaseMicro,
} from "./money.ts";

describe("money", () => {
  it("cents → micro-cents", () => {
    expect(centsToMicro(0)).toBe(0n);
    expect(centsToMicro(150)).toBe(150_000_000n);
    expect(centsToMicro(9_000_000_000_000n)).toBe(9_000_000_000_000_000_000n);
    expect(() => centsToMicro(1.5)).toThrow(RangeError);
    expect(() => centsToMicro(Number.MAX_SAFE_INTEGER + 1)).toThrow(RangeError);
  });

  /** Each USD input converts to exactly these micro-cents. */
  const converts = (cases: Array<[string, bigint]>) => {
    for (const [usd, micro] of cases) expect(usdToMicro(usd), usd).toBe(micro);
  };

  it("USD decimal strings convert exactly", () => {
    converts([
      ["0.000123", 12_300n],
      ["1", 100_000_000n],
      ["0", 0n],
      ["-0", 0n],
      ["12.5", 1_250_000_000n],
      [".5", 50_000_000n],
      ["3.", 300_000_000n],
      ["0.00000001", 1n], // the smallest unit
      ["1.5e-7", 15n],
      ["2E3", 200_000_000_000n],
      [" 0.1 ", 10_000_000n],
      // Well past 2^53 micro-cents: still exact.
      ["123456789012.34567891", 12_345_678_901_234_567_891n],
    ]);
  });

  it("digits beyond micro-cent precision round half-up", () => {
    converts([
      ["0.000000005", 1n],
      ["0.0000000049999", 0n],
      ["0.000000015", 2n],
      ["0.123456784999", 12_345_678n],
      ["0.123456785", 12_345_679n],
      ["5e-9", 1n],
    ]);
  });

  it("a JS number is read by its shortest decimal, never by float arithmetic", () => {
    // 0.1 + 0.2 is 0.30000000000000004 as a float; its decimal rounds to 30,000,000.
    expect(usdToMicro(0.1 + 0.2)).toBe(30_000_000n);
    expect(usdToMicro(0.000123)).toBe(12_300n);
    expect(usdToMicro(1.5e-7)).toBe(15n);
    expect(() => usdToMicro(Number.NaN)).toThrow(RangeError);
    expect(() => usdToMicro(Number.POSITIVE_INFINITY)).toThrow(RangeError);
  });

  it("rejects what is not a non-negative decimal", () => {
    for (const bad of ["", ".", "abc", "1,5", "0x10", "1e", "-0.01", "1.2.3", "NaN"]) {
      expect(() => usdToMicro(bad), bad).toThrow(RangeError);
    }
  });

  it("token cost rounds up to the next micro-cent", () => {
    expect(tokensCostMicro(0, 300_000_000n)).toBe(0n);
    expect(tokensCostMicro(1_000_000, 300_000_000n)).toBe(300_000_000n);
    expect(tokensCostMicro(1, 300_000_000n)).toBe(300n);
    expect(tokensCostMicro(1, 1n)).toBe(1n); // 10⁻⁶ micro-cent still costs 1
    expect(tokensCostMicro(3, 333_333n)).toBe(1n); // 0.999999 → 1
    expect(tokensCostMicro(7, 142_857n)).toBe(1n); // 0.999999 → 1
    expect(tokensCostMicro(2n ** 40n, 10n ** 12n)).toBe((2n ** 40n * 10n ** 12n) / 1_000_000n);
    expect(() => tokensCostMicro(-1, 1n)).toThrow(RangeError);
    expect(() => tokensCostMicro(1.5, 1n)).toThrow(RangeError);
  });

  it("usage cost: cached tokens at their own price, one ceiling over the sum", () => {
    const price = { inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n, cachedInputMicroPerMtok: 30_000_000n };
    // 1000 fresh × 300 + 500 cached × 30 + 200 out × 1500 = 300,000 + 15,000 + 300,000
    expect(usageCostMicro({ promptTokens: 1500, completionTokens: 200, cachedTokens: 500 }, price)).toBe(615_000n);
    // No cached price: cached tokens cost the input price, never nothing.
    expect(usageCostMicro({ promptTokens: 1500, completionTokens: 0, cachedTokens: 500 }, { ...price, cachedInputMicroPerMtok: null })).toBe(450_000n);
    // Three parts of 10⁻⁶ micro-cent each round once, to 1, not three times to 3.
    const tiny = { inputMicroPerMtok: 1n, outputMicroPerMtok: 1n, cachedInputMicroPerMtok: 1n };
    expect(usageCostMicro({ promptTokens: 2, completionTokens: 1, cachedTokens: 1 }, tiny)).toBe(1n);
    expect(() => usageCostMicro({ promptTokens: 1, completionTokens: 0, cachedTokens: 2 }, price)).toThrow(RangeError);
  });

  it("worst case: all input plus the full completion allowance", () => {
    const price = { inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n };
    expect(worstCaseMicro(1000, 4096, price)).toBe(300_000n + 6_144_000n);
  });

  it("formats exactly and parses integer text", () => {
    expect(formatMicroAsCents(1_234_567n)).toBe("1.234567");
    expect(formatMicroAsCents(5_000_000n)).toBe("5");
    expect(formatMicroAsUsd(12_300n)).toBe("0.000123");
    expect(formatMicroAsUsd(-1n)).toBe("-0.00000001");
    expect(formatMicroAsUsd(12_345_678_901_234_567_891n)).toBe("123456789012.34567891");
    expect(parseMicro("9223372036854775807")).toBe(9_223_372_036_854_775_807n);
    expect(parseMicro(42)).toBe(42n);
    expect(() => parseMicro("1.5")).toThrow(RangeError);
  });
});
