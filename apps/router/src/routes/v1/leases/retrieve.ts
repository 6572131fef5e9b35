// GET /v1/leases/{id} — one of the tenant's leases: active, released or
// expired. Another tenant's lease is a 404, like one that never existed.
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate } from "../../../middleware.ts";
import { leaseAnswer, leaseJson } from "./view.ts";
import { documented } from "../../../openapi/marks.ts";

export function registerRetrieveLease(app: RouteTable, deps: AppDeps): void {
  const leases = deps.leases;
  if (!leases) return;
  app.get(
    "/v1/leases/:id",
    authenticate(deps),
    documented(
      { summary: "Retrieve a lease", tag: "leases", operationId: "retrieveLease", responses: { 200: { description: "the lease: active, released or expired", json: leaseAnswer } }, errors: ["lease_not_found", "lease_store_unavailable"] },
      async (c) => c.json(leaseJson(await leases.get(c.get("tenant").tenantId, c.req.param("id") ?? ""))),
    ),
  );
}
