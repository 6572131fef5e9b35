-- Custom migration: the finance views count crash-finished rows apart —
-- requests another router finished after the serving one died, whose cost
-- came from the provider's lookup, the last usage seen, or the hold
-- (cost_source provider_lookup | usage_on_crash | hold_on_crash). The new
-- columns go last (CREATE OR REPLACE VIEW may only append). The sources are
-- compared as text: the enum values are added in this same transaction.
CREATE OR REPLACE VIEW "spend_daily" AS
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
	round(sum(l.cost_micro)::numeric / 100000000, 8) AS cost_usd,
	count(*) FILTER (WHERE l.cost_source::text IN ('provider_lookup', 'usage_on_crash', 'hold_on_crash'))::bigint AS crash_finished_requests,
	coalesce(sum(l.cost_micro) FILTER (WHERE l.cost_source::text IN ('provider_lookup', 'usage_on_crash', 'hold_on_crash')), 0)::bigint AS crash_finished_cost_micro,
	count(*) FILTER (WHERE l.cost_source::text = 'hold_on_crash')::bigint AS hold_on_crash_requests
FROM spend_ledger l
LEFT JOIN tenants t ON t.id = l.tenant_id
LEFT JOIN budgets b ON b.tenant_id = l.tenant_id
GROUP BY l.tenant_id, t.name, 3, l.backend, l.model;
--> statement-breakpoint
CREATE OR REPLACE VIEW "spend_vs_budget" AS
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
	END AS percent_used,
	sum(d.crash_finished_requests)::bigint AS crash_finished_requests,
	sum(d.crash_finished_cost_micro)::bigint AS crash_finished_cost_micro
FROM spend_daily d
LEFT JOIN budgets b ON b.tenant_id = d.tenant_id
GROUP BY d.tenant_id, d.tenant_name, d.day, b.daily_limit_cents;
