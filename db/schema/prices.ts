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
    effectiveFrom: tstz("effective_from").notNull(),
    createdAt: createdAt(),
  },
  (t) => [
    primaryKey({ columns: [t.backend, t.model, t.effectiveFrom] }),
    check(
      "prices_nonnegative",
      sql`${t.inputMicroPerMtok} >= 0 and ${t.outputMicroPerMtok} >= 0 and coalesce(${t.cachedInputMicroPerMtok}, 0) >= 0 and coalesce(${t.cacheWriteMicroPerMtok}, 0) >= 0 and coalesce(${t.cacheWrite1hMicroPerMtok}, 0) >= 0 and coalesce(${t.audioInputMicroPerMtok}, 0) >= 0 and coalesce(${t.imageTokenMultiplierPermille}, 1000) > 0`,
    ),
  ],
);

export type Price = typeof prices.$inferSelect;
export type NewPrice = typeof prices.$inferInsert;
