// What the money tests that serve paid inference set up alike: a tenant with
// a key and a daily budget, OpenRouter's price for one model, and a router
// whose only backend is the fake OpenRouter on a Redis of the test's own.
import { createKey, createTenant, setBudget, setPrice, type DbHandle } from "@switchyard/db";
import { loadConfig, silentLogger, startRouter, type RouterHandle } from "@switchyard/router";
import type { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "./env.ts";

/** The model these tests buy, priced at 15 / 60 USD per million tokens by `pricePaidModel`. */
export const PAID_MODEL = "openai/gpt-4o-mini";

/** A new tenant with a key and a budget of `dailyLimitCents` a day. */
export async function budgetedTenant(db: DbHandle, name: string, dailyLimitCents: bigint): Promise<{ tenantId: number; key: string }> {
  const t = await createTenant(db.db, name);
  if (!t.ok) throw new Error(`tenant ${name}`);
  await setBudget(db.db, { tenantId: t.tenant.id, dailyLimitCents });
  return { tenantId: t.tenant.id, key: (await createKey(db.db, t.tenant.id)).key };
}

/** OpenRouter's price for PAID_MODEL, once per database. */
export async function pricePaidModel(db: DbHandle): Promise<void> {
  await setPrice(db.db, { backend: "openrouter", model: PAID_MODEL, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n });
}

/**
 * A router on `redisUrl` under `prefix` that sends PAID_MODEL to the fake,
 * polling fast (registry 50 ms, budgets `billing.refreshMs` 100 ms, ledger
 * flush 50 ms) plus `overrides`; resolved once it has the price.
 */
export async function startPaidRouter(opts: { db: DbHandle; redisUrl: string; prefix: string; fake: FakeOpenRouter; overrides?: Record<string, unknown> }): Promise<RouterHandle> {
  const config = loadConfig({
    env: {},
    overrides: {
      "router.port": 0,
      "router.adminPort": 0,
      "redis.url": opts.redisUrl,
      "redis.keyPrefix": opts.prefix,
      "registry.pollMs": 50,
      "billing.refreshMs": 100,
      "billing.ledgerFlushMs": 50,
      "providers.openrouter": { apiKey: opts.fake.apiKey, baseUrl: opts.fake.url },
      ...opts.overrides,
    },
  });
  const router = await startRouter(config, { db: opts.db, log: silentLogger });
  await waitFor(() => router.deps.guard.deps.prices.price("openrouter", PAID_MODEL), { what: "the price" });
  return router;
}
