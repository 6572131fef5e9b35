ALTER TABLE "prices" DROP CONSTRAINT "prices_nonnegative";--> statement-breakpoint
ALTER TABLE "prices" ADD COLUMN "cache_write_micro_per_mtok" bigint;--> statement-breakpoint
ALTER TABLE "spend_ledger" ADD COLUMN "cache_write_tokens" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
ALTER TABLE "prices" ADD CONSTRAINT "prices_nonnegative" CHECK ("prices"."input_micro_per_mtok" >= 0 and "prices"."output_micro_per_mtok" >= 0 and coalesce("prices"."cached_input_micro_per_mtok", 0) >= 0 and coalesce("prices"."cache_write_micro_per_mtok", 0) >= 0);