// Everything createApp needs, passed in: server.ts wires real parts, tests
// wire in-memory or real ones.
import type { IncomingMessage, ServerResponse } from "node:http";
import type { Config } from "./config.ts";
import type { KeyResolver } from "./auth/resolver.ts";
import type { KeyOwner } from "./auth/key-store.ts";
import type { BudgetGuard } from "./billing/guard.ts";
import type { Logger } from "./observability/log.ts";
import type { RouterMetrics } from "./observability/metrics.ts";
import type { BackendChain } from "./routing/chain.ts";
import type { WorkerDirectory } from "./routing/directory.ts";
import type { AdmissionGate } from "./admission/gate.ts";
import type { LeaseService } from "./leases/service.ts";
import type { StartupSummary } from "./observability/summary.ts";
import type { RateLimiter } from "./ratelimit/limiter.ts";
import type { ResponseStore } from "@switchyard/state";
import type { Span, Tracing } from "./observability/tracing.ts";

export interface Readiness {
  redis: boolean;
  postgres: boolean;
  /** The router is shutting down (SIGTERM): not ready, whatever Redis and Postgres say. */
  draining?: boolean;
}

export interface AppDeps {
  config: Config;
  keys: KeyResolver;
  directory: WorkerDirectory;
  /** A tenant's fall-through chain for a model: workers, then paid APIs. */
  chain: BackendChain;
  /** Money: budget holds before paid attempts, the ledger row and spend after. */
  guard: BudgetGuard;
  metrics: RouterMetrics;
  log: Logger;
  readiness: () => Promise<Readiness>;
  /** Admission control: priority bands and fair queues in front of the worker pools (absent: none). */
  admission?: AdmissionGate;
  /** OpenTelemetry traces (absent: telemetry off, no SDK loaded). */
  tracing?: Tracing;
  /** Per-tenant and per-key rate limits (absent: none). */
  rateLimiter?: RateLimiter;
  /** Stored /v1/responses answers, shared by every router (Redis); absent: kept in this app's memory. */
  responses?: ResponseStore;
  /** GPU leases (docs/LEASES.md); without them /v1/leases is not served. */
  leases?: LeaseService;
  /** What this process is using (registry, budgets, ledger, database, chain, providers), for /readyz. */
  summary?: StartupSummary;
  /** Requests this router process's public listener is answering now (router.maxInFlight); absent when the app is called in-process. */
  inFlight?: () => number;
  /** Aborted when a shutting-down router's router.drainMs has passed: requests still running end (one SSE error event). */
  shutdown?: AbortSignal;
}

export type AppEnv = {
  /** Set by @hono/node-server; absent when the app is called in-process (tests). */
  Bindings: { incoming?: IncomingMessage; outgoing?: ServerResponse };
  Variables: {
    requestId: string;
    startedAt: number;
    log: Logger;
    tenant: KeyOwner;
    route: string;
    /** The answer is an SSE stream (its duration is observed when it ends). */
    streaming: boolean;
    /** The request's root span (only while tracing: read it with `?? noSpan`). */
    span: Span;
    /** The JSON body as the route's schema parsed it (middleware.ts jsonBody). */
    body: unknown;
  };
};
