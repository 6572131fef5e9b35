CREATE TABLE "rate_limits" (
	"tenant_id" bigint NOT NULL,
	"key_prefix" text DEFAULT '' NOT NULL,
	"requests_per_minute" bigint,
	"tokens_per_minute" bigint,
	"updated_at" timestamp with time zone DEFAULT now() NOT NULL,
	CONSTRAINT "rate_limits_tenant_id_key_prefix_pk" PRIMARY KEY("tenant_id","key_prefix"),
	CONSTRAINT "rate_limits_requests_nonnegative" CHECK ("rate_limits"."requests_per_minute" >= 0),
	CONSTRAINT "rate_limits_tokens_nonnegative" CHECK ("rate_limits"."tokens_per_minute" >= 0)
);
--> statement-breakpoint
ALTER TABLE "rate_limits" ADD CONSTRAINT "rate_limits_tenant_id_tenants_id_fk" FOREIGN KEY ("tenant_id") REFERENCES "public"."tenants"("id") ON DELETE cascade ON UPDATE no action;