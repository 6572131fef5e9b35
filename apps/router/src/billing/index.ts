// The router's money surface for the CLI and benches (`@switchyard/router/billing`):
// rebuilding a tenant's day from the ledger, and the Redis ledger buffer.
export { reconcileBudgetDay } from "./reconcile.ts";
export { encodeLedgerRow, ledgerStreamKey, RedisLedgerBuffer } from "./ledger-stream.ts";
