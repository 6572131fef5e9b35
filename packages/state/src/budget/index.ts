export * from "./store.ts";
export * from "./day.ts";
export { MemoryBudgetStore, type MemoryBudgetStoreOptions } from "./memory.ts";
export { RedisBudgetStore, budgetKeys, type RedisBudgetStoreOptions } from "./redis.ts";
export { RedisIntentJournal, intentStreamKey, intentProgressKey, type ClaimedIntent, type IntentJournalOptions } from "./intents.ts";
