// GET /v1/models — models served by live workers right now, plus the
// configured aliases (routing.models) that resolve to a live worker or a
// configured paid provider.
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import * as z from "zod";
import { authenticate } from "../../../middleware.ts";
import { documented } from "../../../openapi/marks.ts";

export const modelListAnswer = z.looseObject({ object: z.literal("list"), data: z.array(z.looseObject({ id: z.string(), object: z.literal("model") })) });

/** One model as OpenAI lists it (id, object, created, owned_by), with what serves it. */
export type ModelEntry = Record<string, unknown> & { id: string; object: "model"; created: number; owned_by: string };

/** The models this tenant can call, sorted: worker-served ones, then aliases that resolve for it. */
export function servedModels(deps: AppDeps, tenantName: string): ModelEntry[] {
  const served = deps.directory.models();
  const data: ModelEntry[] = [...served].sort(([a], [b]) => a.localeCompare(b)).map(([id, workers]) => ({
    id,
    object: "model" as const,
    created: Math.floor(Math.min(...workers.map((w) => w.startedAt)) / 1000),
    owned_by: "switchyard",
    workers: workers.length,
    ready: workers.some((w) => w.state === "ready" || w.state === "degraded"),
  }));
  for (const alias of Object.keys(deps.config.routing.models).sort()) {
    if (served.has(alias)) continue;
    const { known, backends } = deps.chain.resolve(alias, tenantName);
    if (!known) continue;
    data.push({ id: alias, object: "model", created: 0, owned_by: "switchyard", backends: backends.map((b) => b.id), ready: backends.length > 0 });
  }
  return data;
}

export function registerListModels(app: RouteTable, deps: AppDeps): void {
  app.get(
    "/v1/models",
    authenticate(deps),
    documented({ summary: "List the models served now", tag: "models", operationId: "listModels", responses: { 200: { description: "models of live workers and configured aliases", json: modelListAnswer } } }, (c) =>
      c.json({ object: "list", data: servedModels(deps, c.get("tenant").tenantName) }),
    ),
  );
}
