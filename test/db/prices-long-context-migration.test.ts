// Migration 0015 (prices' long-context tier) on a database that has prices
// already: their rows keep no tier, and the checks refuse half of one.
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { currentPrices, migrationsFolder, runMigrations, setPrice, tokenPriceOf, usageCostMicro, type PriceInput } from "@switchyard/db";
import { createTestDb, type TestDb } from "../helpers/env.ts";

let t: TestDb;

beforeAll(async () => {
  t = await createTestDb();
});
afterAll(async () => {
  await t?.drop();
});

const journal = JSON.parse(readFileSync(path.join(migrationsFolder, "meta", "_journal.json"), "utf8")) as { entries: Array<{ tag: string; when: number }> };
const whenOf = (tag: string) => journal.entries.find((e) => e.tag === tag)!.when;

/** The prices table as migration 0014 left it, and the migrator's record of 0015 gone: as a database from before 0015. */
async function backTo0014(): Promise<void> {
  const constraint0014 = readFileSync(path.join(migrationsFolder, "0014_prices_media.sql"), "utf8")
    .split("--> statement-breakpoint")
    .find((s) => s.includes("ADD CONSTRAINT"))!;
  await t.sql.unsafe(`ALTER TABLE "prices" DROP CONSTRAINT "prices_nonnegative", DROP CONSTRAINT "prices_long_context"`);
  await t.sql.unsafe(
    `ALTER TABLE "prices" DROP COLUMN "long_context_threshold_tokens", DROP COLUMN "long_input_micro_per_mtok", DROP COLUMN "long_output_micro_per_mtok", DROP COLUMN "long_cached_input_micro_per_mtok", DROP COLUMN "long_cache_write_micro_per_mtok", DROP COLUMN "long_cache_write_1h_micro_per_mtok"`,
  );
  await t.sql.unsafe(constraint0014);
  await t.sql`delete from drizzle.__drizzle_migrations where created_at = ${whenOf("0015_prices_long_context")}`;
}

describe("migration 0015_prices_long_context", () => {
  it("applies over existing rows (no tier on them), takes a whole tier, and refuses half of one or a negative long rate", async () => {
    await backTo0014();
    await t.sql`insert into prices (backend, model, input_micro_per_mtok, output_micro_per_mtok, effective_from) values ('anthropic', 'claude-sonnet-4-5', 300000000, 1500000000, now() - interval '1 day')`;
    await runMigrations(t.url);
    const old = (await currentPrices(t.db)).find((p) => p.model === "claude-sonnet-4-5")!;
    expect(old).toMatchObject({ longContextThresholdTokens: null, longInputMicroPerMtok: null, longOutputMicroPerMtok: null, longCachedInputMicroPerMtok: null });
    expect(tokenPriceOf(old).longContext).toBeNull();

    // Sonnet 4.6 with Anthropic's tier: over 200,000 prompt tokens, input $6 and output $22.50.
    const sonnet: PriceInput = { backend: "anthropic", model: "claude-sonnet-4-6", inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n, cachedInputMicroPerMtok: 30_000_000n };
    const tier = { longContextThresholdTokens: 200_000, longInputMicroPerMtok: 600_000_000n, longOutputMicroPerMtok: 2_250_000_000n };
    await setPrice(t.db, { ...sonnet, ...tier, effectiveFrom: new Date(Date.now() - 1_000) });
    const row = (await currentPrices(t.db)).find((p) => p.model === "claude-sonnet-4-6")!;
    expect(tokenPriceOf(row).longContext).toEqual({ thresholdTokens: 200_000, inputMicroPerMtok: 600_000_000n, outputMicroPerMtok: 2_250_000_000n, cachedInputMicroPerMtok: null, cacheWriteMicroPerMtok: null, cacheWrite1hMicroPerMtok: null });
    // The row, as the router prices with it: one token over, all at the tier (cache reads at 0.30 × 2).
    expect(usageCostMicro({ promptTokens: 200_001, completionTokens: 10, cachedTokens: 100_000 }, tokenPriceOf(row))).toBe(100_001n * 600n + 100_000n * 60n + 10n * 2_250n);

    const refusal = (input: Partial<PriceInput>) =>
      setPrice(t.db, { ...sonnet, model: "m", ...input }).then(
        () => "accepted",
        (err: Error) => String(err.cause ?? err),
      );
    expect(await refusal({ longContextThresholdTokens: 200_000 })).toMatch(/prices_long_context/);
    expect(await refusal({ longContextThresholdTokens: 200_000, longInputMicroPerMtok: 1n })).toMatch(/prices_long_context/);
    expect(await refusal({ longInputMicroPerMtok: 1n, longOutputMicroPerMtok: 1n })).toMatch(/prices_long_context/);
    expect(await refusal({ longCachedInputMicroPerMtok: 1n })).toMatch(/prices_long_context/);
    expect(await refusal({ ...tier, longContextThresholdTokens: 0 })).toMatch(/prices_long_context/);
    expect(await refusal({ ...tier, longOutputMicroPerMtok: -1n })).toMatch(/prices_nonnegative/);
    expect(await refusal({ ...tier, longCacheWrite1hMicroPerMtok: -1n })).toMatch(/prices_nonnegative/);
    expect(await refusal({ ...tier, longCacheWriteMicroPerMtok: 750_000_000n })).toBe("accepted");
  });
});
