// What every worker route does with a request before its own work: read the
// JSON body, check the model is loaded here and serves this endpoint, and
// name the request after the router's id.
import type { Context } from "hono";
import type { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { WorkerContext } from "./context.ts";
import { errorJson } from "./errors.ts";

/** The body as a JSON object, or the 400 to answer. */
export async function jsonBody(c: Context): Promise<Record<string, unknown> | Response> {
  try {
    const body = (await c.req.json()) as unknown;
    if (!body || typeof body !== "object" || Array.isArray(body)) return errorJson(400, "body must be a JSON object", "invalid_request");
    return body as Record<string, unknown>;
  } catch {
    return errorJson(400, "request body is not valid JSON", "invalid_json");
  }
}

/** undefined when `model` is loaded here and of `kind`; otherwise the error to answer. */
export function requireModel(ctx: WorkerContext, model: unknown, kind: ModelKind): Response | undefined {
  if (typeof model !== "string" || !model) return errorJson(400, "model: required", "invalid_request", "model");
  const loaded = ctx.supervisor.loaded.get(model);
  if (!loaded) return errorJson(404, `model '${model}' is not loaded on this worker`, "model_not_found", "model");
  if (loaded.kind !== kind) return errorJson(400, `model '${model}' does not support this endpoint`, "invalid_request", "model");
  return undefined;
}

/** The router's request id (its logs and the engine's name the request by it). */
export const requestId = (c: Context) => c.req.header("x-request-id") ?? "req";

/** The span id of the router's attempt (W3C traceparent), when it sent one: the engine job is named by it. */
export function traceSpanId(c: Context): string | undefined {
  const m = /^[0-9a-f]{2}-[0-9a-f]{32}-([0-9a-f]{16})-[0-9a-f]{2}$/.exec(c.req.header("traceparent")?.trim().toLowerCase() ?? "");
  return m && !/^0+$/.test(m[1]!) ? m[1] : undefined;
}

/** The engine's id for one job: the router's request id and the attempt's span id (or a random suffix when untraced). */
export function engineRequestId(requestId: string, spanId: string | undefined, random: () => string): string {
  return `${requestId}:${spanId ?? random()}`;
}

/**
 * jsonBody + requireModel: the body of a request for a loaded model of
 * `kind`, or the error to answer.
 */
export async function modelBody(c: Context, ctx: WorkerContext, kind: ModelKind): Promise<Record<string, unknown> | Response> {
  const body = await jsonBody(c);
  if (body instanceof Response) return body;
  return requireModel(ctx, body.model, kind) ?? body;
}
