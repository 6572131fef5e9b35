ALTER TABLE "spend_ledger" ADD COLUMN "cache_write_1h_tokens" integer DEFAULT 0 NOT NULL;--> statement-breakpoint
-- Custom from here (drizzle-kit does not know the views).
-- spend_ledger_text (the stream's row literal) is not altered: a router from
-- before this drains literals with it while routers upgrade, and record_in
-- refuses a literal of another length, so every row one version wrote and
-- the other drained would be dropped. A row with 1-hour cache writes
-- travels as JSON instead (db/ledger.ts, encodeLedgerRow).
-- A paid attempt its provider accepted and the request failed over from has
-- a row of its own (request_id `<request id>/a<n>`, its backend and model,
-- cost_source `estimate`), so spend per backend and model is what each
-- provider bills. It is not a request: `requests` counts the request rows
-- alone (ids without a '/'), `abandoned_attempts` the others; cost_micro
-- and the tokens sum both. The new column goes last (CREATE OR REPLACE VIEW
-- may only append).
CREATE OR REPLACE VIEW "spend_daily" AS
SELECT
	l.tenant_id,
	t.name AS tenant_name,
	(l.started_at AT TIME ZONE coalesce(b.time_zone, 'UTC'))::date AS day,
	l.backend,
	l.model,
	count(*) FILTER (WHERE strpos(l.request_id, '/') = 0)::bigint AS requests,
	sum(l.prompt_tokens)::bigint AS prompt_tokens,
	sum(l.completion_tokens)::bigint AS completion_tokens,
	sum(l.cached_tokens)::bigint AS cached_tokens,
	sum(l.cost_micro)::bigint AS cost_micro,
	round(sum(l.cost_micro)::numeric / 100000000, 8) AS cost_usd,
	count(*) FILTER (WHERE l.cost_source::text IN ('provider_lookup', 'usage_on_crash', 'hold_on_crash'))::bigint AS crash_finished_requests,
	coalesce(sum(l.cost_micro) FILTER (WHERE l.cost_source::text IN ('provider_lookup', 'usage_on_crash', 'hold_on_crash')), 0)::bigint AS crash_finished_cost_micro,
	count(*) FILTER (WHERE l.cost_source::text = 'hold_on_crash')::bigint AS hold_on_crash_requests,
	count(*) FILTER (WHERE strpos(l.request_id, '/') > 0)::bigint AS abandoned_attempts
FROM spend_ledger l
LEFT JOIN tenants t ON t.id = l.tenant_id
LEFT JOIN budgets b ON b.tenant_id = l.tenant_id
GROUP BY l.tenant_id, t.name, 3, l.backend, l.model;
