// Fall-through chains: the ordered places a tenant's request may run —
// `local` workers (on this machine), `remote` workers, then OpenRouter and
// Anthropic when configured. A model name maps to the name each kind of
// backend knows (routing.models aliases, or conventions: "vendor/model" is an
// OpenRouter id, "claude-…" an Anthropic one). Free self-hosted backends come
// first by default; paid ones are held against the budget when tried.
import { networkInterfaces, hostname } from "node:os";
import type { WorkerRecord } from "@switchyard/state";
import type { Backend } from "../backends/types.ts";
import type { ChainStep, Config } from "../config.ts";
import type { WorkerDirectory } from "./directory.ts";

export interface ProviderBackends {
  openrouter?: (model: string) => Backend;
  anthropic?: (model: string) => Backend;
}

export interface Resolution {
  /** Candidates in chain order (workers least-loaded first within a step). */
  backends: Backend[];
  /** Some step could serve this model at all (else: model_not_found). */
  known: boolean;
}

/** Addresses that mean "this machine". */
function localHosts(): Set<string> {
  const hosts = new Set(["localhost", "127.0.0.1", "::1", "[::1]", hostname().toLowerCase()]);
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      hosts.add(a.address.toLowerCase());
      if (a.family === "IPv6") hosts.add(`[${a.address.toLowerCase()}]`);
    }
  }
  return hosts;
}

export class BackendChain {
  private readonly local = localHosts();
  private readonly cache = new Map<string, Backend>();

  constructor(
    private readonly routing: Config["routing"],
    private readonly directory: WorkerDirectory,
    private readonly workerBackend: (worker: WorkerRecord, model: string) => Backend,
    private readonly providers: ProviderBackends = {},
  ) {}

  chainOf(tenantName: string): readonly ChainStep[] {
    return this.routing.tenantChains[tenantName] ?? this.routing.chain;
  }

  private upstreamName(model: string, step: "worker" | "openrouter" | "anthropic"): string | undefined {
    const alias = this.routing.models[model];
    if (alias) return alias[step];
    if (step === "worker") return model;
    if (step === "openrouter") return /^[\w.-]+\/[\w.:-]+$/.test(model) ? model : undefined;
    return model.startsWith("claude-") ? model : undefined;
  }

  private provider(kind: "openrouter" | "anthropic", model: string): Backend | undefined {
    const make = this.providers[kind];
    if (!make) return undefined;
    const key = `${kind}\u0000${model}`;
    let b = this.cache.get(key);
    if (!b) {
      b = make(model);
      this.cache.set(key, b);
    }
    return b;
  }

  isLocal(w: WorkerRecord): boolean {
    try {
      return this.local.has(new URL(w.url).hostname.toLowerCase());
    } catch {
      return false;
    }
  }

  resolve(model: string, tenantName: string): Resolution {
    const backends: Backend[] = [];
    let known = false;
    const workerModel = this.upstreamName(model, "worker");
    const served = workerModel ? this.directory.models().get(workerModel) : undefined;
    const ready = workerModel && served?.length ? this.directory.candidates(workerModel) : [];
    for (const step of this.chainOf(tenantName)) {
      if (step === "local" || step === "remote") {
        if (!served?.length) continue;
        known = true;
        for (const w of ready) if (this.isLocal(w) === (step === "local")) backends.push(this.workerBackend(w, workerModel!));
      } else {
        const name = this.upstreamName(model, step);
        const b = name ? this.provider(step, name) : undefined;
        if (b) {
          known = true;
          backends.push(b);
        }
      }
    }
    return { backends, known };
  }
}
