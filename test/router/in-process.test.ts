// createApp(deps) called in-process (app.request), with the in-memory twins
// of the key store and registry: the path tests and embedders use, where
// streams go through a WHATWG ReadableStream instead of the Node socket.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { hashKey } from "@switchyard/db";
import { MemoryBudgetStore, MemoryRegistryStore } from "@switchyard/state";
import { createApp, loadConfig, silentLogger } from "@switchyard/router";
import { MemoryKeyStore } from "../../apps/router/src/auth/key-store.ts";
import { KeyResolver } from "../../apps/router/src/auth/resolver.ts";
import { WorkerBackend, WorkerConnections } from "../../apps/router/src/backends/worker/client.ts";
import { RouterMetrics } from "../../apps/router/src/observability/metrics.ts";
import { MemoryLedgerSink } from "../../apps/router/src/billing/ledger.ts";
import { WorkerDirectory } from "../../apps/router/src/routing/directory.ts";
import { BackendChain } from "../../apps/router/src/routing/chain.ts";
import { BudgetGuard } from "../../apps/router/src/billing/guard.ts";
import { StaticBudgets } from "../../apps/router/src/billing/budgets.ts";
import { StaticPriceBook } from "../../apps/router/src/billing/prices.ts";
import { SimWorker } from "#testkit/sim-worker";

const KEY = "sy_0badc0de_inprocessinprocessinprocessinprocess";
const registry = new MemoryRegistryStore();
const keys = new MemoryKeyStore();
keys.byHash.set(hashKey(KEY), { keyId: 1, prefix: "sy_0badc0de", tenantId: 1, tenantName: "mem", revoked: false });
const config = loadConfig({ env: {}, overrides: { "deadlines.idleMs": 300 } });
const directory = new WorkerDirectory(registry, 50, silentLogger);
const connections = new WorkerConnections({ connectTimeoutMs: 1000 });
const metrics = new RouterMetrics();
const ledger = new MemoryLedgerSink();
const app = createApp({
  config,
  keys: new KeyResolver(keys, 1000),
  directory,
  chain: new BackendChain(config.routing, directory, (w, model) => new WorkerBackend(w, connections, model)),
  guard: new BudgetGuard({
    store: new MemoryBudgetStore(),
    budgets: new StaticBudgets(),
    prices: new StaticPriceBook(),
    ledger,
    alerts: async () => true,
    billing: config.billing,
    log: silentLogger,
    metrics,
  }),
  metrics,
  log: silentLogger,
  readiness: async () => ({ redis: true, postgres: true }),
});
let ok: SimWorker;
let dropper: SimWorker;

beforeAll(async () => {
  ok = await new SimWorker({ id: "mem-ok", models: ["m-ok"], registry, behavior: { tokens: 3 } }).start();
  dropper = await new SimWorker({ id: "mem-drop", models: ["m-drop"], registry, behavior: { tokens: 6, stallAfterEvents: 2 } }).start();
  await directory.start();
});

afterAll(async () => {
  directory.stop();
  await ok.stop();
  await dropper.stop();
  await connections.close();
});

const post = (model: string) =>
  app.request("/v1/chat/completions", {
    method: "POST",
    headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ model, stream: true, messages: [{ role: "user", content: "hi" }] }),
  });

describe("in-process app", () => {
  it("streams through a ReadableStream and ends with [DONE]", async () => {
    const res = await post("m-ok");
    expect(res.status).toBe(200);
    const events = (await res.text()).split("\n\n").filter(Boolean);
    expect(events.at(-1)).toBe("data: [DONE]");
    expect(events).toHaveLength(3 + 2);
  });

  it("ends a stalled stream with exactly one error event", async () => {
    const res = await post("m-drop");
    const events = (await res.text()).split("\n\n").filter(Boolean);
    expect(events).toHaveLength(3);
    expect(events[2]).toMatch(/^data: \{"error":\{"message":"idle deadline/);
  });
});
