// What one request carries through dispatch and relay: its id, deadlines,
// the client's abort signal, timing, logger and metrics.
import type { AbortLike } from "../abort.ts";
import type { ServerResponse } from "node:http";
import type { Backend } from "../backends/types.ts";
import type { BudgetVerdict, SettleOutcome } from "../billing/guard.ts";
import type { Deadlines } from "../config.ts";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import type { AttemptReporter } from "../routing/scorer.ts";

export interface RelayContext {
  requestId: string;
  /** While tracing: the traceparent of the attempt now running (set as each attempt starts, pipeline/trace.ts). */
  traceparent?: string;
  deadlines: Deadlines;
  /** Aborted when the client goes away or the total deadline passes. */
  signal: AbortLike;
  /** Aborted when the router stops and router.drainMs has passed: the request ends (RouterShuttingDown). */
  shutdown?: AbortSignal;
  /** performance.now() at arrival. */
  startedAt: number;
  log: Logger;
  metrics: RouterMetrics;
  maxAttempts: number;
  route: string;
  /** The Node response, when served by @hono/node-server: streams write to it directly. */
  outgoing?: ServerResponse;
  /** Upstream usage was asked for on the client's behalf: don't forward the usage-only chunk. */
  stripUsage?: boolean;
  /** Called once per dispatched request with how it ended (the ledger row). */
  settle?: (outcome: SettleOutcome) => void;
  /**
   * Asked before each attempt: a paid backend is held against the tenant's
   * budget here, or skipped. `patch` is merged into the body for that attempt.
   */
  /** A verdict at once when there is nothing to wait for (a free backend), else its promise. */
  admit?: (backend: Backend) => BudgetVerdict | Promise<BudgetVerdict>;
  /**
   * An admitted attempt failed before its first byte reached the client:
   * nothing was charged — unless the upstream had `accepted` it (2xx
   * headers), which a paid provider bills (its prompt) even so. `status`:
   * how the attempt ended (an accepted one's ledger row keeps it).
   */
  release?: (backend: Backend, accepted: boolean, status: "timeout" | "client_cancelled" | "error") => void;
  /**
   * Routing feedback: called as an attempt on `backend` starts; the reporter
   * it returns is called once when that attempt ends (latency, ok/failed).
   */
  observe?: (backend: Backend) => AttemptReporter;
  /** Extra headers on the answer (x-switchyard-route when asked for). */
  headers?: Record<string, string>;
  /** Continue a stream that broke mid-way on another free backend (opt-in). */
  resume?: { maxResumes: number };
  /** The registry routed from: a whole answer is waited for from a worker while the registry lists it (dispatch). */
  workers?: { listed(workerId: string): boolean };
}
