// Starts a real worker agent (real engine, real models) registered in the
// test router's Redis registry.
import { startAgent, type AgentHandle, binaryPath } from "@switchyard/agent";
import { existsSync } from "node:fs";
import type { RouterFixture } from "./router.ts";
import { waitFor } from "./env.ts";

export const WORKER_TOKEN = "test-worker-token-0123456789";

export function engineBinary(): string {
  const bin = process.env.SWITCHYARD_ENGINE_BIN ?? binaryPath("cpu");
  if (!existsSync(bin)) throw new Error(`engine binary ${bin} missing: run 'node --import tsx scripts/prepare.ts' (npm test does) first`);
  return bin;
}

export async function startTestWorker(fx: RouterFixture, opts: { id: string; models?: string[]; maxBatch?: number; drainGraceMs?: number; engineStallMs?: number; log?: (msg: string, fields?: Record<string, unknown>) => void } = { id: "w1" }): Promise<AgentHandle> {
  const agent = await startAgent({
    registry: fx.registry,
    models: opts.models ?? ["smollm2-135m-instruct", "all-minilm-l6-v2"],
    token: WORKER_TOKEN,
    device: "cpu",
    engineBinary: engineBinary(),
    workerId: opts.id,
    maxBatch: opts.maxBatch ?? 8,
    maxSeqLen: 1024,
    drainGraceMs: opts.drainGraceMs,
    ...(opts.engineStallMs !== undefined ? { engineStallMs: opts.engineStallMs } : {}),
    log: opts.log ?? (() => {}),
  });
  await agent.supervisor.whenReady();
  await waitFor(() => fx.router.deps.directory.candidates(agent.models[0]!.name).some((w) => w.id === agent.id), { timeoutMs: 5000, what: "worker ready in router" });
  return agent;
}
