// Prices per backend and model, in integer micro-cents per million tokens. A
// new price is a new row with a later effective_from; old rows stay so past
// requests can be re-priced exactly.
import { sql } from "drizzle-orm";
import { bigint, check, integer, pgTable, primaryKey, text } from "drizzle-orm/pg-core";
import { createdAt, tstz } from "./columns.ts";

export const prices = pgTable(
  "prices",
  {
    backend: text("backend").notNull(),
    model: text("model").notNull(),
    inputMicroPerMtok: bigint("input_micro_per_mtok", { mode: "bigint" }).notNull(),
    outputMicroPerMtok: bigint("output_micro_per_mtok", { mode: "bigint" }).notNull(),
    /** Cached prompt tokens; null means "priced like ordinary input" (never silently free). */
    cachedInputMicroPerMtok: bigint("cached_input_micro_per_mtok", { mode: "bigint" }),
    /** Prompt tokens written to a provider cache (Anthropic: 1.25× input); null means "priced like input". */
    cacheWriteMicroPerMtok: bigint("cache_write_micro_per_mtok", { mode: "bigint" }),
    /** Prompt tokens written to a provider cache for one hour (Anthropic `ttl: "1h"`: 2× input); null means "twice the input price". */
    cacheWrite1hMicroPerMtok: bigint("cache_write_1h_micro_per_mtok", { mode: "bigint" }),
    /**
     * Audio prompt tokens (gpt-4o-audio-preview bills them at 16× its text
     * input); null means "priced like input". The hold prices a prompt's
     * audio at it.
     */
    audioInputMicroPerMtok: bigint("audio_input_micro_per_mtok", { mode: "bigint" }),
    /**
     * How many times OpenAI's tile formula (gpt-4o's 85 + 170 a tile) this
     * model counts an image's tokens, in thousandths (gpt-4o-mini: 33,336,
     * i.e. 33.336×: it counts 2,833 + 5,667 a tile); null means none, images
     * held at the cross-provider bound (money.ts heldImageTokens). An
     * integer so the hold stays exact.
     */
    imageTokenMultiplierPermille: integer("image_token_multiplier_permille"),
    /**
     * A long-context tier (Anthropic's 1M-token context): a request whose
     * prompt — cache reads and writes included — is over this many tokens is
     * priced entirely at the long_* rates, output included. Null: no tier.
     * The threshold and the long input and output rates are set together.
     */
    longContextThresholdTokens: integer("long_context_threshold_tokens"),
    longInputMicroPerMtok: bigint("long_input_micro_per_mtok", { mode: "bigint" }),
    longOutputMicroPerMtok: bigint("long_output_micro_per_mtok", { mode: "bigint" }),
    /** The tier's cache rates; null means the ordinary one × long input ÷ input, rounded up (money.ts priceForPrompt). */
    longCachedInputMicroPerMtok: bigint("long_cached_input_micro_per_mtok", { mode: "bigint" }),
    longCacheWriteMicroPerMtok: bigint("long_cache_write_micro_per_mtok", { mode: "bigint" }),
    longCacheWrite1hMicroPerMtok: bigint("long_cache_write_1h_micro_per_mtok", { mode: "bigint" }),
    effectiveFrom: tstz("effective_from").notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.backend, t.model, t.effectiveFrom] }),
    check(
      "prices_nonnegative",
      sql`${t.inputMicroPerMtok} >= 0 and ${t.outputMicroPerMtok} >= 0 and coalesce(${t.cachedInputMicroPerMtok}, 0) >= 0 and coalesce(${t.cacheWriteMicroPerMtok}, 0) >= 0 and coalesce(${t.cacheWrite1hMicroPerMtok}, 0) >= 0 and coalesce(${t.audioInputMicroPerMtok}, 0) >= 0 and coalesce(${t.imageTokenMultiplierPermille}, 1000) > 0 and coalesce(${t.longInputMicroPerMtok}, 0) >= 0 and coalesce(${t.longOutputMicroPerMtok}, 0) >= 0 and coalesce(${t.longCachedInputMicroPerMtok}, 0) >= 0 and coalesce(${t.longCacheWriteMicroPerMtok}, 0) >= 0 and coalesce(${t.longCacheWrite1hMicroPerMtok}, 0) >= 0`,
    ),
    // A tier is whole (threshold, long input and long output) or absent, its cache rates with it: half of one would be read as none.
    // "is not null" spelt out: null > 0 is null, which a check lets through.
    check(
      "prices_long_context",
      sql`(${t.longContextThresholdTokens} is null and ${t.longInputMicroPerMtok} is null and ${t.longOutputMicroPerMtok} is null and ${t.longCachedInputMicroPerMtok} is null and ${t.longCacheWriteMicroPerMtok} is null and ${t.longCacheWrite1hMicroPerMtok} is null) or (${t.longContextThresholdTokens} is not null and ${t.longInputMicroPerMtok} is not null and ${t.longOutputMicroPerMtok} is not null and ${t.longContextThresholdTokens} > 0)`,
    ),
  ],
);

export type Price = typeof prices.$inferSelect;
export type NewPrice = typeof prices.$inferInsert;
