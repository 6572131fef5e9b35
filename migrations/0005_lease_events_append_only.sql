-- Custom migration: the lease audit is append-only, like the spend ledger —
-- a grant, extension, release or expiry, once recorded, is never rewritten.
-- (Retention, if ever needed, is a deliberate TRUNCATE by an operator.)
CREATE FUNCTION lease_events_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'lease_events is append-only (% refused)', TG_OP
		USING ERRCODE = 'insufficient_privilege';
END
$$;
--> statement-breakpoint
CREATE TRIGGER lease_events_append_only BEFORE UPDATE OR DELETE ON "lease_events"
	FOR EACH ROW EXECUTE FUNCTION lease_events_append_only();
