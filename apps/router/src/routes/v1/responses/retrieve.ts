// GET /v1/responses/{id} — one of the tenant's stored responses, as it was
// answered. Another tenant's id, an expired one or one stored with
// store: false is a 404, like one that never existed.
import type { ResponseStore } from "@switchyard/state";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { authenticate } from "../../../middleware.ts";
import { loadResponse } from "../../../translate/responses/conversation.ts";
import { documented } from "../../../openapi/marks.ts";
import { responseAnswer } from "./create.ts";

export function registerRetrieveResponse(app: RouteTable, deps: AppDeps, store: ResponseStore): void {
  app.get(
    "/v1/responses/:id",
    authenticate(deps),
    documented(
      { summary: "Retrieve a stored response", tag: "inference", operationId: "retrieveResponse", responses: { 200: { description: "the response object as it was answered", json: responseAnswer } }, errors: ["not_found", "response_store_unavailable"] },
      async (c) => c.json((await loadResponse(store, c.get("tenant").tenantId, (c.req.param("id") ?? ""))).response),
    ),
  );
}
