// What the coding-agent CLI tests share (claude-code, codex, gemini-cli):
// a real router with the Anthropic backend on its faithful fake (a priced
// Claude model, a budget), a sim worker serving `sim-chat`, and a fresh home
// and empty project for the CLI, so that nothing of this machine's own
// configuration reaches it.
import { mkdtempSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { setBudget, setPrice } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { waitFor } from "./env.ts";
import { startTestRouter, type RouterFixture } from "./router.ts";

/** The Claude model the fixture prices on the Anthropic backend. */
export const AGENT_CLAUDE = "claude-sonnet-4-6";

export interface AgentCliFixture {
  fx: RouterFixture;
  anthropic: FakeAnthropic;
  worker: SimWorker;
  home: string;
  project: string;
  /** The tenant's ledger rows of requests that started at or after `at`, in order. */
  ledgerRowsSince(at: Date): Promise<Array<{ backend: string; model: string; status: string }>>;
  close(): Promise<void>;
}

export async function startAgentCliFixture(name: string, routerConfig: Record<string, unknown> = {}): Promise<AgentCliFixture> {
  const apiKey = `sk-ant-${name}`;
  const anthropic = await new FakeAnthropic(apiKey).start();
  const fx = await startTestRouter({ "providers.anthropic": { apiKey, baseUrl: anthropic.url }, "billing.refreshMs": 100, ...routerConfig });
  await setPrice(fx.db.db, { backend: "anthropic", model: AGENT_CLAUDE, inputMicroPerMtok: 3_000_000n, outputMicroPerMtok: 15_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 10_000n });
  const worker = await new SimWorker({ id: `${name}-sim`, models: ["sim-chat"], registry: fx.registry, behavior: { tokens: 4 } }).start();
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", AGENT_CLAUDE), { what: "price loaded" });
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "worker registered" });
  const home = mkdtempSync(path.join(os.tmpdir(), `sy-${name}-home-`));
  const project = mkdtempSync(path.join(os.tmpdir(), `sy-${name}-project-`));
  return {
    fx,
    anthropic,
    worker,
    home,
    project,
    async ledgerRowsSince(at) {
      await fx.router.deps.guard.flush();
      return (await fx.db.sql`select backend, model, status from spend_ledger where tenant_id = ${String(fx.tenantId)} and started_at >= ${at.toISOString()} order by started_at`) as unknown as Array<{
        backend: string;
        model: string;
        status: string;
      }>;
    },
    async close() {
      await worker.stop();
      await fx.close();
      await anthropic.stop();
      for (const d of [home, project]) rmSync(d, { recursive: true, force: true });
    },
  };
}
