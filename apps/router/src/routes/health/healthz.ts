// GET /healthz — the process is alive (no dependencies checked).
import * as z from "zod";
import type { AppEnv } from "../../deps.ts";
import type { RouteTable } from "../../route-table.ts";
import { documented } from "../../openapi/marks.ts";

export function registerHealthz(app: RouteTable): void {
  app.get("/healthz", documented({ summary: "Liveness", tag: "health", operationId: "healthz", responses: { 200: { description: "alive", json: z.object({ status: z.literal("ok") }) } } }, (c) => c.json({ status: "ok" })));
}
