// The Kubernetes manifests leave a router the time its drain needs: the
// preStop sleep, then router.drainMs (as the ConfigMap's switchyard.yaml sets
// it, through the real loadConfig) and a margin for the ledger flush, all
// inside terminationGracePeriodSeconds — so a rolling restart never SIGKILLs
// a router that is still finishing streams or flushing rows.
import { readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { parse as parseYaml } from "yaml";
import { loadConfig } from "../../apps/router/src/config.ts";

const base = path.resolve(import.meta.dirname, "../../deploy/k8s/base");
/** Seconds kept for what follows the drain: ledger flush, closing Redis and Postgres. */
const FLUSH_MARGIN_S = 10;

interface RouterPod {
  terminationGracePeriodSeconds: number;
  containers: Array<{ name: string; lifecycle?: { preStop?: { exec?: { command: string[] } } } }>;
}

describe("router drain budget in deploy/k8s/base", () => {
  it("preStop + router.drainMs + a flush margin fit terminationGracePeriodSeconds, and the grace is inside drainMs", () => {
    const deployment = parseYaml(readFileSync(path.join(base, "router-deployment.yaml"), "utf8")) as { spec: { template: { spec: RouterPod } } };
    const pod = deployment.spec.template.spec;
    const router = pod.containers.find((c) => c.name === "router")!;
    const command = router.lifecycle?.preStop?.exec?.command ?? [];
    expect(command[0]).toBe("sleep");
    const preStopS = Number(command.at(-1));
    const config = loadConfig({ file: path.join(base, "switchyard.yaml"), env: {} });
    expect(config.router.drainMs).toBeGreaterThan(0);
    expect(config.router.drainGraceMs).toBeLessThanOrEqual(config.router.drainMs);
    expect(preStopS + config.router.drainMs / 1000 + FLUSH_MARGIN_S).toBeLessThanOrEqual(pod.terminationGracePeriodSeconds);
  });
});
