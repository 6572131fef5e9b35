// GET /readyz — Redis (or the in-process store) and Postgres answer.
import type { Hono } from "hono";
import type { AppDeps, AppEnv } from "../../deps.ts";

export function registerReadyz(app: Hono<AppEnv>, deps: AppDeps): void {
  app.get("/readyz", async (c) => {
    const r = await deps.readiness();
    const ok = r.redis && r.postgres;
    return c.json({ status: ok ? "ready" : "not_ready", redis: r.redis, postgres: r.postgres, workers: deps.directory.all().length }, ok ? 200 : 503);
  });
}
