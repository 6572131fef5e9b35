// GET /openapi.json — the OpenAPI 3.1 document of every public route, built
// once from the app (openapi/spec.ts) the first time it is asked for.
import type { Hono } from "hono";
import type { AppEnv } from "../deps.ts";
import { documented } from "../openapi/marks.ts";
import { buildOpenApi } from "../openapi/spec.ts";
import type { RouteTable } from "../route-table.ts";

/** `app` is what the document describes; the route registers on `routes`. */
export function registerOpenApi(routes: RouteTable, app: Hono<AppEnv>): void {
  let spec: Record<string, unknown> | undefined;
  routes.get(
    "/openapi.json",
    documented({ summary: "This document", tag: "meta", operationId: "getOpenApi" }, (c) => c.json((spec ??= buildOpenApi(app)))),
  );
}
