// GET /readyz — Redis (or the in-process store) and Postgres answer; and what
// kinds of state this router runs on (no addresses: the endpoint is public).
import type { Hono } from "hono";
import type { AppDeps, AppEnv } from "../../deps.ts";
import { publicSummary } from "../../observability/summary.ts";

export function registerReadyz(app: Hono<AppEnv>, deps: AppDeps): void {
  app.get("/readyz", async (c) => {
    const r = await deps.readiness();
    const ok = r.redis && r.postgres;
    return c.json(
      { status: ok ? "ready" : "not_ready", redis: r.redis, postgres: r.postgres, workers: deps.directory.all().length, ...(deps.summary ? { state: publicSummary(deps.summary) } : {}) },
      ok ? 200 : 503,
    );
  });
}
