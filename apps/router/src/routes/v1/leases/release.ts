// DELETE /v1/leases/{id} — release the tenant's lease: its worker is free at
// once. Releasing a lease that already ended answers how it ended (200), so a
// retried DELETE is harmless; another tenant's lease is a 404.
import type { Hono } from "hono";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import { authenticate } from "../../../middleware.ts";
import { leaseJson } from "./view.ts";

export function registerReleaseLease(app: Hono<AppEnv>, deps: AppDeps): void {
  const leases = deps.leases;
  if (!leases) return;
  app.delete("/v1/leases/:id", authenticate(deps), async (c) => c.json(leaseJson(await leases.release(c.get("tenant").tenantId, c.req.param("id")))));
}
