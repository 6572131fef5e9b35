CREATE TYPE "public"."cost_source" AS ENUM('provider', 'price_table', 'estimate');--> statement-breakpoint
CREATE TYPE "public"."request_status" AS ENUM('ok', 'error', 'client_cancelled', 'timeout');--> statement-breakpoint
CREATE TABLE "budgets" (
	"tenant_id" bigint PRIMARY KEY NOT NULL,
	"daily_limit_cents" bigint NOT NULL,
	"time_zone" text DEFAULT 'UTC' NOT NULL,
	"alert_thresholds" integer[] DEFAULT '{80,100}' NOT NULL,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "budgets_daily_limit_nonnegative" CHECK ("budgets"."daily_limit_cents" >= 0)
);
--> statement-breakpoint
CREATE TABLE "prices" (
	"backend" text NOT NULL,
	"model" text NOT NULL,
	"input_micro_per_mtok" bigint NOT NULL,
	"output_micro_per_mtok" bigint NOT NULL,
	"cached_input_micro_per_mtok" bigint,
	"effective_from" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "prices_backend_model_effective_from_pk" PRIMARY KEY("backend","model","effective_from"),
	CONSTRAINT "prices_nonnegative" CHECK ("prices"."input_micro_per_mtok" >= 0 and "prices"."output_micro_per_mtok" >= 0 and coalesce("prices"."cached_input_micro_per_mtok", 0) >= 0)
);
--> statement-breakpoint
CREATE TABLE "spend_ledger" (
	"request_id" text NOT NULL,
	"tenant_id" bigint NOT NULL,
	"key_id" bigint,
	"backend" text NOT NULL,
	"model" text NOT NULL,
	"worker" text,
	"prompt_tokens" integer DEFAULT 0 NOT NULL,
	"completion_tokens" integer DEFAULT 0 NOT NULL,
	"cached_tokens" integer DEFAULT 0 NOT NULL,
	"cost_micro" bigint NOT NULL,
	"cost_source" "cost_source" NOT NULL,
	"status" "request_status" NOT NULL,
	"started_at" timestamp with time zone NOT NULL,
	"first_token_at" timestamp with time zone,
	"finished_at" timestamp with time zone NOT NULL,
	"ttft_ms" integer,
	"duration_ms" integer NOT NULL,
	"provider_generation_id" text,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "spend_ledger_pkey" PRIMARY KEY("request_id","started_at"),
	CONSTRAINT "spend_ledger_nonnegative" CHECK ("spend_ledger"."cost_micro" >= 0 and "spend_ledger"."prompt_tokens" >= 0 and "spend_ledger"."completion_tokens" >= 0 and "spend_ledger"."cached_tokens" >= 0)
);
--> statement-breakpoint
CREATE TABLE "budget_alerts" (
	"tenant_id" bigint NOT NULL,
	"day" date NOT NULL,
	"threshold" integer NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "budget_alerts_tenant_day_threshold" PRIMARY KEY("tenant_id","day","threshold")
);
--> statement-breakpoint
ALTER TABLE "budgets" ADD CONSTRAINT "budgets_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
ALTER TABLE "budget_alerts" ADD CONSTRAINT "budget_alerts_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;--> statement-breakpoint
CREATE INDEX "spend_ledger_tenant_started_idx" ON "spend_ledger" USING btree ("tenant_id","started_at");