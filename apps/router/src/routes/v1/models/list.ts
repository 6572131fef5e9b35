// GET /v1/models — models served by live workers right now.
import type { Hono } from "hono";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate } from "../../../middleware.ts";

export function registerListModels(app: Hono<AppEnv>, deps: AppDeps): void {
  app.get("/v1/models", authenticate(deps), (c) => {
    const data = [...deps.directory.models()].sort(([a], [b]) => a.localeCompare(b)).map(([id, workers]) => ({
      id,
      object: "model" as const,
      created: Math.floor(Math.min(...workers.map((w) => w.startedAt)) / 1000),
      owned_by: "switchyard",
      workers: workers.length,
      ready: workers.some((w) => w.state === "ready" || w.state === "degraded"),
    }));
    return c.json({ object: "list", data });
  });
}
