export * from "./tenants.ts";
export * from "./api_keys.ts";
export * from "./budgets.ts";
export * from "./prices.ts";
export * from "./spend_ledger.ts";
export * from "./budget_alerts.ts";
export * from "./leases.ts";
export * from "./rate_limits.ts";
