ALTER TABLE "prices" DROP CONSTRAINT "prices_nonnegative";--> statement-breakpoint
ALTER TABLE "prices" ADD COLUMN "audio_input_micro_per_mtok" bigint;--> statement-breakpoint
ALTER TABLE "prices" ADD COLUMN "image_token_multiplier_permille" integer;--> statement-breakpoint
ALTER TABLE "prices" ADD CONSTRAINT "prices_nonnegative" CHECK ("prices"."input_micro_per_mtok" >= 0 and "prices"."output_micro_per_mtok" >= 0 and coalesce("prices"."cached_input_micro_per_mtok", 0) >= 0 and coalesce("prices"."cache_write_micro_per_mtok", 0) >= 0 and coalesce("prices"."cache_write_1h_micro_per_mtok", 0) >= 0 and coalesce("prices"."audio_input_micro_per_mtok", 0) >= 0 and coalesce("prices"."image_token_multiplier_permille", 1000) > 0);--> statement-breakpoint
-- Hand-added: gpt-4o-mini's image rate was a model-name rule in the router
-- (any model whose name holds "gpt-4o-mini"); its price rows carry it now.
-- 33.336× (2,833 + 5,667 a tile against gpt-4o's 85 + 170, rounded up).
UPDATE "prices" SET "image_token_multiplier_permille" = 33336 WHERE strpos("model", 'gpt-4o-mini') > 0;
