// GET /healthz and /readyz on the worker (no credential, for probes and
// `switchyard workers`). /healthz: the process answers, with the engine's
// state and the work in flight. /readyz: 200 only while the worker takes new
// work — its engine loaded and warm (`ready`, or `degraded` on the CPU
// fallback) and not draining — so a load balancer or kubelet stops sending
// the moment a drain starts.
import type { Hono } from "hono";
import type { WorkerContext } from "../context.ts";

export function registerHealth(app: Hono, ctx: WorkerContext): void {
  const state = () => (ctx.draining ? "draining" : ctx.supervisor.state);
  app.get("/healthz", (c) => c.json({ status: "ok", state: state(), inFlight: ctx.inFlight }));
  app.get("/readyz", (c) => {
    const s = state();
    const ready = (s === "ready" || s === "degraded") && ctx.supervisor.client?.alive === true;
    return c.json({ ready, state: s }, ready ? 200 : 503);
  });
}
