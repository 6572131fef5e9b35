CREATE TYPE "public"."lease_event_kind" AS ENUM('granted', 'extended', 'released', 'expired');--> statement-breakpoint
CREATE SEQUENCE "public"."lease_fencing_token_seq" INCREMENT BY 1 MINVALUE 1 MAXVALUE 9223372036854775807 START WITH 1 CACHE 1;--> statement-breakpoint
CREATE TABLE "lease_events" (
	"id" bigserial PRIMARY KEY NOT NULL,
	"tenant_id" bigint NOT NULL,
	"lease_id" text NOT NULL,
	"worker" text NOT NULL,
	"fencing_token" bigint NOT NULL,
	"event" "lease_event_kind" NOT NULL,
	"at" timestamp with time zone NOT NULL,
	"expires_at" timestamp with time zone NOT NULL,
	"created_at" timestamp with time zone DEFAULT now() NOT NULL
);
--> statement-breakpoint
CREATE INDEX "lease_events_lease_idx" ON "lease_events" USING btree ("lease_id");--> statement-breakpoint
CREATE INDEX "lease_events_worker_at_idx" ON "lease_events" USING btree ("worker","at");--> statement-breakpoint
CREATE INDEX "lease_events_tenant_at_idx" ON "lease_events" USING btree ("tenant_id","at");