-- Custom migration: drizzle-kit cannot express declarative partitioning, so
-- 0001 created spend_ledger as a plain table (keeping drizzle's snapshot in
-- step with db/schema/spend_ledger.ts) and this migration replaces it, still
-- empty, with the same columns partitioned by month on started_at.
-- Months are UTC months. Rows whose month has no partition yet land in
-- spend_ledger_default; spend_ledger_ensure_partition() creates a month's
-- partition and moves any such rows into it. Retention = DROP (or DETACH) a
-- month's partition, never DELETE.
DROP TABLE "spend_ledger";
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
) PARTITION BY RANGE ("started_at");
--> statement-breakpoint
CREATE INDEX "spend_ledger_tenant_started_idx" ON "spend_ledger" USING btree ("tenant_id","started_at");
--> statement-breakpoint
CREATE TABLE "spend_ledger_default" PARTITION OF "spend_ledger" DEFAULT;
--> statement-breakpoint
-- Append-only: rows are never updated; the only deletes allowed are the
-- partition maintenance below moving rows out of the default partition.
CREATE FUNCTION spend_ledger_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	IF TG_OP = 'DELETE' AND current_setting('switchyard.ledger_maintenance', true) = 'on' THEN
		RETURN OLD;
	END IF;
	RAISE EXCEPTION 'spend_ledger is append-only (% refused); drop or detach a partition for retention', TG_OP
		USING ERRCODE = 'insufficient_privilege';
END
$$;
--> statement-breakpoint
CREATE TRIGGER spend_ledger_append_only BEFORE UPDATE OR DELETE ON "spend_ledger"
	FOR EACH ROW EXECUTE FUNCTION spend_ledger_append_only();
--> statement-breakpoint
-- Creates the partition for the UTC month containing `at` unless it exists;
-- returns its name when created, null otherwise. Rows of that month already
-- sitting in the default partition are moved into the new partition.
CREATE FUNCTION spend_ledger_ensure_partition(at timestamptz) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	lo timestamptz := date_trunc('month', at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
	hi timestamptz := (date_trunc('month', at AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC';
	part text := format('spend_ledger_p%s', to_char(at AT TIME ZONE 'UTC', 'YYYY_MM'));
BEGIN
	IF to_regclass(part) IS NOT NULL THEN
		RETURN NULL;
	END IF;
	-- Creating or attaching a partition takes this lock anyway (it scans the
	-- default partition); taking it first also serializes routers racing to
	-- create the same month, and refreshes the catalog for the re-check. It
	-- blocks only inserts routed to the default partition, and only briefly.
	LOCK TABLE spend_ledger_default IN ACCESS EXCLUSIVE MODE;
	IF to_regclass(part) IS NOT NULL THEN
		RETURN NULL;
	END IF;
	IF EXISTS (SELECT 1 FROM spend_ledger_default WHERE started_at >= lo AND started_at < hi) THEN
		EXECUTE format('CREATE TABLE %I (LIKE spend_ledger INCLUDING DEFAULTS INCLUDING CONSTRAINTS)', part);
		PERFORM set_config('switchyard.ledger_maintenance', 'on', true);
		EXECUTE format(
			'WITH moved AS (DELETE FROM spend_ledger_default WHERE started_at >= %L AND started_at < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
			lo, hi, part);
		PERFORM set_config('switchyard.ledger_maintenance', 'off', true);
		EXECUTE format('ALTER TABLE spend_ledger ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
	ELSE
		EXECUTE format('CREATE TABLE %I PARTITION OF spend_ledger FOR VALUES FROM (%L) TO (%L)', part, lo, hi);
	END IF;
	RETURN part;
END
$$;
--> statement-breakpoint
-- Every month from `from_at` to `to_at` (both months included); returns the
-- partitions it created.
CREATE FUNCTION spend_ledger_ensure_partitions(from_at timestamptz, to_at timestamptz) RETURNS SETOF text
LANGUAGE plpgsql AS $$
DECLARE
	m timestamptz := date_trunc('month', from_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC';
	created text;
BEGIN
	WHILE m <= to_at LOOP
		created := spend_ledger_ensure_partition(m);
		IF created IS NOT NULL THEN
			RETURN NEXT created;
		END IF;
		m := (m AT TIME ZONE 'UTC' + interval '1 month') AT TIME ZONE 'UTC';
	END LOOP;
END
$$;
--> statement-breakpoint
SELECT spend_ledger_ensure_partitions(now() - interval '1 month', now() + interval '3 months');
--> statement-breakpoint
-- Finance views. `day` is the tenant's day in its budget time zone (UTC when
-- it has no budget row), taken from started_at, the same instant the router
-- uses to pick the budget day it holds money against. Money: bigint
-- micro-cents, plus exact numeric USD (1 USD = 10^8 micro-cents).
CREATE VIEW "spend_daily" AS
SELECT
	l.tenant_id,
	t.name AS tenant_name,
	(l.started_at AT TIME ZONE coalesce(b.time_zone, 'UTC'))::date AS day,
	l.backend,
	l.model,
	count(*)::bigint AS requests,
	sum(l.prompt_tokens)::bigint AS prompt_tokens,
	sum(l.completion_tokens)::bigint AS completion_tokens,
	sum(l.cached_tokens)::bigint AS cached_tokens,
	sum(l.cost_micro)::bigint AS cost_micro,
	round(sum(l.cost_micro)::numeric / 100000000, 8) AS cost_usd
FROM spend_ledger l
LEFT JOIN tenants t ON t.id = l.tenant_id
LEFT JOIN budgets b ON b.tenant_id = l.tenant_id
GROUP BY l.tenant_id, t.name, 3, l.backend, l.model;
--> statement-breakpoint
CREATE VIEW "spend_vs_budget" AS
SELECT
	d.tenant_id,
	d.tenant_name,
	d.day,
	sum(d.requests)::bigint AS requests,
	sum(d.cost_micro)::bigint AS cost_micro,
	round(sum(d.cost_micro)::numeric / 100000000, 8) AS cost_usd,
	b.daily_limit_cents,
	b.daily_limit_cents * 1000000 AS limit_micro,
	b.daily_limit_cents * 1000000 - sum(d.cost_micro)::bigint AS remaining_micro,
	CASE WHEN b.daily_limit_cents > 0
		THEN round(100 * sum(d.cost_micro)::numeric / (b.daily_limit_cents * 1000000), 2)
	END AS percent_used
FROM spend_daily d
LEFT JOIN budgets b ON b.tenant_id = d.tenant_id
GROUP BY d.tenant_id, d.tenant_name, d.day, b.daily_limit_cents;
