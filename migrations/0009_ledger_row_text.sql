-- Custom migration: a ledger row as the Redis ledger stream carries it, in
-- Postgres' own row-literal text, read by record_in (issue 14). The drain
-- sends a batch of these as one text, one row per line, and casts each line
-- to this type: half the bytes of the JSON form through Redis and the
-- INSERT, and no JSON parsed per row in Postgres (json_to_recordset cost a
-- quarter more of the backend's CPU per row). started_at comes first: the
-- drain reads a row's month from its first bytes. Rows already in a stream
-- as JSON (written before this) are still read by json_to_recordset.
-- Not a table: nothing is stored in this type.
CREATE TYPE "public"."spend_ledger_text" AS (
	"started_at" timestamp with time zone,
	"request_id" text,
	"tenant_id" bigint,
	"key_id" bigint,
	"backend" text,
	"model" text,
	"worker" text,
	"prompt_tokens" integer,
	"completion_tokens" integer,
	"cached_tokens" integer,
	"cache_write_tokens" integer,
	"cost_micro" bigint,
	"cost_source" "public"."cost_source",
	"status" "public"."request_status",
	"first_token_at" timestamp with time zone,
	"finished_at" timestamp with time zone,
	"ttft_ms" integer,
	"duration_ms" integer,
	"provider_generation_id" text
);
