// Money as integers: micro-cents (10⁻⁶ cent) held in `bigint`. 1 cent = 10⁶
// micro, 1 USD = 10⁸ micro. Nothing here touches a float.

export type Micro = bigint;

export const MICRO_PER_CENT = 1_000_000n;
export const MICRO_PER_USD = 100_000_000n;
export const TOKENS_PER_MTOK = 1_000_000n;

/** Whole cents → micro-cents. A `number` must be a safe integer. */
export function centsToMicro(cents: bigint | number): Micro {
  return toBigInt(cents, "cents") * MICRO_PER_CENT;
}

const decimalPattern = /^([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/;

/**
 * A USD amount written in decimal (OpenRouter's `usage.cost`, e.g. "0.000123"
 * or "1.5e-7") → micro-cents, exactly, by parsing the digits. A JS number is
 * taken by its shortest round-trip decimal (String(n)), which is the text the
 * provider sent whenever that text had ≤ 17 significant digits.
 *
 * Micro-cents are 10⁻⁸ USD: digits beyond the 8th decimal place cannot be
 * stored, so they are rounded half-up (0.000000005 USD → 1 micro-cent,
 * 0.0000000049 → 0). Negative amounts and non-decimals throw.
 */
export function usdToMicro(usd: string | number): Micro {
  const text = typeof usd === "number" ? numberToDecimal(usd) : usd.trim();
  const m = decimalPattern.exec(text);
  if (!m || (m[2] === "" && (m[3] ?? "") === "")) throw new RangeError(`not a decimal USD amount: ${JSON.stringify(usd)}`);
  const [, sign, intPart = "", fracPart = "", expPart] = m;
  const exp = expPart === undefined ? 0 : Number(expPart);
  if (!Number.isSafeInteger(exp) || Math.abs(exp) > 1000) throw new RangeError(`USD exponent out of range: ${JSON.stringify(usd)}`);
  // value = digits × 10^(exp - fracPart.length) USD = digits × 10^(exp - frac + 8) micro.
  const digits = BigInt((intPart + fracPart).replace(/^0+(?=\d)/, "") || "0");
  if (sign === "-" && digits !== 0n) throw new RangeError(`negative USD amount: ${JSON.stringify(usd)}`);
  const shift = exp - fracPart.length + 8;
  if (shift >= 0) return digits * 10n ** BigInt(shift);
  return divRoundHalfUp(digits, 10n ** BigInt(-shift));
}

/**
 * Cost of `tokens` at a price in micro-cents per million tokens, rounded up
 * to the next micro-cent (a provider never charges less than the fraction).
 */
export function tokensCostMicro(tokens: bigint | number, microPerMtok: bigint): Micro {
  const t = toBigInt(tokens, "tokens");
  if (t < 0n || microPerMtok < 0n) throw new RangeError("tokens and prices are non-negative");
  return divCeil(t * microPerMtok, TOKENS_PER_MTOK);
}

export interface TokenPrice {
  inputMicroPerMtok: bigint;
  outputMicroPerMtok: bigint;
  /** null/undefined: cached prompt tokens are priced like ordinary input. */
  cachedInputMicroPerMtok?: bigint | null;
  /** Prompt tokens written to a provider cache for its default lifetime (Anthropic: 5 minutes); null/undefined: priced like ordinary input. */
  cacheWriteMicroPerMtok?: bigint | null;
  /** Prompt tokens written to a provider cache for one hour (Anthropic `ttl: "1h"`); null/undefined: twice the input price (Anthropic's multiplier). */
  cacheWrite1hMicroPerMtok?: bigint | null;
  /** Audio prompt tokens; null/undefined: priced like ordinary input. The hold (worstCaseMicro) and the settle (usageCostMicro) both price them apart. */
  audioInputMicroPerMtok?: bigint | null;
  /**
   * How many times OpenAI's tile formula (85 + 170 a 512-px tile: gpt-4o's)
   * this model counts an image's tokens, in thousandths (gpt-4o-mini's 2,833 +
   * 5,667 a tile: 33,336); null/undefined: no multiplier, images at the
   * cross-provider bound (heldImageTokens).
   */
  imageTokenMultiplierPermille?: number | null;
  /** Dearer rates for the whole of a request whose prompt is long (Anthropic's 1M-token context); null/undefined: none, every request at the rates above. */
  longContext?: LongContextPrice | null;
}

/**
 * A long-context tier: Anthropic bills a request whose prompt is over 200,000
 * tokens (cache reads and writes count) at premium rates for all of its
 * tokens, output included — not only for those past the threshold.
 */
export interface LongContextPrice {
  /** A prompt of strictly more tokens than this (a safe integer > 0) puts the whole request at the tier. */
  thresholdTokens: number;
  inputMicroPerMtok: bigint;
  outputMicroPerMtok: bigint;
  /** null/undefined: the ordinary cached price × long input ÷ input, rounded up (unset too: as the long input). */
  cachedInputMicroPerMtok?: bigint | null;
  /** null/undefined: the ordinary cache-write price × long input ÷ input, rounded up (unset too: as the long input). */
  cacheWriteMicroPerMtok?: bigint | null;
  /** null/undefined: the ordinary one-hour write price × long input ÷ input, rounded up (unset too: 2× the long input). */
  cacheWrite1hMicroPerMtok?: bigint | null;
}

/**
 * The flat price a request pays given its prompt's tokens (cached and
 * cache-written ones included): `price` itself, or — over its long-context
 * threshold — the tier's rates for every kind of token. A tier cache rate
 * left unset follows the ordinary one scaled by long input ÷ input, rounded
 * up to the micro-cent per Mtok (a provider's multipliers apply to the long
 * input: never charge less); with no ordinary one either it stays unset, so
 * the usual defaults apply on the long input (as it; 2× it for an hour's
 * write). An audio price set stays as it is (no provider prices long-context
 * audio); unset, audio follows the input price, the long one. Image
 * multipliers count tokens, not money: unchanged.
 */
export function priceForPrompt(price: TokenPrice, promptTokens: number | bigint): TokenPrice {
  const tier = price.longContext;
  if (!tier) return price;
  if (!Number.isSafeInteger(tier.thresholdTokens) || tier.thresholdTokens <= 0) throw new RangeError(`long-context threshold must be a positive integer of tokens, got ${tier.thresholdTokens}`);
  if (!(promptTokens > tier.thresholdTokens)) return price;
  const longInput = tier.inputMicroPerMtok;
  const scaled = (ordinary: bigint | null | undefined, fallback: bigint): bigint | null => {
    if (ordinary == null) return null;
    // A free ordinary input has no ratio to scale by: the dearer of the ordinary rate and the default on the long input.
    if (price.inputMicroPerMtok === 0n) return ordinary > fallback ? ordinary : fallback;
    return divCeil(ordinary * longInput, price.inputMicroPerMtok);
  };
  return {
    inputMicroPerMtok: longInput,
    outputMicroPerMtok: tier.outputMicroPerMtok,
    cachedInputMicroPerMtok: tier.cachedInputMicroPerMtok ?? scaled(price.cachedInputMicroPerMtok, longInput),
    cacheWriteMicroPerMtok: tier.cacheWriteMicroPerMtok ?? scaled(price.cacheWriteMicroPerMtok, longInput),
    cacheWrite1hMicroPerMtok: tier.cacheWrite1hMicroPerMtok ?? scaled(price.cacheWrite1hMicroPerMtok, 2n * longInput),
    audioInputMicroPerMtok: price.audioInputMicroPerMtok ?? null,
    imageTokenMultiplierPermille: price.imageTokenMultiplierPermille ?? null,
    longContext: null,
  };
}

/** The price of a one-hour cache write: its own, or twice the input price when none is set. */
export function cacheWrite1hPrice(price: TokenPrice): bigint {
  return price.cacheWrite1hMicroPerMtok ?? 2n * price.inputMicroPerMtok;
}

export interface TokenUsage {
  promptTokens: number;
  completionTokens: number;
  /** Cached prompt tokens, counted inside promptTokens (OpenAI's convention). */
  cachedTokens?: number;
  /** Prompt tokens written to a provider cache, also counted inside promptTokens. */
  cacheWriteTokens?: number;
  /** Of cacheWriteTokens, those written for one hour (priced at cacheWrite1hPrice; the rest at the cache-write price). */
  cacheWrite1hTokens?: number;
  /** Audio prompt tokens (OpenAI's `prompt_tokens_details.audio_tokens`), also counted inside promptTokens, apart from the cached and cache-written ones. */
  audioTokens?: number;
}

/** Cost of one request's usage: one ceiling over the exact sum, not one per part; a prompt over a long-context threshold puts all of it at the tier (priceForPrompt). */
export function usageCostMicro(usage: TokenUsage, rates: TokenPrice): Micro {
  const prompt = toBigInt(usage.promptTokens, "promptTokens");
  const completion = toBigInt(usage.completionTokens, "completionTokens");
  const cached = toBigInt(usage.cachedTokens ?? 0, "cachedTokens");
  const written = toBigInt(usage.cacheWriteTokens ?? 0, "cacheWriteTokens");
  const written1h = toBigInt(usage.cacheWrite1hTokens ?? 0, "cacheWrite1hTokens");
  const audio = toBigInt(usage.audioTokens ?? 0, "audioTokens");
  if (prompt < 0n || completion < 0n || cached < 0n || written < 0n || written1h < 0n || audio < 0n || cached + written + audio > prompt || written1h > written) {
    throw new RangeError("token counts must satisfy 0 ≤ cached + cache-written + audio ≤ prompt, 0 ≤ written for 1 h ≤ cache-written, completion ≥ 0");
  }
  const price = priceForPrompt(rates, prompt);
  const cachedPrice = price.cachedInputMicroPerMtok ?? price.inputMicroPerMtok;
  const writePrice = price.cacheWriteMicroPerMtok ?? price.inputMicroPerMtok;
  const audioPrice = price.audioInputMicroPerMtok ?? price.inputMicroPerMtok;
  const numerator =
    (prompt - cached - written - audio) * price.inputMicroPerMtok +
    cached * cachedPrice +
    (written - written1h) * writePrice +
    written1h * cacheWrite1hPrice(price) +
    audio * audioPrice +
    completion * price.outputMicroPerMtok;
  return divCeil(numerator, TOKENS_PER_MTOK);
}

/** Of a prompt's tokens, those its images and its audio count (the prompt bound keeps them apart: some models bill them apart). */
export interface PromptMedia {
  hourCache?: boolean;
  /** The images' tokens in the prompt's count: the most any provider counts them. */
  imageTokens?: number;
  /**
   * The same images in OpenAI's tile formula, the count an image multiplier
   * is relative to: at most `imageTokens`, and not counted beside them in
   * the prompt. Unset: `imageTokens` (a multiplier then multiplies those,
   * which are never fewer).
   */
  imageTileTokens?: number;
  audioTokens?: number;
}

/**
 * The most tokens a model counts for a prompt's images: with an image
 * multiplier on its price row, their tile tokens × it, rounded up — what the
 * multiplier is relative to (gpt-4o-mini: 85 × 33.336 ≥ 2,833 and 170 ×
 * 33.336 ≥ 5,667, so any image's tiles, and `detail: "low"`'s base alone,
 * are covered) — but never fewer than `imageTokens`, the cross-provider
 * bound: a row with a small multiplier, or on a model that does not tile,
 * holds no less than a row without one. Without a multiplier: `imageTokens`.
 */
export function heldImageTokens(price: TokenPrice, media: PromptMedia): bigint {
  const image = toBigInt(media.imageTokens ?? 0, "imageTokens");
  const tiles = media.imageTileTokens === undefined ? image : toBigInt(media.imageTileTokens, "imageTileTokens");
  if (tiles < 0n || tiles > image) throw new RangeError("image token counts must satisfy 0 ≤ tile tokens ≤ image tokens");
  const permille = price.imageTokenMultiplierPermille;
  if (permille == null) return image;
  if (!Number.isSafeInteger(permille) || permille <= 0) throw new RangeError(`image token multiplier must be a positive integer of thousandths, got ${permille}`);
  const multiplied = divCeil(tiles * BigInt(permille), 1_000n);
  return multiplied > image ? multiplied : image;
}

/**
 * The most a request can cost: every prompt token at the dearest price a
 * prompt token can have (input, or a cache write) plus the largest
 * completion it may produce at the output price. The budget hold. A one-hour
 * cache write counts only where the request asks for one (`hourCache`): it
 * is the dearest (2× input by default), and a hold priced at it for every
 * request would halve what a day's budget admits on models that never cache.
 * Of `inputTokens`, `imageTokens` count as heldImageTokens says (a price's
 * image multiplier times their tile tokens) and `audioTokens` at the audio
 * price where that is dearer. A bound over a long-context threshold holds
 * at the dearer of the tier's rates and the ordinary ones: the prompt may
 * turn out at or under the threshold, and the hold is never under the
 * settle either way (usageCostMicro picks by the prompt it reports).
 */
export function worstCaseMicro(inputTokens: number, maxOutputTokens: number, price: TokenPrice, opts: PromptMedia = {}): Micro {
  const image = toBigInt(opts.imageTokens ?? 0, "imageTokens");
  const audio = toBigInt(opts.audioTokens ?? 0, "audioTokens");
  const prompt = toBigInt(inputTokens, "inputTokens");
  const output = toBigInt(maxOutputTokens, "maxOutputTokens");
  if (output < 0n || image < 0n || audio < 0n || image + audio > prompt) throw new RangeError("token counts must satisfy 0 ≤ image + audio ≤ prompt, output ≥ 0");
  const ordinary = worstAt(prompt, image, audio, output, price, opts);
  const long = priceForPrompt(price, prompt);
  if (long === price) return ordinary;
  const atTier = worstAt(prompt, image, audio, output, long, opts);
  return atTier > ordinary ? atTier : ordinary;
}

/** worstCaseMicro at one flat price. */
function worstAt(prompt: bigint, image: bigint, audio: bigint, output: bigint, price: TokenPrice, opts: PromptMedia): Micro {
  let input = price.inputMicroPerMtok;
  for (const p of [price.cacheWriteMicroPerMtok ?? 0n, opts.hourCache ? cacheWrite1hPrice(price) : 0n]) if (p > input) input = p;
  // A model that counts an image at k× OpenAI's tiles: that many tokens in place of the bound's, at its own input price.
  const images = heldImageTokens(price, opts);
  // Audio may be cached or written to a cache like text: at the dearer of the two.
  const audioPrice = price.audioInputMicroPerMtok != null && price.audioInputMicroPerMtok > input ? price.audioInputMicroPerMtok : input;
  const numerator = (prompt - image - audio + images) * input + audio * audioPrice + output * price.outputMicroPerMtok;
  return divCeil(numerator, TOKENS_PER_MTOK);
}

/** Exact decimal text of micro-cents in cents, e.g. 1_234_567n → "1.234567". */
export function formatMicroAsCents(micro: Micro): string {
  return scaled(micro, 6);
}

/** Exact decimal text of micro-cents in USD, e.g. 12_300n → "0.000123". */
export function formatMicroAsUsd(micro: Micro): string {
  return scaled(micro, 8);
}

/** A bigint from Postgres/Redis text or a safe-integer number. */
export function parseMicro(value: string | number | bigint): Micro {
  if (typeof value === "bigint") return value;
  if (typeof value === "number") return toBigInt(value, "micro");
  if (!/^-?\d+$/.test(value.trim())) throw new RangeError(`not an integer amount: ${JSON.stringify(value)}`);
  return BigInt(value.trim());
}

function scaled(micro: Micro, places: number): string {
  const neg = micro < 0n;
  const abs = neg ? -micro : micro;
  const unit = 10n ** BigInt(places);
  const frac = (abs % unit).toString().padStart(places, "0").replace(/0+$/, "");
  return `${neg ? "-" : ""}${abs / unit}${frac ? `.${frac}` : ""}`;
}

function toBigInt(v: bigint | number, what: string): bigint {
  if (typeof v === "bigint") return v;
  if (!Number.isSafeInteger(v)) throw new RangeError(`${what} must be a safe integer, got ${v}`);
  return BigInt(v);
}

/** n ÷ d rounded up (n, d ≥ 0, d > 0): every price derived from another is, never under what is billed. */
export function divCeil(n: bigint, d: bigint): bigint {
  return (n + d - 1n) / d; // n ≥ 0, d > 0
}

function divRoundHalfUp(n: bigint, d: bigint): bigint {
  return (2n * n + d) / (2n * d); // n ≥ 0, d > 0
}

function numberToDecimal(n: number): string {
  if (!Number.isFinite(n)) throw new RangeError(`not a finite USD amount: ${n}`);
  return String(n);
}
