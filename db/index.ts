export * from "./client.ts";
export * from "./embedded.ts";
export * from "./keys.ts";
export * from "./migrate.ts";
export * from "./tenants.ts";
export * as schema from "./schema/index.ts";
export * from "./ledger.ts";
export * from "./money.ts";
export type { NewLedgerRow, LedgerRow, RequestStatus, CostSource } from "./schema/index.ts";
