import { describe, expect, it } from "vitest";
import {
  centsToMicro,
  formatMicroAsCents,
  formatMicroAsUsd,
  heldImageTokens,
  parseMicro,
  priceForPrompt,
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

  it("usage cost: 5-minute cache writes at the cache-write price, 1-hour ones at theirs (2× input unset)", () => {
    // Anthropic Sonnet: input $3, cache read $0.30, 5-minute write $3.75, 1-hour write $6, output $15 per Mtok.
    const price = { inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n, cachedInputMicroPerMtok: 30_000_000n, cacheWriteMicroPerMtok: 375_000_000n };
    const usage = { promptTokens: 310, completionTokens: 50, cachedTokens: 0, cacheWriteTokens: 300, cacheWrite1hTokens: 200 };
    // Micro-cents per token: input 300, 5-minute write 375, 1-hour write 600 (2× input), output 1500:
    // 10 × 300 + 100 × 375 + 200 × 600 + 50 × 1500 = 3,000 + 37,500 + 120,000 + 75,000.
    expect(usageCostMicro(usage, price)).toBe(235_500n);
    // Its own 1-hour price when set: 200 × 500 instead.
    expect(usageCostMicro(usage, { ...price, cacheWrite1hMicroPerMtok: 500_000_000n })).toBe(215_500n);
    // No 1-hour writes: all 300 at the 5-minute price, as before.
    expect(usageCostMicro({ ...usage, cacheWrite1hTokens: 0 }, price)).toBe(3_000n + 112_500n + 75_000n);
    // One ceiling over the sum: one 1-hour token at 2 × 300.000001 micro-cents.
    expect(usageCostMicro({ promptTokens: 1, completionTokens: 0, cacheWriteTokens: 1, cacheWrite1hTokens: 1 }, { inputMicroPerMtok: 300_000_001n, outputMicroPerMtok: 0n })).toBe(601n);
    // More 1-hour writes than writes is refused, not priced.
    expect(() => usageCostMicro({ promptTokens: 10, completionTokens: 0, cacheWriteTokens: 2, cacheWrite1hTokens: 3 }, price)).toThrow(RangeError);
  });

  it("usage cost: audio prompt tokens at the audio price (input unset), the rest of the prompt as before", () => {
    // gpt-4o-audio-preview: text input $2.50, audio input $40, cached $1.25, output $10 per Mtok.
    const price = { inputMicroPerMtok: 250_000_000n, outputMicroPerMtok: 1_000_000_000n, cachedInputMicroPerMtok: 125_000_000n, audioInputMicroPerMtok: 4_000_000_000n };
    // 1,000 prompt tokens: 300 of them audio, 200 cached text, 500 fresh text; 100 output.
    // Micro-cents per token: 500 × 250 + 200 × 125 + 300 × 4,000 + 100 × 1,000.
    const usage = { promptTokens: 1_000, completionTokens: 100, cachedTokens: 200, audioTokens: 300 };
    expect(usageCostMicro(usage, price)).toBe(125_000n + 25_000n + 1_200_000n + 100_000n);
    // Without an audio price on the row: audio tokens cost the input price, as before.
    expect(usageCostMicro(usage, { ...price, audioInputMicroPerMtok: null })).toBe(usageCostMicro({ ...usage, audioTokens: 0 }, price));
    expect(usageCostMicro(usage, { ...price, audioInputMicroPerMtok: null })).toBe(800n * 250n + 200n * 125n + 100_000n);
    // Beside cache writes (Anthropic-shaped): each token once, at its own price.
    const writes = { ...price, cacheWriteMicroPerMtok: 300_000_000n };
    expect(usageCostMicro({ promptTokens: 1_000, completionTokens: 0, cachedTokens: 100, cacheWriteTokens: 200, audioTokens: 300 }, writes)).toBe(400n * 250n + 100n * 125n + 200n * 300n + 300n * 4_000n);
    // One ceiling over the sum: one audio token at 1.000001 micro-cents and one text token at 0.000001.
    expect(usageCostMicro({ promptTokens: 2, completionTokens: 0, audioTokens: 1 }, { inputMicroPerMtok: 1n, outputMicroPerMtok: 0n, audioInputMicroPerMtok: 1_000_001n })).toBe(2n);
    // More audio than the prompt leaves beside its cached and written tokens is refused, not priced.
    expect(() => usageCostMicro({ promptTokens: 10, completionTokens: 0, cachedTokens: 5, audioTokens: 6 }, price)).toThrow(RangeError);
    expect(() => usageCostMicro({ promptTokens: 10, completionTokens: 0, audioTokens: -1 }, price)).toThrow(RangeError);
  });

  it("worst case: every prompt token at its dearest price plus the full completion allowance; a 1-hour cache write (2× input unset) only where the request asks for one", () => {
    const price = { inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n };
    expect(worstCaseMicro(1000, 4096, price)).toBe(300_000n + 6_144_000n);
    expect(worstCaseMicro(1000, 4096, price, { hourCache: true })).toBe(600_000n + 6_144_000n);
    // A 1-hour price set at (or under) the input price: input.
    expect(worstCaseMicro(1000, 4096, { ...price, cacheWrite1hMicroPerMtok: 300_000_000n }, { hourCache: true })).toBe(300_000n + 6_144_000n);
    // The dearer of the two write prices.
    expect(worstCaseMicro(1000, 0, { ...price, cacheWriteMicroPerMtok: 375_000_000n, cacheWrite1hMicroPerMtok: 350_000_000n }, { hourCache: true })).toBe(375_000n);
    expect(worstCaseMicro(1000, 0, { ...price, cacheWriteMicroPerMtok: 375_000_000n }, { hourCache: true })).toBe(600_000n);
    expect(worstCaseMicro(1000, 0, { ...price, cacheWriteMicroPerMtok: 375_000_000n })).toBe(375_000n);
  });

  it("worst case with media: image tokens × the row's multiplier (thousandths, rounded up), audio at the audio price where dearer", () => {
    const price = { inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 2_000_000n };
    // 1 micro-cent a prompt token: 100 text + 1,000 image + 50 audio tokens, 10 output tokens at 2.
    expect(worstCaseMicro(1_150, 10, price, { imageTokens: 1_000, audioTokens: 50 })).toBe(1_150n + 20n);
    // gpt-4o-mini's 33.336×: 1,000 image tokens count 33,336.
    expect(worstCaseMicro(1_150, 10, { ...price, imageTokenMultiplierPermille: 33_336 }, { imageTokens: 1_000, audioTokens: 50 })).toBe(100n + 33_336n + 50n + 20n);
    // Rounded up per token: 1 image token at 1.001× is 2 tokens.
    expect(worstCaseMicro(1, 0, { ...price, imageTokenMultiplierPermille: 1_001 }, { imageTokens: 1 })).toBe(2n);
    // Audio at 16× input (gpt-4o-audio-preview): only the audio tokens.
    expect(worstCaseMicro(1_150, 10, { ...price, audioInputMicroPerMtok: 16_000_000n }, { imageTokens: 1_000, audioTokens: 50 })).toBe(1_100n + 800n + 20n);
    // An audio price under the dearest prompt price (a one-hour cache write) is held at that one: audio can be cached too.
    expect(worstCaseMicro(100, 0, { ...price, audioInputMicroPerMtok: 500_000n }, { audioTokens: 100, hourCache: true })).toBe(200n);
    // Without media the multiplier and the audio price change nothing.
    expect(worstCaseMicro(1_150, 10, { ...price, imageTokenMultiplierPermille: 33_336, audioInputMicroPerMtok: 16_000_000n })).toBe(1_150n + 20n);
    expect(() => worstCaseMicro(10, 0, price, { imageTokens: 8, audioTokens: 3 })).toThrow(RangeError);
  });

  it("worst case with an image multiplier: the images' OpenAI tile tokens × it, not the cross-provider bound × it; never under that bound", () => {
    const price = { inputMicroPerMtok: 1_000_000n, outputMicroPerMtok: 0n };
    const mini = { ...price, imageTokenMultiplierPermille: 33_336 };
    // An image of unknown size: 6,192 tokens across providers, at most 1,445 in OpenAI's tiles (8 of them).
    const unknown = { imageTokens: 6_192, imageTileTokens: 1_445 };
    // 100 text tokens + 1,445 × 33.336 = 48,170.52 → 48,171, not 6,192 × 33.336 = 206,417.
    expect(worstCaseMicro(6_292, 0, mini, unknown)).toBe(100n + 48_171n);
    expect(heldImageTokens(mini, unknown)).toBe(48_171n);
    // A small image (one tile, 255; 1,120 across providers, Gemini 3's): 8,501, not 37,337.
    expect(heldImageTokens(mini, { imageTokens: 1_120, imageTileTokens: 255 })).toBe(8_501n);
    // Two images together: one ceiling over their sum.
    expect(heldImageTokens(mini, { imageTokens: 6_192 + 1_120, imageTileTokens: 1_445 + 255 })).toBe(56_672n);
    // Without a multiplier the tiles change nothing: the cross-provider bound.
    expect(worstCaseMicro(6_292, 0, price, unknown)).toBe(6_292n);
    expect(heldImageTokens(price, unknown)).toBe(6_192n);
    // A multiplier whose product falls under the cross-provider bound holds that bound: a row with a multiplier never holds less than one without.
    expect(heldImageTokens({ ...price, imageTokenMultiplierPermille: 2_000 }, unknown)).toBe(6_192n);
    expect(heldImageTokens({ ...price, imageTokenMultiplierPermille: 500 }, { imageTokens: 1_120, imageTileTokens: 255 })).toBe(1_120n);
    // Tiles left unset: the multiplier multiplies the whole image share (never fewer tokens).
    expect(heldImageTokens(mini, { imageTokens: 1_000 })).toBe(33_336n);
    expect(heldImageTokens(mini, {})).toBe(0n);
    // More tiles than image tokens, or fewer than none, is a caller's error, not a hold.
    expect(() => heldImageTokens(mini, { imageTokens: 1_000, imageTileTokens: 1_001 })).toThrow(RangeError);
    expect(() => worstCaseMicro(2_000, 0, mini, { imageTokens: 1_000, imageTileTokens: -1 })).toThrow(RangeError);
    expect(() => heldImageTokens({ ...price, imageTokenMultiplierPermille: 0 }, unknown)).toThrow(RangeError);
  });

  it("gpt-4o-mini's 33.336× on OpenAI's tile tokens covers what it bills for any image: 2,833 + 5,667 a tile, 2,833 for detail low", () => {
    const mini = { inputMicroPerMtok: 1n, outputMicroPerMtok: 0n, imageTokenMultiplierPermille: 33_336 };
    // The tile formula's counts, 85 + 170 × tiles, for 1 to 8 tiles (8: the most, once fitted to 2,048 px with its shortest side at 768).
    for (let tiles = 1; tiles <= 8; tiles++) {
      const held = heldImageTokens(mini, { imageTokens: 85 + 170 * tiles, imageTileTokens: 85 + 170 * tiles });
      expect(held).toBeGreaterThanOrEqual(BigInt(2_833 + 5_667 * tiles));
      // Tight: within one token a tile (and the base) of the mini's own count.
      expect(held - BigInt(2_833 + 5_667 * tiles)).toBeLessThanOrEqual(BigInt(tiles + 1));
    }
    // detail: "low" is the base alone (85 on gpt-4o, 2,833 on mini), below any image's tiles: even 85 alone is covered.
    expect(heldImageTokens(mini, { imageTokens: 85, imageTileTokens: 85 })).toBeGreaterThanOrEqual(2_833n);
    expect(heldImageTokens(mini, { imageTokens: 1_445, imageTileTokens: 1_445 })).toBe(48_171n);
    expect(2_833 + 5_667 * 8).toBe(48_169);
  });

  describe("long-context tier (Anthropic's 1M-token context: over 200,000 prompt tokens, the whole request at premium rates)", () => {
    // Sonnet 4.6: input $3, cache read $0.30, 5-minute write $3.75, output $15; over 200k, input $6 and output $22.50.
    const sonnet = {
      inputMicroPerMtok: 300_000_000n,
      outputMicroPerMtok: 1_500_000_000n,
      cachedInputMicroPerMtok: 30_000_000n,
      cacheWriteMicroPerMtok: 375_000_000n,
      longContext: { thresholdTokens: 200_000, inputMicroPerMtok: 600_000_000n, outputMicroPerMtok: 2_250_000_000n },
    };
    /** A prompt of `prompt` tokens: 100,000 cache reads, 50,000 cache writes (10,000 of them for an hour), the rest fresh; 1,000 output tokens. */
    const usage = (prompt: number) => ({ promptTokens: prompt, completionTokens: 1_000, cachedTokens: 100_000, cacheWriteTokens: 50_000, cacheWrite1hTokens: 10_000 });

    it("at the threshold (not over): every token at the ordinary rates", () => {
      // Micro-cents a token: input 300, cache read 30, 5-minute write 375, 1-hour write 600 (2× input), output 1,500.
      expect(usageCostMicro(usage(200_000), sonnet)).toBe(50_000n * 300n + 100_000n * 30n + 40_000n * 375n + 10_000n * 600n + 1_000n * 1_500n);
      expect(priceForPrompt(sonnet, 200_000)).toBe(sonnet);
      expect(priceForPrompt(sonnet, 1)).toBe(sonnet);
    });

    it("one token over: all of the request's tokens at the tier — input, output, cache reads and writes (derived from the long input)", () => {
      // Long: input 600, cache read 30 × 2 = 60, 5-minute write 375 × 2 = 750, 1-hour write 2 × 600 = 1,200, output 2,250.
      expect(usageCostMicro(usage(200_001), sonnet)).toBe(50_001n * 600n + 100_000n * 60n + 40_000n * 750n + 10_000n * 1_200n + 1_000n * 2_250n);
      expect(priceForPrompt(sonnet, 200_001)).toEqual({
        inputMicroPerMtok: 600_000_000n,
        outputMicroPerMtok: 2_250_000_000n,
        cachedInputMicroPerMtok: 60_000_000n,
        cacheWriteMicroPerMtok: 750_000_000n,
        cacheWrite1hMicroPerMtok: null, // 2× the long input, as unset always is
        audioInputMicroPerMtok: null,
        imageTokenMultiplierPermille: null,
        longContext: null,
      });
      // Cache reads and writes count toward the threshold: 1 fresh token beside 200,000 cached ones is over it.
      expect(usageCostMicro({ promptTokens: 200_001, completionTokens: 0, cachedTokens: 200_000 }, sonnet)).toBe(600n + 200_000n * 60n);
      expect(usageCostMicro({ promptTokens: 200_000, completionTokens: 0, cachedTokens: 200_000 }, sonnet)).toBe(200_000n * 30n);
      // Without a tier nothing changes past 200k.
      expect(usageCostMicro(usage(200_001), { ...sonnet, longContext: null })).toBe(50_001n * 300n + 100_000n * 30n + 40_000n * 375n + 10_000n * 600n + 1_000n * 1_500n);
    });

    it("a tier's own cache rates are used as set; unset ones are the ordinary ones × long input ÷ input, rounded up to the micro-cent per Mtok", () => {
      const own = { ...sonnet, cacheWrite1hMicroPerMtok: 600_000_000n, longContext: { ...sonnet.longContext, cachedInputMicroPerMtok: 61_000_000n, cacheWriteMicroPerMtok: 751_000_000n, cacheWrite1hMicroPerMtok: 1_201_000_000n } };
      expect(priceForPrompt(own, 200_001)).toMatchObject({ cachedInputMicroPerMtok: 61_000_000n, cacheWriteMicroPerMtok: 751_000_000n, cacheWrite1hMicroPerMtok: 1_201_000_000n });
      // 1.5×: 30,000,001 × 1.5 = 45,000,001.5 → 45,000,002; 375,000,001 → 562,500,002; 600,000,001 → 900,000,002. Never rounded down.
      const odd = {
        inputMicroPerMtok: 300_000_000n,
        outputMicroPerMtok: 0n,
        cachedInputMicroPerMtok: 30_000_001n,
        cacheWriteMicroPerMtok: 375_000_001n,
        cacheWrite1hMicroPerMtok: 600_000_001n,
        longContext: { thresholdTokens: 10, inputMicroPerMtok: 450_000_000n, outputMicroPerMtok: 0n },
      };
      expect(priceForPrompt(odd, 11)).toMatchObject({ cachedInputMicroPerMtok: 45_000_002n, cacheWriteMicroPerMtok: 562_500_002n, cacheWrite1hMicroPerMtok: 900_000_002n });
      // Exact ratios stay exact: 30,000,000 × 1.5.
      expect(priceForPrompt({ ...odd, cachedInputMicroPerMtok: 30_000_000n }, 11).cachedInputMicroPerMtok).toBe(45_000_000n);
      // No ordinary cache rates: the defaults on the long input (cache read and 5-minute write as it, 1-hour write 2× it).
      const bare = { inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 0n, longContext: odd.longContext };
      expect(usageCostMicro({ promptTokens: 30, completionTokens: 0, cachedTokens: 10, cacheWriteTokens: 10, cacheWrite1hTokens: 5 }, bare)).toBe(10n * 450n + 10n * 450n + 5n * 450n + 5n * 900n);
      // A free ordinary input has no ratio: the dearer of the ordinary rate and the default on the long input.
      const free = { inputMicroPerMtok: 0n, outputMicroPerMtok: 0n, cachedInputMicroPerMtok: 500_000_000n, cacheWriteMicroPerMtok: 100n, longContext: odd.longContext };
      expect(priceForPrompt(free, 11)).toMatchObject({ cachedInputMicroPerMtok: 500_000_000n, cacheWriteMicroPerMtok: 450_000_000n, cacheWrite1hMicroPerMtok: null });
    });

    it("audio set keeps its rate, unset it follows the (long) input; an image multiplier is a count, unchanged", () => {
      const media = { ...sonnet, audioInputMicroPerMtok: 4_000_000_000n, imageTokenMultiplierPermille: 33_336 };
      expect(priceForPrompt(media, 200_001)).toMatchObject({ audioInputMicroPerMtok: 4_000_000_000n, imageTokenMultiplierPermille: 33_336 });
      expect(usageCostMicro({ promptTokens: 200_001, completionTokens: 0, audioTokens: 1 }, sonnet)).toBe(200_001n * 600n);
    });

    it("refuses a threshold that is not a positive integer of tokens", () => {
      for (const thresholdTokens of [0, -1, 1.5, Number.NaN]) {
        expect(() => usageCostMicro(usage(200_001), { ...sonnet, longContext: { ...sonnet.longContext, thresholdTokens } }), String(thresholdTokens)).toThrow(RangeError);
      }
    });

    it("the hold: a prompt bound over the threshold is held at the tier's rates; at it, at the ordinary ones", () => {
      // Dearest prompt price: the 5-minute write (375; 750 long); output 1,500 (2,250 long).
      expect(worstCaseMicro(200_000, 1_000, sonnet)).toBe(200_000n * 375n + 1_000n * 1_500n);
      expect(worstCaseMicro(200_001, 1_000, sonnet)).toBe(200_001n * 750n + 1_000n * 2_250n);
      // A one-hour cache asked for: 2× the long input.
      expect(worstCaseMicro(200_001, 0, sonnet, { hourCache: true })).toBe(200_001n * 1_200n);
    });

    it("the hold is never under the settle, for any usage within its bound, on either side of the threshold", () => {
      // Opus 4.6 (5/25, long 10/37.50), and a row whose tier is (wrongly) cheaper than its ordinary rates: a bound over the threshold may settle under it.
      const opus = { inputMicroPerMtok: 500_000_000n, outputMicroPerMtok: 2_500_000_000n, cachedInputMicroPerMtok: 50_000_001n, cacheWriteMicroPerMtok: 625_000_000n, longContext: { thresholdTokens: 200_000, inputMicroPerMtok: 1_000_000_000n, outputMicroPerMtok: 3_750_000_000n } };
      const cheaper = { ...opus, longContext: { thresholdTokens: 200_000, inputMicroPerMtok: 100_000_000n, outputMicroPerMtok: 100_000_000n } };
      for (const price of [sonnet, opus, cheaper]) {
        for (const bound of [199_998, 199_999, 200_000, 200_001, 200_002, 250_000]) {
          for (const hourCache of [false, true]) {
            const hold = worstCaseMicro(bound, 4_096, price, { hourCache });
            for (const prompt of [1, 150_000, 199_999, 200_000, 200_001, 200_002, 250_000].filter((p) => p <= bound)) {
              const cached = Math.floor(prompt / 3);
              const written = Math.floor(prompt / 4);
              for (const u of [
                { promptTokens: prompt, completionTokens: 4_096 },
                { promptTokens: prompt, completionTokens: 4_096, cachedTokens: cached },
                { promptTokens: prompt, completionTokens: 4_096, cacheWriteTokens: prompt },
                { promptTokens: prompt, completionTokens: 0, cachedTokens: cached, cacheWriteTokens: written, cacheWrite1hTokens: hourCache ? written : 0 },
              ]) {
                expect(usageCostMicro(u, price), `bound ${bound}, ${JSON.stringify(u)}`).toBeLessThanOrEqual(hold);
              }
            }
          }
        }
      }
    });
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
