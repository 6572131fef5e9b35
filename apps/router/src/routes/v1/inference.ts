// Shared by the three inference routes: validate against the route's schema,
// resolve the model to live candidates, dispatch with failover.
import type { Context } from "hono";
import { z } from "zod";
import { PREFIX_NAME_FIELD } from "@switchyard/state";
import { ApiError } from "../../errors.ts";
import type { AppDeps, AppEnv } from "../../deps.ts";
import type { InferencePath } from "../../backends/types.ts";
import { clientRequestId, clientSignal, readJson } from "../../middleware.ts";
import { dispatch } from "../../relay/dispatch.ts";
import type { RelayContext } from "../../relay/context.ts";
import type { Resolution } from "../../routing/chain.ts";
import { CACHE_SCOPE_FIELD, requestClass } from "../../routing/request-class.ts";
import { withPrefixName } from "../../routing/scorer.ts";
import { routeWithLeases } from "../../leases/service.ts";
import { normalizeMaxOutput } from "../../billing/estimate.ts";

/** The largest value a protobuf uint32 holds: the engine's max_tokens, top_k, layer indices. */
export const UINT32_MAX = 4_294_967_295;

/**
 * The generation fields chat and text completions share, as OpenAI defines
 * them, bounded by the engine's protobuf field types
 * (proto/switchyard/engine/v1/engine.proto): a value the worker cannot
 * encode is the client's 400 here, not a 500 counted against a worker.
 */
export const generationFields = {
  model: z.string().min(1),
  stream: z.boolean().nullish(),
  stream_options: z.looseObject({ include_usage: z.boolean().optional() }).nullish(),
  max_tokens: z.number().int().positive().max(UINT32_MAX).nullish(),
  /** OpenAI's newer name for max_tokens; the two become one value (normalizeMaxOutput). */
  max_completion_tokens: z.number().int().positive().max(UINT32_MAX).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  top_k: z.number().int().nonnegative().max(UINT32_MAX).nullish(),
  n: z.literal(1).nullish(),
  // uint64 in the engine; any safe integer (negative ones by magnitude).
  seed: z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER).nullish(),
  stop: z.union([z.string(), z.array(z.string()).max(4)]).nullish(),
  // Chat: a boolean with top_logprobs 0–20; completions: an integer 0–5 (the worker checks which shape fits the route).
  logprobs: z.union([z.boolean(), z.number().int().min(0).max(5)]).nullish(),
  top_logprobs: z.number().int().min(0).max(20).nullish(),
  user: z.string().nullish(),
};

function fieldPath(path: PropertyKey[]): string {
  return path.reduce<string>((acc, p) => (typeof p === "number" ? `${acc}[${p}]` : acc ? `${acc}.${String(p)}` : String(p)), "");
}

export function validate<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  const parsed = schema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    const param = fieldPath(issue.path);
    throw new ApiError("invalid_request", param ? `${param}: ${issue.message}` : issue.message, param || null);
  }
  return parsed.data;
}

export async function handleInference<S extends z.ZodType<{ model: string; stream?: boolean | null | undefined }>>(
  c: Context<AppEnv>,
  deps: AppDeps,
  path: InferencePath,
  schema: S,
  raw?: { accept: string },
): Promise<Response> {
  const body = validate(schema, await readJson(c, deps.config.router.bodyLimitBytes)) as z.infer<S> & Record<string, unknown>;
  // One output limit, before the budget hold and before any upstream sees the body.
  normalizeMaxOutput(path, body);
  const model = body.model;
  const tenant = c.get("tenant");
  // Admission: room for the tenant's band on the model's worker pool, or a wait in its fair queue (403/503/504 otherwise).
  const admitted = await deps.admission?.admit({
    model,
    tenantName: tenant.tenantName,
    priority: c.req.header("x-switchyard-priority"),
    leased: c.req.header("x-switchyard-lease") !== undefined,
    signal: clientSignal(c),
    outgoing: c.env?.outgoing,
  });
  // Prefix names are per tenant and the router's alone: a client's own switchyard_prefix never reaches a worker.
  delete (body as Record<string, unknown>)[PREFIX_NAME_FIELD];
  // Likewise the engine prefix-cache scope: a client can't pick another tenant's.
  delete (body as Record<string, unknown>)[CACHE_SCOPE_FIELD];
  const cls = requestClass(path, body, String(tenant.tenantId));
  const resolution = deps.chain.resolve(model, tenant.tenantName, cls);
  const { backends, known } = resolution;
  if (!known) {
    admitted?.release();
    throw new ApiError("model_not_found", `model '${model}' is not served by any live worker or configured provider`, "model");
  }
  const retryAfter = String(deps.config.router.retryAfterS);
  if (backends.length === 0) {
    admitted?.release();
    throw new ApiError("no_healthy_backend", `no worker for model '${model}' is ready (warming, draining or busy)`, null, { "retry-after": retryAfter });
  }
  // Streams always ask the upstream for usage (the ledger needs it); the
  // usage chunk reaches the client only if it asked too.
  let stripUsage = false;
  if (body.stream === true && path !== "/v1/embeddings") {
    const so = (body.stream_options ?? {}) as { include_usage?: boolean };
    if (so.include_usage !== true) {
      stripUsage = true;
      (body as Record<string, unknown>).stream_options = { ...so, include_usage: true };
    }
  }
  const startedAt = c.get("startedAt");
  const tab = deps.guard.open({
    requestId: c.get("requestId"),
    tenant,
    path,
    body,
    model,
    arrivedAtMs: Date.now() - (performance.now() - startedAt),
    startedAtPerf: startedAt,
  });
  try {
    // Leases: a holder's request runs only on its leased worker, carrying the fencing token; others skip leased workers.
    const leased = await routeWithLeases(deps.leases, backends, { leaseId: c.req.header("x-switchyard-lease"), tenantId: tenant.tenantId, model, signal: clientSignal(c) });
    const result = await dispatch(
      leased.backends,
      { path, body, stream: body.stream === true, ...(raw ? { raw } : {}), ...(leased.fencingToken !== undefined ? { fencingToken: leased.fencingToken } : {}) },
      {
        requestId: c.get("requestId"),
        deadlines: deps.config.deadlines,
        signal: clientSignal(c),
        ...(deps.shutdown ? { shutdown: deps.shutdown } : {}),
        startedAt,
        log: c.get("log"),
        metrics: deps.metrics,
        maxAttempts: deps.config.router.maxAttempts,
        route: c.get("route"),
        outgoing: c.env?.outgoing,
        stripUsage,
        ...routingContext(c, deps, resolution, model),
        admit: (b) => {
          admitted?.attempt(b);
          return tab.admit(b).then((a) => withPrefixName(a, b, cls));
        },
        release: (b) => tab.release(b),
        settle: (o) => {
          admitted?.release();
          tab.settle(o);
        },
      },
    );
    if (body.stream === true) c.set("streaming", true);
    return result.response;
  } catch (err) {
    admitted?.release();
    if (err instanceof ApiError && err.code === "no_healthy_backend" && !err.headers["retry-after"]) {
      // Keep a more precise Retry-After when the thrower knew one (e.g. when the leases end).
      throw new ApiError(err.code, err.message, null, { ...err.headers, "retry-after": retryAfter });
    }
    throw err;
  }
}

/**
 * Routing feedback for dispatch, the decision explained (x-switchyard-route
 * when the client sends `x-switchyard-debug: route` or config asks; a debug
 * log line), and stream resume when the request or config opts in.
 */
function routingContext(c: Context<AppEnv>, deps: AppDeps, resolution: Resolution, model: string): Pick<RelayContext, "observe" | "headers" | "resume"> {
  const { scorer, resume } = deps.config.routing;
  const header = scorer.debugHeader || /(^|[\s,])route([\s,]|$)/.test(c.req.header("x-switchyard-debug") ?? "");
  const out: Pick<RelayContext, "observe" | "headers" | "resume"> = { observe: resolution.observe };
  if (header || deps.config.log.level === "debug") {
    const explained = resolution.explain();
    c.get("log").debug("route", { model, candidates: explained });
    if (header) out.headers = { "x-switchyard-route": explained };
  }
  // The relay builds its own responses: the client's correlation id rides along.
  const clientId = clientRequestId(c);
  if (clientId) out.headers = { ...out.headers, "x-client-request-id": clientId };
  if (resume.enabled || c.req.header("x-switchyard-resume") === "true") out.resume = { maxResumes: resume.maxResumes };
  return out;
}
