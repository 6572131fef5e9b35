// Fall-through chains: the ordered places a tenant's request may run —
// `local` workers (on this machine), `remote` workers, then OpenRouter and
// Anthropic when configured. A model name maps to the name each kind of
// backend knows (routing.models aliases, or conventions: "vendor/model" is an
// OpenRouter id, "claude-…" an Anthropic one). Free self-hosted backends come
// first by default; paid ones are held against the budget when tried.
import { networkInterfaces, hostname } from "node:os";
import { acceptsNewWork, type WorkerRecord } from "@switchyard/state";
import { providerClaiming, providerOf, type ProviderKey } from "../backends/registry.ts";
import type { Backend } from "../backends/types.ts";
import type { ChainStep, Config } from "../config.ts";
import { describePipeline } from "../pipelines/placement.ts";
import type { WorkerDirectory } from "./directory.ts";
import { defaultRequestClass, type RequestClass } from "./request-class.ts";
import { explainRanking, promoteFree, type AttemptReporter, type Score } from "./scorer.ts";

/** Each configured provider's backend factory, by provider key. */
export type ProviderBackends = Partial<Record<ProviderKey, (model: string) => Backend>>;

export interface Resolution {
  /** Candidates in chain order (the scorer's order within a step). */
  backends: Backend[];
  /** Some step could serve this model at all (else: model_not_found). */
  known: boolean;
  /** How each backend scored, in the order of `backends`. */
  scores: Score[];
  /** The ranking in one line (x-switchyard-route, the debug log). */
  explain(): string;
  /** Routing feedback: an attempt on `backend` starts; the reporter ends it. */
  observe(backend: Backend): AttemptReporter;
}

/** Names that mean a paid backend by convention, as each provider declares (e.g. "vendor/model" is an OpenRouter id). */
export function conventionalUpstream(model: string, step: ProviderKey): string | undefined {
  return providerOf(step).conventionalName(model);
}

/**
 * Whether a worker advertising `name` may be routed for it: when an alias
 * names it as its worker model, or when it is nobody's alias and does not
 * name a paid backend by convention. A worker advertising "openai/gpt-4o-mini"
 * or "claude-…" must never receive prompts meant for a paid provider.
 */
export function workerMayServe(routing: Config["routing"], name: string): boolean {
  for (const alias of Object.values(routing.models)) if (alias.worker === name) return true;
  if (Object.hasOwn(routing.models, name)) return false;
  return providerClaiming(name) === undefined;
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

/** Provider backends (one per provider × model name) kept between requests at most. */
const PROVIDER_CACHE_MAX = 1024;

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
    return (Object.hasOwn(this.routing.tenantChains, tenantName) ? this.routing.tenantChains[tenantName] : undefined) ?? this.routing.chain;
  }

  /** The name a kind of backend knows `model` by, if it serves it (admission finds a model's worker pool with it). */
  upstreamName(model: string, step: "worker" | ProviderKey): string | undefined {
    const alias = Object.hasOwn(this.routing.models, model) ? this.routing.models[model] : undefined;
    if (alias) return alias[step];
    // Without an alias a paid backend's name is never a worker's (workerMayServe).
    if (step === "worker") return providerClaiming(model) !== undefined ? undefined : model;
    return conventionalUpstream(model, step);
  }

  private provider(kind: ProviderKey, model: string): Backend | undefined {
    const make = this.providers[kind];
    if (!make) return undefined;
    const key = `${kind}\u0000${model}`;
    let b = this.cache.get(key);
    if (b) {
      // Most recently used last: the eviction below drops the oldest.
      this.cache.delete(key);
    } else {
      b = make(model);
      // Any "vendor/model" a client sends makes a provider backend: bounded, or
      // distinct made-up names would grow the router's memory without limit.
      if (this.cache.size >= PROVIDER_CACHE_MAX) this.cache.delete(this.cache.keys().next().value!);
    }
    this.cache.set(key, b);
    return b;
  }

  /** Provider backends kept (tests look). */
  cachedProviders(): number {
    return this.cache.size;
  }

  /** Worker URL → whether it is on this host: asked per candidate per request, and a URL parse costs more than the rest of the lookup. */
  private readonly localUrls = new Map<string, boolean>();

  isLocal(w: WorkerRecord): boolean {
    let local = this.localUrls.get(w.url);
    if (local === undefined) {
      try {
        local = this.local.has(new URL(w.url).hostname.toLowerCase());
      } catch {
        local = false;
      }
      // Bounded like the provider cache: worker URLs come and go with the registry.
      if (this.localUrls.size >= PROVIDER_CACHE_MAX) this.localUrls.clear();
      this.localUrls.set(w.url, local);
    }
    return local;
  }

  /**
   * The worker pool a request for `model` from this tenant reaches first in
   * its chain (admission gates it): the workers serving the model's worker
   * name and accepting work, when a worker step with one of them comes before
   * any paid step that serves the model; undefined otherwise. A lookup: no
   * scoring, no round-robin turn.
   */
  workerPool(model: string, tenantName: string): string | undefined {
    const name = this.upstreamName(model, "worker");
    if (name === undefined) return undefined;
    const workers = (this.directory.models().get(name) ?? []).filter(acceptsNewWork);
    if (workers.length === 0) return undefined;
    for (const step of this.chainOf(tenantName)) {
      if (step === "local" || step === "remote") {
        if (workers.some((w) => this.isLocal(w) === (step === "local"))) return name;
      } else if (this.providers[step] && this.upstreamName(model, step) !== undefined) {
        return undefined;
      }
    }
    return undefined;
  }

  /**
   * The candidates for one request of class `cls`, ordered. Without a class
   * it is a lookup (e.g. /v1/models): no exploration, no round-robin turn.
   */
  resolve(model: string, tenantName: string, cls?: RequestClass): Resolution {
    const scorer = this.directory.scorer;
    const klass = cls ?? defaultRequestClass;
    let ranked: Array<{ backend: Backend; score: Score }> = [];
    let known = false;
    const workerModel = this.upstreamName(model, "worker");
    const served = workerModel ? this.directory.models().get(workerModel) : undefined;
    const ready = workerModel && served?.length ? this.directory.rank(workerModel, klass, cls !== undefined) : [];
    for (const step of this.chainOf(tenantName)) {
      if (step === "local" || step === "remote") {
        if (!served?.length) continue;
        known = true;
        for (const r of ready) {
          if (this.isLocal(r.item) !== (step === "local")) continue;
          // A split model's pipeline explains its chain (x-switchyard-route).
          const plan = this.directory.pipelineOf(r.item);
          ranked.push({ backend: this.workerBackend(r.item, workerModel!), score: plan ? { ...r.score, id: describePipeline(plan) } : r.score });
        }
      } else {
        const name = this.upstreamName(model, step);
        const b = name ? this.provider(step, name) : undefined;
        if (b) {
          known = true;
          ranked.push({ backend: b, score: scorer.scoreBackend(b, klass) });
        }
      }
    }
    if (scorer.cfg.mode === "score") ranked = promoteFree(ranked, scorer.cfg.freeComparableRatio);
    const scores = ranked.map((r) => r.score);
    // A request's worker counts as taken from now on, not only from its attempt's start.
    const first = ranked[0]?.backend;
    const unpick = cls !== undefined && first?.workerId !== undefined ? scorer.pick(first.id) : undefined;
    return {
      backends: ranked.map((r) => r.backend),
      known,
      scores,
      // Read when the answer goes out: a pipeline names the replicas its head was sent (leases narrow them).
      explain: () => explainRanking(ranked.map((r) => (r.backend.describe ? { ...r.score, id: r.backend.describe() } : r.score))),
      observe: (backend) => {
        unpick?.();
        return scorer.begin(backend, klass);
      },
    };
  }
}
