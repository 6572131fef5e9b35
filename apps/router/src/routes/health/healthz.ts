// GET /healthz — the process is alive (no dependencies checked).
import type { Hono } from "hono";
import type { AppEnv } from "../../deps.ts";

export function registerHealthz(app: Hono<AppEnv>): void {
  app.get("/healthz", (c) => c.json({ status: "ok" }));
}
