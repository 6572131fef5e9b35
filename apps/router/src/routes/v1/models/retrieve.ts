// GET /v1/models/{id} — one model in OpenAI's shape, as /v1/models lists it
// (the SDK's models.retrieve()); 404 model_not_found when nothing serves it.
// An id holding a slash (an alias such as "openai/gpt-4o-mini") comes
// percent-encoded, as the SDKs send it. A name no worker or alias lists but
// a configured provider takes by its form ("vendor/model" for OpenRouter,
// "claude-…" for Anthropic) is found too, as chat would route it.
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { ApiError } from "../../../errors.ts";
import { authenticate } from "../../../middleware.ts";
import { documented } from "../../../openapi/marks.ts";
import { servedModels, type ModelEntry } from "./list.ts";

export const modelAnswer = z.looseObject({ id: z.string(), object: z.literal("model"), created: z.number().int(), owned_by: z.string() });

export function registerRetrieveModel(app: RouteTable, deps: AppDeps): void {
  app.get(
    "/v1/models/:id",
    authenticate(deps),
    documented(
      { summary: "Retrieve a model served now", tag: "models", operationId: "retrieveModel", responses: { 200: { description: "the model, as /v1/models lists it", json: modelAnswer } }, errors: ["model_not_found"] },
      (c) => {
        const id = c.req.param("id") ?? "";
        const tenant = c.get("tenant").tenantName;
        const model = servedModels(deps, tenant).find((m) => m.id === id) ?? routedByName(deps, id, tenant);
        if (!model) throw new ApiError("model_not_found", `model '${id}' is not served by any live worker or configured provider`, "model");
        return c.json(model);
      },
    ),
  );
}

/** A model the chain routes by its name's form to a configured provider, in /v1/models' shape. */
function routedByName(deps: AppDeps, id: string, tenant: string): ModelEntry | undefined {
  const { known, backends } = deps.chain.resolve(id, tenant);
  if (!known || backends.length === 0) return undefined;
  return { id, object: "model", created: 0, owned_by: "switchyard", backends: backends.map((b) => b.id), ready: true };
}
