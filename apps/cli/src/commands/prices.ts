// `switchyard prices set|list`: what paid backends charge per million tokens.
// Prices are typed in USD per Mtok and stored as integer micro-cents per Mtok
// (1 USD = 10^8 micro-cents), parsed from the digits, never through a float.
// A new price is a new row; routers pick it up within billing.refreshMs.
import { cacheWrite1hPrice, formatMicroAsUsd, listPrices, priceForPrompt, setPrice, tokenPriceOf, usdToMicro } from "@switchyard/db";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

export interface PricesFlags {
  config?: string;
  input?: string;
  output?: string;
  "cached-input"?: string;
  "cache-write"?: string;
  "cache-write-1h"?: string;
  "audio-input"?: string;
  "image-token-multiplier"?: string;
  "long-context-over"?: string;
  "long-input"?: string;
  "long-output"?: string;
  "long-cached-input"?: string;
  "long-cache-write"?: string;
  "long-cache-write-1h"?: string;
  "effective-from"?: string;
  backend?: string;
  model?: string[];
}

/** Backend kinds a price applies to (Backend.kind in the router). */
const backends = ["openrouter", "anthropic", "worker"] as const;
const setFlags = ["input", "output", "cached-input", "cache-write", "cache-write-1h", "audio-input", "image-token-multiplier", "long-context-over", "long-input", "long-output", "long-cached-input", "long-cache-write", "long-cache-write-1h", "effective-from"] as const;
/** The long-context tier's flags: the threshold and the long input and output rates go together; the cache rates need them. */
const tierFlags = ["long-context-over", "long-input", "long-output"] as const;
const tierCacheFlags = ["long-cached-input", "long-cache-write", "long-cache-write-1h"] as const;
const listFlags = ["backend", "model"] as const;
const BIGINT_MAX = 2n ** 63n - 1n;
type Price = Awaited<ReturnType<typeof listPrices>>[number];

export async function pricesCommand(args: string[], flags: PricesFlags): Promise<number> {
  const [verb, ...rest] = args;
  if (verb !== "set" && verb !== "list") throw new UsageError(`prices: expected 'set BACKEND MODEL …' or 'list', got '${verb ?? ""}'`);
  const wrong = (verb === "set" ? listFlags : setFlags).find((f) => flags[f] !== undefined);
  if (wrong) throw new UsageError(`prices ${verb}: --${wrong} does not apply here`);
  if (verb === "set") {
    const [backend, model, ...extra] = rest;
    if (!backend || !model) throw new UsageError("prices set: expected BACKEND MODEL (e.g. prices set openrouter openai/gpt-4o-mini --input 0.15 --output 0.6)");
    if (extra.length > 0) throw new UsageError(`prices set: unexpected argument '${extra[0]}'`);
    // The price is found by the model's exact name: a space would price a model nothing is called.
    if (model.trim() !== model || /\s/.test(model)) throw new UsageError(`prices set: MODEL '${model}' has whitespace in it; model names have none`);
    checkBackend("prices set", backend);
    if (flags.input === undefined || flags.output === undefined) throw new UsageError("prices set: --input and --output (USD per million tokens) are required");
    checkTierFlags(flags);
    const rate = (flag: "long-input" | "long-output" | (typeof tierCacheFlags)[number]) => (flags[flag] === undefined ? null : parsePerMtok(flag, flags[flag]));
    const input = {
      backend,
      model,
      inputMicroPerMtok: parsePerMtok("input", flags.input),
      outputMicroPerMtok: parsePerMtok("output", flags.output),
      cachedInputMicroPerMtok: flags["cached-input"] === undefined ? null : parsePerMtok("cached-input", flags["cached-input"]),
      cacheWriteMicroPerMtok: flags["cache-write"] === undefined ? null : parsePerMtok("cache-write", flags["cache-write"]),
      cacheWrite1hMicroPerMtok: flags["cache-write-1h"] === undefined ? null : parsePerMtok("cache-write-1h", flags["cache-write-1h"]),
      audioInputMicroPerMtok: flags["audio-input"] === undefined ? null : parsePerMtok("audio-input", flags["audio-input"]),
      imageTokenMultiplierPermille: flags["image-token-multiplier"] === undefined ? null : parsePermille("image-token-multiplier", flags["image-token-multiplier"]),
      longContextThresholdTokens: flags["long-context-over"] === undefined ? null : parseThreshold("long-context-over", flags["long-context-over"]),
      longInputMicroPerMtok: rate("long-input"),
      longOutputMicroPerMtok: rate("long-output"),
      longCachedInputMicroPerMtok: rate("long-cached-input"),
      longCacheWriteMicroPerMtok: rate("long-cache-write"),
      longCacheWrite1hMicroPerMtok: rate("long-cache-write-1h"),
      effectiveFrom: flags["effective-from"] === undefined ? new Date() : parseInstant(flags["effective-from"]),
    };
    const db = await openDb(configFrom(flags), { migrate: true, quiet: true });
    try {
      // The row this one takes over from, read before it is written: what it priced apart that this one leaves to the input price.
      const before = latestBefore(await listPrices(db.db), backend, model, input.effectiveFrom);
      const p = await setPrice(db.db, input);
      const when = p.effectiveFrom.getTime() > Date.now() ? "from" : "in force since";
      process.stdout.write(
        `price of ${p.backend} ${p.model} ${when} ${p.effectiveFrom.toISOString()}: ` +
          `input ${perMtok(p.inputMicroPerMtok)}, output ${perMtok(p.outputMicroPerMtok)}, ` +
          `cached input ${p.cachedInputMicroPerMtok === null ? "as input" : perMtok(p.cachedInputMicroPerMtok)}, ` +
          `cache write ${p.cacheWriteMicroPerMtok === null ? "as input" : perMtok(p.cacheWriteMicroPerMtok)}, ` +
          `1-hour cache write ${p.cacheWrite1hMicroPerMtok === null ? `2× input (${perMtok(cacheWrite1hPrice(p))})` : perMtok(p.cacheWrite1hMicroPerMtok)}, ` +
          `audio input ${p.audioInputMicroPerMtok === null ? "as input" : perMtok(p.audioInputMicroPerMtok)}, ` +
          `image tokens ${p.imageTokenMultiplierPermille === null ? "1×" : `${formatPermille(p.imageTokenMultiplierPermille)}×`}\n`,
      );
      const tier = tierLine(p);
      if (tier) process.stdout.write(`${tier}\n`);
      if (backend === "worker") process.stderr.write("note: self-hosted workers are never charged; a worker price is informational\n");
      for (const note of droppedRates(before, p)) process.stderr.write(`note: ${note}\n`);
      if (p.imageTokenMultiplierPermille === null && /gpt-4o-mini/i.test(p.model)) {
        process.stderr.write("note: gpt-4o-mini counts an image's tokens 33.336× gpt-4o's (at a 33rd of its price): pass --image-token-multiplier 33.336, or its images are held at the cross-provider bound, several times below what it bills for them\n");
      }
      return 0;
    } finally {
      await db.close();
      await db.stopEmbedded();
    }
  }
  if (rest.length > 0) throw new UsageError(`prices list: unexpected argument '${rest[0]}'`);
  if (flags.backend !== undefined) checkBackend("prices list", flags.backend);
  const db = await openDb(configFrom(flags), { migrate: true, quiet: true });
  try {
    const models = flags.model?.length ? new Set(flags.model) : undefined;
    const rows = (await listPrices(db.db)).filter((p) => (flags.backend === undefined || p.backend === flags.backend) && (!models || models.has(p.model)));
    const status = statusOf(rows, new Date());
    const header = [
      "BACKEND",
      "MODEL",
      "EFFECTIVE_FROM",
      "STATUS",
      "INPUT_USD_MTOK",
      "OUTPUT_USD_MTOK",
      "CACHED_INPUT_USD_MTOK",
      "CACHE_WRITE_USD_MTOK",
      "CACHE_WRITE_1H_USD_MTOK",
      "AUDIO_INPUT_USD_MTOK",
      "IMAGE_TOKEN_MULTIPLIER",
      "LONG_CONTEXT_OVER",
      "LONG_INPUT_USD_MTOK",
      "LONG_OUTPUT_USD_MTOK",
      "LONG_CACHED_INPUT_USD_MTOK",
      "LONG_CACHE_WRITE_USD_MTOK",
      "LONG_CACHE_WRITE_1H_USD_MTOK",
    ];
    const usd = (v: bigint | null) => (v === null ? "-" : formatMicroAsUsd(v));
    const lines = rows.map((p, i) => [
      p.backend,
      p.model,
      p.effectiveFrom.toISOString(),
      status[i]!,
      usd(p.inputMicroPerMtok),
      usd(p.outputMicroPerMtok),
      usd(p.cachedInputMicroPerMtok),
      usd(p.cacheWriteMicroPerMtok),
      usd(p.cacheWrite1hMicroPerMtok),
      usd(p.audioInputMicroPerMtok),
      p.imageTokenMultiplierPermille === null ? "-" : formatPermille(p.imageTokenMultiplierPermille),
      p.longContextThresholdTokens === null ? "-" : String(p.longContextThresholdTokens),
      usd(p.longInputMicroPerMtok),
      usd(p.longOutputMicroPerMtok),
      usd(p.longCachedInputMicroPerMtok),
      usd(p.longCacheWriteMicroPerMtok),
      usd(p.longCacheWrite1hMicroPerMtok),
    ]);
    const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
    const fmt = (l: string[]) =>
      l
        .map((v, i) => (i >= 4 ? v.padStart(widths[i]!) : v.padEnd(widths[i]!)))
        .join("  ")
        .trimEnd();
    process.stdout.write([fmt(header), ...lines.map(fmt)].join("\n") + "\n");
    if (rows.length === 0) process.stderr.write("no prices set: paid backends are skipped until they have one\n");
    return 0;
  } finally {
    await db.close();
    await db.stopEmbedded();
  }
}

/** The row of backend × model in force just before `at` (the one a new row from `at` follows), if any. */
function latestBefore(rows: Price[], backend: string, model: string, at: Date): Price | undefined {
  let latest: Price | undefined;
  for (const r of rows) {
    if (r.backend !== backend || r.model !== model || r.effectiveFrom.getTime() > at.getTime()) continue;
    if (!latest || r.effectiveFrom.getTime() > latest.effectiveFrom.getTime()) latest = r;
  }
  return latest;
}

/**
 * What the row a new one follows priced apart and the new one does not: a
 * row is whole (an omitted flag is "as input", not "as before"), so a price
 * update that leaves out --cache-write or --image-token-multiplier drops
 * it — said, not refused: the drop may be meant.
 */
function droppedRates(before: Price | undefined, now: Price): string[] {
  if (!before) return [];
  const since = before.effectiveFrom.toISOString();
  const rates: Array<[string, string, bigint | null, bigint | null, string]> = [
    ["cached input", "cached-input", before.cachedInputMicroPerMtok, now.cachedInputMicroPerMtok, "as input"],
    ["cache write", "cache-write", before.cacheWriteMicroPerMtok, now.cacheWriteMicroPerMtok, "as input"],
    ["1-hour cache write", "cache-write-1h", before.cacheWrite1hMicroPerMtok, now.cacheWrite1hMicroPerMtok, "at 2× input"],
    ["audio input", "audio-input", before.audioInputMicroPerMtok, now.audioInputMicroPerMtok, "as input"],
  ];
  // With the tier kept, its own cache rates too; a tier dropped whole is one note (below).
  if (before.longContextThresholdTokens !== null && now.longContextThresholdTokens !== null) {
    const scaled = "at the ordinary rate × long input ÷ input";
    rates.push(
      ["long-context cached input", "long-cached-input", before.longCachedInputMicroPerMtok, now.longCachedInputMicroPerMtok, scaled],
      ["long-context cache write", "long-cache-write", before.longCacheWriteMicroPerMtok, now.longCacheWriteMicroPerMtok, scaled],
      ["long-context 1-hour cache write", "long-cache-write-1h", before.longCacheWrite1hMicroPerMtok, now.longCacheWrite1hMicroPerMtok, scaled],
    );
  }
  const notes = rates.filter(([, , was, is]) => was !== null && is === null).map(([name, flag, was, , fallback]) => `the price in force since ${since} had ${name} at ${perMtok(was!)}; this one prices it ${fallback} (pass --${flag} to keep it)`);
  if (before.imageTokenMultiplierPermille !== null && now.imageTokenMultiplierPermille === null) {
    notes.push(`the price in force since ${since} counted image tokens ${formatPermille(before.imageTokenMultiplierPermille)}×; this one counts them 1× (pass --image-token-multiplier to keep it)`);
  }
  if (before.longContextThresholdTokens !== null && now.longContextThresholdTokens === null) {
    notes.push(
      `the price in force since ${since} had a long-context tier (over ${before.longContextThresholdTokens} prompt tokens: input ${perMtok(before.longInputMicroPerMtok!)}, output ${perMtok(before.longOutputMicroPerMtok!)}); this one prices every request at its ordinary rates (pass --long-context-over, --long-input and --long-output to keep it)`,
    );
  }
  return notes;
}

/**
 * The tier is whole or absent: a threshold without its rates, or rates
 * without a threshold, would be stored as nothing or refused by the
 * database — said here, naming what is missing.
 */
function checkTierFlags(flags: PricesFlags): void {
  const given = tierFlags.filter((f) => flags[f] !== undefined);
  const missing = tierFlags.filter((f) => flags[f] === undefined);
  if (given.length > 0 && missing.length > 0) {
    throw new UsageError(`prices set: ${given.map((f) => `--${f}`).join(" and ")} ${given.length === 1 ? "needs" : "need"} ${missing.map((f) => `--${f}`).join(" and ")} too (a long-context tier is a threshold in prompt tokens and the long input and output prices, e.g. --long-context-over 200000 --long-input 6 --long-output 22.5)`);
  }
  const orphan = tierCacheFlags.find((f) => flags[f] !== undefined);
  if (orphan && given.length === 0) throw new UsageError(`prices set: --${orphan} is a long-context rate: it needs --long-context-over, --long-input and --long-output`);
}

/**
 * The tier, when the row has one, on a line of its own: its threshold and
 * rates, an unset cache rate with what it comes to (money.ts priceForPrompt).
 */
function tierLine(p: Price): string | undefined {
  const price = tokenPriceOf(p);
  const tier = price.longContext;
  if (!tier) return undefined;
  const long = priceForPrompt(price, tier.thresholdTokens + 1);
  const rate = (own: bigint | null | undefined, ordinary: bigint | null, derived: bigint | null | undefined, unset: string) =>
    own != null ? perMtok(own) : ordinary !== null ? `${perMtok(derived!)} (the ordinary rate × long input ÷ input, rounded up)` : unset;
  return (
    `long context, over ${tier.thresholdTokens} prompt tokens (cache reads and writes counted), every token of the request: ` +
    `input ${perMtok(tier.inputMicroPerMtok)}, output ${perMtok(tier.outputMicroPerMtok)}, ` +
    `cached input ${rate(tier.cachedInputMicroPerMtok, p.cachedInputMicroPerMtok, long.cachedInputMicroPerMtok, "as long input")}, ` +
    `cache write ${rate(tier.cacheWriteMicroPerMtok, p.cacheWriteMicroPerMtok, long.cacheWriteMicroPerMtok, "as long input")}, ` +
    `1-hour cache write ${rate(tier.cacheWrite1hMicroPerMtok, p.cacheWrite1hMicroPerMtok, long.cacheWrite1hMicroPerMtok, `2× long input (${perMtok(cacheWrite1hPrice(long))})`)}`
  );
}

function checkBackend(where: string, backend: string): void {
  if (!(backends as readonly string[]).includes(backend)) throw new UsageError(`${where}: BACKEND must be one of ${backends.join(", ")} (got '${backend}')`);
}

/**
 * USD per million tokens as a plain decimal → micro-cents per Mtok. Stored
 * exactly or refused: a 9th decimal place would be rounded away.
 */
function parsePerMtok(flag: string, text: string): bigint {
  const t = text.trim();
  const m = /^(\d+)(?:\.(\d+))?$/.exec(t);
  if (!m) throw new UsageError(`prices set: --${flag} takes USD per million tokens as a non-negative decimal, e.g. 0.15 (got '${text}')`);
  if ((m[2] ?? "").replace(/0+$/, "").length > 8) throw new UsageError(`prices set: --${flag} has more than 8 decimal places (the smallest unit is 0.00000001 USD per million tokens)`);
  const micro = usdToMicro(t);
  if (micro > BIGINT_MAX) throw new UsageError(`prices set: --${flag} is too large`);
  return micro;
}

const INT4_MAX = 2 ** 31 - 1;

/** A threshold in prompt tokens: a positive integer that fits the int4 column (Anthropic's is 200000). */
function parseThreshold(flag: string, text: string): number {
  const t = text.trim();
  if (!/^\d+$/.test(t)) throw new UsageError(`prices set: --${flag} takes a number of prompt tokens, a positive integer, e.g. 200000 (got '${text}')`);
  const n = BigInt(t);
  if (n === 0n) throw new UsageError(`prices set: --${flag} must be above 0`);
  if (n > BigInt(INT4_MAX)) throw new UsageError(`prices set: --${flag} is too large`);
  return Number(n);
}

/** The largest multiplier stored (an int4 of thousandths): far above any model's, but no wrap. */
const PERMILLE_MAX = INT4_MAX;

/**
 * A multiplier as a plain decimal with up to 3 places → thousandths, an
 * exact integer (the hold multiplies by it without a float). Positive: a
 * multiplier of 0 would hold a model's images as free.
 */
function parsePermille(flag: string, text: string): number {
  const m = /^(\d+)(?:\.(\d+))?$/.exec(text.trim());
  if (!m) throw new UsageError(`prices set: --${flag} takes a positive decimal, e.g. 33.336 (got '${text}')`);
  const frac = (m[2] ?? "").replace(/0+$/, "");
  if (frac.length > 3) throw new UsageError(`prices set: --${flag} has more than 3 decimal places (it is stored in thousandths)`);
  const permille = BigInt(m[1]!) * 1000n + BigInt(frac.padEnd(3, "0"));
  if (permille === 0n) throw new UsageError(`prices set: --${flag} must be above 0`);
  if (permille > BigInt(PERMILLE_MAX)) throw new UsageError(`prices set: --${flag} is too large`);
  return Number(permille);
}

function formatPermille(permille: number): string {
  const frac = String(permille % 1000).padStart(3, "0").replace(/0+$/, "");
  return `${Math.floor(permille / 1000)}${frac ? `.${frac}` : ""}`;
}

/** YYYY-MM-DD (midnight UTC) or an ISO 8601 instant with Z or an offset; never the machine's local time. */
function parseInstant(text: string): Date {
  const dateOnly = /^\d{4}-\d{2}-\d{2}$/.test(text);
  const withZone = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,3})?)?(Z|[+-]\d{2}:\d{2})$/.test(text);
  const d = new Date(dateOnly ? `${text}T00:00:00Z` : text);
  // Date rolls 2026-02-30 over to March; a typo should be refused instead.
  const day = text.slice(0, 10);
  const midnight = new Date(`${day}T00:00:00Z`);
  const realDay = !Number.isNaN(midnight.getTime()) && midnight.toISOString().slice(0, 10) === day;
  if ((!dateOnly && !withZone) || Number.isNaN(d.getTime()) || !realDay) {
    throw new UsageError(`prices set: --effective-from takes YYYY-MM-DD (midnight UTC) or an instant like 2026-12-01T09:00:00Z (got '${text}')`);
  }
  return d;
}

/**
 * For rows ordered backend, model, effective_from descending: the first row
 * of each backend × model that has started is in force; earlier ones are
 * superseded; later ones are scheduled.
 */
function statusOf(rows: readonly Price[], now: Date): string[] {
  const seen = new Set<string>();
  return rows.map((p) => {
    const key = `${p.backend}\u0000${p.model}`;
    if (p.effectiveFrom.getTime() > now.getTime()) return "scheduled";
    if (seen.has(key)) return "superseded";
    seen.add(key);
    return "in force";
  });
}

function perMtok(micro: bigint): string {
  return `$${formatMicroAsUsd(micro)}/Mtok (${micro} micro-cents)`;
}
