// Migration 0014 (prices' media columns) on a database that has prices
// already: gpt-4o-mini's image rate, a model-name rule in the router before
// it, moves onto its rows; every other row keeps 1× and the input price.
import { readFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { currentPrices, migrationsFolder, runMigrations, setPrice } from "@switchyard/db";
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

/** The prices table as migration 0012 left it, and the migrator's records of 0014 and later gone: as a database from before 0014. */
async function backTo0012(): Promise<void> {
  // 0015 (the long-context tier) first: the migrator runs only what is newer than the last it recorded.
  await t.sql.unsafe(`ALTER TABLE "prices" DROP CONSTRAINT "prices_nonnegative", DROP CONSTRAINT "prices_long_context"`);
  await t.sql.unsafe(
    `ALTER TABLE "prices" DROP COLUMN "long_context_threshold_tokens", DROP COLUMN "long_input_micro_per_mtok", DROP COLUMN "long_output_micro_per_mtok", DROP COLUMN "long_cached_input_micro_per_mtok", DROP COLUMN "long_cache_write_micro_per_mtok", DROP COLUMN "long_cache_write_1h_micro_per_mtok"`,
  );
  await t.sql`delete from drizzle.__drizzle_migrations where created_at = ${whenOf("0015_prices_long_context")}`;
  // Then 0014 (its prices_nonnegative went above).
  const constraint0012 = readFileSync(path.join(migrationsFolder, "0012_prices_cache_write_1h.sql"), "utf8")
    .split("--> statement-breakpoint")
    .find((s) => s.includes("ADD CONSTRAINT"))!;
  await t.sql.unsafe(`ALTER TABLE "prices" DROP COLUMN "audio_input_micro_per_mtok", DROP COLUMN "image_token_multiplier_permille"`);
  await t.sql.unsafe(constraint0012);
  await t.sql`delete from drizzle.__drizzle_migrations where created_at = ${whenOf("0014_prices_media")}`;
}

describe("migration 0014_prices_media", () => {
  it("gives every gpt-4o-mini row (any backend, any version) gpt-4o-mini's image multiplier, 33.336×; other rows none", async () => {
    await backTo0012();
    const row = (model: string, backend = "openrouter") => t.sql`insert into prices (backend, model, input_micro_per_mtok, output_micro_per_mtok, effective_from) values (${backend}, ${model}, 15000000, 60000000, now() - interval '1 day')`;
    await row("openai/gpt-4o-mini");
    await row("gpt-4o-mini-2024-07-18", "worker");
    await row("openai/gpt-4o");
    await runMigrations(t.url);
    const byModel = new Map((await currentPrices(t.db)).map((p) => [p.model, p]));
    expect(byModel.get("openai/gpt-4o-mini")).toMatchObject({ imageTokenMultiplierPermille: 33_336, audioInputMicroPerMtok: null });
    expect(byModel.get("gpt-4o-mini-2024-07-18")).toMatchObject({ imageTokenMultiplierPermille: 33_336 });
    expect(byModel.get("openai/gpt-4o")).toMatchObject({ imageTokenMultiplierPermille: null, audioInputMicroPerMtok: null });
    // The check holds the new columns to sense: no negative audio price, no multiplier of 0.
    const refusal = (p: Promise<unknown>) => p.then(() => "accepted", (err: Error) => String(err.cause ?? err));
    expect(await refusal(setPrice(t.db, { backend: "openrouter", model: "m", inputMicroPerMtok: 1n, outputMicroPerMtok: 1n, audioInputMicroPerMtok: -1n }))).toMatch(/prices_nonnegative/);
    expect(await refusal(setPrice(t.db, { backend: "openrouter", model: "m", inputMicroPerMtok: 1n, outputMicroPerMtok: 1n, imageTokenMultiplierPermille: 0 }))).toMatch(/prices_nonnegative/);
  });
});
