export * from "./store.ts";
export * from "./day.ts";
export { MemoryBudgetStore, type MemoryBudgetStoreOptions } from "./memory.ts";
export { RedisBudgetStore, budgetKeys, type RedisBudgetStoreOptions } from "./redis.ts";
export { RedisIntentJournal, intentStreamKey, intentProgressKey, intentFinishedKey, intentOpenedKey, INTENT_RESEND_WINDOW_MS, type ClaimedIntent, type IntentJournalOptions } from "./intents.ts";
export { watchLedgerStream, ledgerWatchCommands, ledgerMarkKey, streamIdBefore, type LedgerStreamState } from "./ledger-watch.ts";
