// GET /healthz on the worker (no credential): the engine's state and the
// work in flight, for probes and `switchyard workers`.
import type { Hono } from "hono";
import type { WorkerContext } from "../context.ts";

export function registerHealth(app: Hono, ctx: WorkerContext): void {
  app.get("/healthz", (c) => c.json({ status: "ok", state: ctx.draining ? "draining" : ctx.supervisor.state, inFlight: ctx.inFlight }));
}
