// DELETE /v1/responses/{id} — forget one of the tenant's stored responses:
// it can no longer be retrieved or continued. Another tenant's id is a 404.
import { RESPONSE_ID, type ResponseStore } from "@switchyard/state";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import * as z from "zod";
import { ApiError, type ErrorCode } from "../../../errors.ts";
import { authenticate } from "../../../middleware.ts";
import { documented } from "../../../openapi/marks.ts";

export function registerDeleteResponse(app: RouteTable, deps: AppDeps, store: ResponseStore): void {
  const doc = {
    summary: "Delete a stored response",
    tag: "inference",
    operationId: "deleteResponse",
    responses: { 200: { description: "deleted", json: z.object({ id: z.string(), object: z.literal("response"), deleted: z.literal(true) }) } },
    errors: ["not_found", "response_store_unavailable"] as ErrorCode[],
  };
  app.delete("/v1/responses/:id", authenticate(deps), documented(doc, async (c) => {
    const id = (c.req.param("id") ?? "");
    let deleted = false;
    if (RESPONSE_ID.test(id)) {
      try {
        deleted = await store.delete(c.get("tenant").tenantId, id);
      } catch {
        throw new ApiError("response_store_unavailable", "stored responses cannot be changed right now; retry shortly");
      }
    }
    if (!deleted) throw new ApiError("not_found", `Response with id '${id.slice(0, 80)}' not found.`);
    return c.json({ id, object: "response", deleted: true });
  }));
}
