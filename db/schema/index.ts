export * from "./tenants.ts";
export * from "./api_keys.ts";
