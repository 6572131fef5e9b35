ALTER TYPE "public"."cost_source" ADD VALUE 'provider_lookup';--> statement-breakpoint
ALTER TYPE "public"."cost_source" ADD VALUE 'usage_on_crash';--> statement-breakpoint
ALTER TYPE "public"."cost_source" ADD VALUE 'hold_on_crash';