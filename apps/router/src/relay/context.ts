// What one request carries through dispatch and relay: its id, deadlines,
// the client's abort signal, timing, logger and metrics.
import type { ServerResponse } from "node:http";
import type { Deadlines } from "../config.ts";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";

export interface RelayContext {
  requestId: string;
  deadlines: Deadlines;
  /** Aborted when the client goes away or the total deadline passes. */
  signal: AbortSignal;
  /** performance.now() at arrival. */
  startedAt: number;
  log: Logger;
  metrics: RouterMetrics;
  maxAttempts: number;
  route: string;
  /** The Node response, when served by @hono/node-server: streams write to it directly. */
  outgoing?: ServerResponse;
}
