// DELETE /v1/leases/{id} — release the tenant's lease: its worker is free at
// once. Releasing a lease that already ended answers how it ended (200), so a
// retried DELETE is harmless; another tenant's lease is a 404.
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate } from "../../../middleware.ts";
import { leaseAnswer, leaseJson } from "./view.ts";
import { documented } from "../../../openapi/marks.ts";

export function registerReleaseLease(app: RouteTable, deps: AppDeps): void {
  const leases = deps.leases;
  if (!leases) return;
  app.delete(
    "/v1/leases/:id",
    authenticate(deps),
    documented(
      { summary: "Release a lease", tag: "leases", operationId: "releaseLease", responses: { 200: { description: "the lease as it ended", json: leaseAnswer } }, errors: ["lease_not_found", "lease_store_unavailable"] },
      async (c) => c.json(leaseJson(await leases.release(c.get("tenant").tenantId, c.req.param("id") ?? ""))),
    ),
  );
}
