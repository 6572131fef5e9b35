// Stored /v1/responses answers, so a later request on any router can continue
// one with previous_response_id. Each is kept per tenant with a TTL: a
// tenant's id names nothing in another tenant's space. The record is the
// router's JSON text; the store neither reads nor changes it.

export interface ResponseStore {
  /** Keeps `record` under (tenant, id) for `ttlMs`, replacing any earlier one. */
  put(tenantId: number, id: string, record: string, ttlMs: number): Promise<void>;
  /** The record, or undefined when there is none for this tenant (never stored, expired, deleted, or another tenant's). */
  get(tenantId: number, id: string): Promise<string | undefined>;
  /** Deletes it; false when there was none for this tenant. */
  delete(tenantId: number, id: string): Promise<boolean>;
}

/** A response id as the router mints them: `resp_` and 32 hex digits (anything else is looked up nowhere). */
export const RESPONSE_ID = /^resp_[0-9a-f]{32}$/;

export function checkResponseKey(tenantId: number, id: string): void {
  if (!Number.isSafeInteger(tenantId) || tenantId < 0) throw new Error(`response store: bad tenant id ${tenantId}`);
  if (!RESPONSE_ID.test(id)) throw new Error("response store: bad response id");
}
