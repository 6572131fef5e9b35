// Cross-cutting middleware: request ids + access log + metrics, auth, and
// the body checks (content type, size) every JSON route shares.
import { randomUUID } from "node:crypto";
import type { Context, MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import { ApiError } from "./errors.ts";
import type { AppDeps, AppEnv } from "./deps.ts";

const clientIdPattern = /^[A-Za-z0-9._:-]{8,128}$/;

export function requestContext(deps: AppDeps): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const incoming = c.req.header("x-request-id");
    const requestId = incoming && clientIdPattern.test(incoming) ? incoming : `req_${randomUUID().replaceAll("-", "")}`;
    const startedAt = performance.now();
    c.set("requestId", requestId);
    c.set("startedAt", startedAt);
    c.set("route", c.req.path);
    c.set("log", deps.log.child({ request_id: requestId }));
    await next();
    c.header("x-request-id", requestId);
    const status = c.res.status;
    deps.metrics.requests.inc({ route: c.get("route"), status: String(status) });
    const streaming = c.res.headers.get("content-type")?.startsWith("text/event-stream");
    if (!streaming) deps.metrics.duration.observe({ route: c.get("route") }, (performance.now() - startedAt) / 1000);
    const tenant = c.get("tenant");
    c.get("log").info("request", {
      method: c.req.method,
      path: c.req.path,
      status,
      ms: Math.round((performance.now() - startedAt) * 100) / 100,
      ...(tenant ? { tenant: tenant.tenantName, key: tenant.prefix } : {}),
      ...(streaming ? { streaming: true } : {}),
    });
  };
}

export function authenticate(deps: AppDeps): MiddlewareHandler<AppEnv> {
  return async (c, next) => {
    const header = c.req.header("authorization");
    if (!header) throw new ApiError("missing_api_key", "missing API key: send Authorization: Bearer sy_…");
    const m = /^Bearer\s+(\S+)\s*$/i.exec(header);
    if (!m) throw new ApiError("invalid_api_key", "malformed Authorization header: expected Bearer <key>");
    const owner = await deps.keys.resolve(m[1]!);
    if (!owner) throw new ApiError("invalid_api_key", "invalid API key");
    if (owner.revoked) throw new ApiError("revoked_api_key", `API key ${owner.prefix} has been revoked`);
    c.set("tenant", owner);
    await next();
  };
}

export function jsonBody(deps: AppDeps): MiddlewareHandler<AppEnv>[] {
  const limit = deps.config.router.bodyLimitBytes;
  return [
    async (c, next) => {
      const type = c.req.header("content-type") ?? "";
      if (!/^application\/json\s*(;|$)/i.test(type)) {
        throw new ApiError("unsupported_media_type", `expected Content-Type: application/json, got ${type || "none"}`);
      }
      await next();
    },
    bodyLimit({
      maxSize: limit,
      onError: () => {
        throw new ApiError("payload_too_large", `request body exceeds the ${limit} byte limit`);
      },
    }),
  ];
}

/** Parses the JSON body; invalid JSON is a 400 invalid_json. */
export async function readJson(c: Context<AppEnv>): Promise<unknown> {
  const text = await c.req.text();
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError("invalid_json", "request body is not valid JSON");
  }
}
