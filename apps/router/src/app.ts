// createApp(deps): the public router app (OpenAI-compatible API + health),
// and createAdminApp(deps) for /metrics on its own port.
import { Hono, type Context } from "hono";
import { ApiError, errorBody, toApiError } from "./errors.ts";
import type { AppDeps, AppEnv } from "./deps.ts";
import { requestContext } from "./middleware.ts";
import { registerHealthz } from "./routes/health/healthz.ts";
import { registerReadyz } from "./routes/health/readyz.ts";
import { registerChatCompletions } from "./routes/v1/chat/completions.ts";
import { registerCompletions } from "./routes/v1/completions/create.ts";
import { registerEmbeddings } from "./routes/v1/embeddings/create.ts";
import { registerHiddenStates } from "./routes/v1/hidden_states/create.ts";
import { registerListModels } from "./routes/v1/models/list.ts";
import { registerRetrieveModel } from "./routes/v1/models/retrieve.ts";
import { registerCreateLease } from "./routes/v1/leases/create.ts";
import { registerRetrieveLease } from "./routes/v1/leases/retrieve.ts";
import { registerExtendLease } from "./routes/v1/leases/extend.ts";
import { registerReleaseLease } from "./routes/v1/leases/release.ts";
import { registerCreateResponse } from "./routes/v1/responses/create.ts";
import { registerRetrieveResponse } from "./routes/v1/responses/retrieve.ts";
import { registerDeleteResponse } from "./routes/v1/responses/delete.ts";
import { registerListInputItems } from "./routes/v1/responses/list-input-items.ts";
import { registerCountInputTokens } from "./routes/v1/responses/count-input-tokens.ts";
import { registerCreateMessage } from "./routes/v1/messages/create.ts";
import { registerCountMessageTokens } from "./routes/v1/messages/count_tokens.ts";
import { registerGeminiModels } from "./routes/v1beta/models/generate.ts";
import { MemoryResponseStore } from "@switchyard/state";
import { registerOpenApi } from "./routes/openapi.ts";
import { oneHandler, routeTable } from "./route-table.ts";

export function createApp(deps: AppDeps): Hono<AppEnv> {
  const app = new Hono<AppEnv>();
  // One error answer for every route's levels (route-table.ts) and whatever reaches Hono itself.
  const onError = (thrown: unknown, c: Context<AppEnv>): Response => {
    const err = toApiError(thrown);
    if (!(thrown instanceof ApiError)) {
      const cause = (thrown as { cause?: unknown })?.cause;
      (c.get("log") ?? deps.log).error("unhandled error", {
        error: (thrown as Error)?.stack ?? String(thrown),
        ...(cause ? { cause: (cause as Error)?.message ?? String(cause) } : {}),
      });
    }
    deps.metrics.errors.inc({ code: err.code });
    for (const [k, v] of Object.entries(err.headers)) c.header(k, v);
    return c.json(errorBody(err, c.get("requestId")), err.status as 400);
  };
  // Every route runs under the request context, its levels as one handler.
  const routes = routeTable(app, (route) => requestContext(deps, route), onError);
  registerHealthz(routes);
  registerReadyz(routes, deps);
  registerChatCompletions(routes, deps);
  registerCompletions(routes, deps);
  registerEmbeddings(routes, deps);
  registerHiddenStates(routes, deps);
  registerListModels(routes, deps);
  registerRetrieveModel(routes, deps);
  registerCreateLease(routes, deps);
  registerRetrieveLease(routes, deps);
  registerExtendLease(routes, deps);
  registerReleaseLease(routes, deps);
  // Translated APIs (translate/): OpenAI Responses, Anthropic Messages.
  const responses = deps.responses ?? new MemoryResponseStore();
  registerCreateResponse(routes, deps, responses);
  registerRetrieveResponse(routes, deps, responses);
  registerDeleteResponse(routes, deps, responses);
  registerListInputItems(routes, deps, responses);
  registerCountInputTokens(routes, deps, responses);
  registerCreateMessage(routes, deps);
  registerCountMessageTokens(routes, deps);
  registerGeminiModels(routes, deps);
  // Last: the document lists every route registered above (openapi/spec.ts).
  registerOpenApi(routes, app);

  let allowed: ((path: string) => string[]) | undefined;
  // A path no route serves answers under the request context too (one metrics label for all of them: "unmatched").
  app.notFound(
    oneHandler(
      [
        requestContext(deps, "unmatched"),
        (c) => {
          // A path some route serves, with another method: 405 with Allow (RFC 9110), not 404.
          const methods = (allowed ??= allowedMethods(app))(c.req.path);
          const err = methods.length
            ? new ApiError("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path} (allowed: ${methods.join(", ")})`, null, { allow: methods.join(", ") })
            : new ApiError("not_found", `no route for ${c.req.method} ${c.req.path}`);
          throw err;
        },
      ],
      onError,
    ),
  );
  app.onError(onError);
  return app;
}

/**
 * The methods the app serves a path with (HEAD with GET), from its routes:
 * built once, on the first unmatched request. A path one route names
 * outright is that resource, whatever a templated route would also match
 * (POST /v1/responses/input_tokens, not GET /v1/responses/{id}): concrete
 * paths first, as OpenAPI matches them, so Allow says what the document does.
 */
function allowedMethods(app: Hono<AppEnv>): (path: string) => string[] {
  const patterns: Array<{ re: RegExp; method: string; concrete: boolean }> = [];
  for (const r of app.routes) {
    if (r.method === "ALL") continue;
    const segments = r.path.split("/");
    const escaped = segments.map((seg) => (seg.startsWith(":") ? "[^/]+" : seg.replace(/[.*+?^$|()[\]{}\\]/g, "\\$&")));
    const re = new RegExp("^" + escaped.join("/") + "$");
    patterns.push({ re, method: r.method, concrete: !segments.some((seg) => seg.startsWith(":")) });
  }
  return (path) => {
    const matched = patterns.filter((p) => p.re.test(path));
    const concrete = matched.filter((p) => p.concrete);
    const out = new Set((concrete.length > 0 ? concrete : matched).map((p) => p.method));
    if (out.has("GET")) out.add("HEAD");
    return [...out];
  };
}

/** This process's /metrics text (the workers gauge read from the directory now). */
export function renderMetrics(deps: AppDeps): string {
  const byState = new Map<string, number>();
  for (const w of deps.directory.all()) byState.set(w.state, (byState.get(w.state) ?? 0) + 1);
  for (const state of ["warming", "ready", "draining", "degraded"]) deps.metrics.workers.set({ state }, () => byState.get(state) ?? 0);
  return deps.metrics.render();
}

export function createAdminApp(deps: AppDeps): Hono {
  const admin = new Hono();
  admin.get("/metrics", (c) => c.text(renderMetrics(deps), 200, { "content-type": "text/plain; version=0.0.4" }));
  admin.get("/healthz", (c) => c.json({ status: "ok" }));
  // The operator's view: the same readiness plus where the state lives (hosts, no secrets).
  admin.get("/readyz", async (c) => {
    const r = await deps.readiness();
    const ok = r.redis && r.postgres && !r.draining;
    return c.json({ status: r.draining ? "draining" : ok ? "ready" : "not_ready", ...r, workers: deps.directory.all().length, ...(deps.summary ? { state: deps.summary } : {}) }, ok ? 200 : 503);
  });
  return admin;
}
