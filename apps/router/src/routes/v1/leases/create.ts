// POST /v1/leases — reserve a GPU worker: {model | worker, duration_s, wait_s?}
// → 201 {id, worker, fencing_token, expires_at, …}. 409 when every matching
// worker is leased (after wait_s), 503 when none is ready.
import type { Context } from "hono";
import * as z from "zod";
import type { Config } from "../../../config.ts";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import type { LeaseService } from "../../../leases/service.ts";
import { authenticate, clientSignal, jsonBody } from "../../../middleware.ts";
import { leaseAnswer, leaseJson } from "./view.ts";
import { documented } from "../../../openapi/marks.ts";

export function createLeaseSchema(cfg: Config["leases"]) {
  return z
    .strictObject({
      model: z.string().min(1).max(256).optional(),
      worker: z
        .string()
        .regex(/^[A-Za-z0-9._-]{1,64}$/, "a worker id")
        .optional(),
      duration_s: z.number().min(cfg.minDurationS).max(cfg.maxDurationS),
      wait_s: z.number().min(0).max(cfg.maxWaitS).optional(),
    })
    .refine((b) => (b.model === undefined) !== (b.worker === undefined), { message: "give exactly one of model or worker", path: ["model"] })
    // The refine, said in JSON Schema for the OpenAPI document.
    .meta({ oneOf: [{ required: ["model"] }, { required: ["worker"] }] });
}

export async function createLease(c: Context<AppEnv>, leases: LeaseService): Promise<Response> {
  const body = c.get("body") as z.infer<ReturnType<typeof createLeaseSchema>>;
  const lease = await leases.acquire({
    tenantId: c.get("tenant").tenantId,
    target: body.worker !== undefined ? { worker: body.worker } : { model: body.model! },
    durationMs: Math.max(1, Math.round(body.duration_s * 1000)),
    waitMs: Math.round((body.wait_s ?? 0) * 1000),
    signal: clientSignal(c),
  });
  return c.json(leaseJson({ lease, status: "active" }), 201, { location: `/v1/leases/${lease.id}` });
}

export function registerCreateLease(app: RouteTable, deps: AppDeps): void {
  const leases = deps.leases;
  if (!leases) return;
  const schema = createLeaseSchema(deps.config.leases);
  app.post(
    "/v1/leases",
    authenticate(deps),
    jsonBody(deps, schema),
    documented(
      { summary: "Lease a GPU worker", tag: "leases", operationId: "createLease", responses: { 201: { description: "the lease", json: leaseAnswer } }, errors: ["lease_conflict", "lease_limit_reached", "worker_not_found", "model_not_found", "no_healthy_backend", "lease_store_unavailable", "stale_fencing_token"] },
      (c) => createLease(c, leases),
    ),
  );
}
