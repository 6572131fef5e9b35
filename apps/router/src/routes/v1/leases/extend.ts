// POST /v1/leases/{id}/extend — {duration_s}: the lease then ends duration_s
// from now (never earlier than it already did). Only the holder, only while
// the lease is live: 409 lease_expired after it ended, 404 for others' leases.
import type { Context } from "hono";
import * as z from "zod";
import type { Config } from "../../../config.ts";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import type { LeaseService } from "../../../leases/service.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { leaseAnswer, leaseJson } from "./view.ts";
import { documented } from "../../../openapi/marks.ts";

export function extendLeaseSchema(cfg: Config["leases"]) {
  return z.strictObject({ duration_s: z.number().min(cfg.minDurationS).max(cfg.maxDurationS) });
}

export async function extendLease(c: Context<AppEnv>, leases: LeaseService): Promise<Response> {
  const body = c.get("body") as z.infer<ReturnType<typeof extendLeaseSchema>>;
  const lease = await leases.extend(c.get("tenant").tenantId, c.req.param("id") ?? "", Math.max(1, Math.round(body.duration_s * 1000)));
  return c.json(leaseJson({ lease, status: "active" }));
}

export function registerExtendLease(app: RouteTable, deps: AppDeps): void {
  const leases = deps.leases;
  if (!leases) return;
  const schema = extendLeaseSchema(deps.config.leases);
  app.post(
    "/v1/leases/:id/extend",
    authenticate(deps),
    jsonBody(deps, schema),
    documented(
      { summary: "Extend a lease", tag: "leases", operationId: "extendLease", responses: { 200: { description: "the lease", json: leaseAnswer } }, errors: ["lease_not_found", "lease_expired", "lease_store_unavailable"] },
      (c) => extendLease(c, leases),
    ),
  );
}
