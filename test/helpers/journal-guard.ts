// Shared by the in-process money tests (test/money/intents, orphan-race): a
// tenant with a key as the guard sees it, the ledger buffer draining into
// Postgres, and a budget guard with its intent journal, as one router has them.
import { createKey, createTenant, insertLedgerTexts, type KeyOwner } from "@switchyard/db";
import { RedisIntentJournal, type BudgetStore } from "@switchyard/state";
import type { StaticBudgets } from "../../apps/router/src/billing/budgets.ts";
import { BudgetGuard } from "../../apps/router/src/billing/guard.ts";
import { RedisLedgerBuffer } from "../../apps/router/src/billing/ledger-stream.ts";
import type { StaticPriceBook } from "../../apps/router/src/billing/prices.ts";
import { silentLogger } from "../../apps/router/src/observability/log.ts";
import { RouterMetrics } from "../../apps/router/src/observability/metrics.ts";
import type { TestDb, TestRedis } from "./env.ts";

/** A tenant `name` with one key, as the key's owner. */
export async function seedOwner(db: TestDb, name: string): Promise<KeyOwner> {
  const t = await createTenant(db.db, name);
  if (!t.ok) throw new Error("tenant");
  const k = await createKey(db.db, t.tenant.id);
  return { keyId: k.row.id, prefix: k.row.prefix, tenantId: t.tenant.id, tenantName: name, revoked: false };
}

/** The ledger stream on the test's Redis prefix, drained into the test's database by `consumer`. */
export function ledgerBuffer(db: TestDb, redis: TestRedis, consumer: string): RedisLedgerBuffer {
  return new RedisLedgerBuffer(redis.redis, (texts) => insertLedgerTexts(db.db, texts), { prefix: redis.prefix, consumer, batch: 100, flushMs: 20, claimIdleMs: 1_000, log: silentLogger });
}

/** One router's budget guard and intent journal (journal consumer `consumer`) over a shared store, budgets, prices and ledger. */
export function journalGuard(
  redis: TestRedis,
  opts: { consumer: string; store: BudgetStore; budgets: StaticBudgets; prices: StaticPriceBook; ledger: RedisLedgerBuffer; holdTtlMs: number; claimIdleMs: number },
): { intents: RedisIntentJournal; guard: BudgetGuard } {
  const { consumer, store, budgets, prices, ledger, holdTtlMs, claimIdleMs } = opts;
  const intents = new RedisIntentJournal(redis.redis, { prefix: redis.prefix, ledgerKey: ledger.key, consumer, claimIdleMs });
  const guard = new BudgetGuard({
    store,
    budgets,
    prices,
    ledger,
    alerts: async () => false,
    billing: { holdTtlMs, maxOutputTokens: 100, refreshMs: 1_000, ledgerBatch: 100, ledgerFlushMs: 20, ledgerClaimIdleMs: claimIdleMs, orphanScanMs: 50, orphanLookupConcurrency: 4 },
    log: silentLogger,
    metrics: new RouterMetrics(),
    intents,
  });
  return { intents, guard };
}
