// POST /v1/embeddings on the worker: engine Embed → OpenAI embedding list
// (floats, or base64 of little-endian f32 like OpenAI's encoding_format).
import { randomUUID } from "node:crypto";
import type { Hono } from "hono";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { EngineClient } from "../../engine/client.ts";
import { EngineError } from "../../engine/client.ts";
import type { WorkerContext } from "../context.ts";
import { embeddingsData } from "../converters.ts";
import { errorJson } from "../errors.ts";
import { modelBody, requestId } from "../request.ts";

/** Inputs per request at most: OpenAI's limit, the engine's, and the router's default (config embeddings.maxInputs). */
export const EMBEDDINGS_MAX_INPUTS = 2048;
/** Characters across all inputs of one request at most (the engine's 4 MiB of UTF-8 holds this many). */
export const EMBEDDINGS_MAX_INPUT_CHARS = 1_048_576;

async function runEmbeddings(ctx: WorkerContext, engine: EngineClient, body: Record<string, unknown>, requestId: string, signal: AbortSignal): Promise<Response> {
  const inputs = typeof body.input === "string" ? [body.input] : Array.isArray(body.input) && body.input.every((s) => typeof s === "string") ? (body.input as string[]) : undefined;
  if (!inputs || inputs.length === 0) return errorJson(400, "input: a string or a non-empty array of strings is required", "invalid_request", "input");
  if (inputs.length > EMBEDDINGS_MAX_INPUTS) return errorJson(400, `input: at most ${EMBEDDINGS_MAX_INPUTS} inputs per request (got ${inputs.length})`, "invalid_request", "input");
  let chars = 0;
  for (const s of inputs) chars += s.length;
  if (chars > EMBEDDINGS_MAX_INPUT_CHARS) return errorJson(400, `input: at most ${EMBEDDINGS_MAX_INPUT_CHARS} characters across all inputs per request (got ${chars})`, "invalid_request", "input");
  const base64 = body.encoding_format === "base64";
  const end = ctx.begin();
  // A client that goes away frees the engine: it embeds in chunks and drops a cancelled job between two.
  const engineId = `${requestId}:${randomUUID().slice(0, 8)}`;
  const onAbort = () => engine.cancel(engineId);
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    const ev = await engine.once({ case: "embed", value: { $typeName: "switchyard.engine.v1.Embed", model: String(body.model), inputs } }, engineId);
    if (ev.kind.case !== "embeddings") return errorJson(502, "engine answered without embeddings", "engine_error");
    const data = embeddingsData(ev.kind.value, base64);
    const prompt = ev.kind.value.usage?.promptTokens ?? 0;
    return Response.json({ object: "list", data, model: body.model, usage: { prompt_tokens: prompt, total_tokens: prompt } });
  } catch (err) {
    if (err instanceof EngineError && err.code === 1) return errorJson(400, err.message, "invalid_request");
    return errorJson(503, (err as Error).message, "engine_error");
  } finally {
    signal.removeEventListener("abort", onAbort);
    end();
  }
}

export function registerEmbeddings(app: Hono, ctx: WorkerContext): void {
  app.post("/v1/embeddings", async (c) => {
    const body = await modelBody(c, ctx, ModelKind.BERT);
    if (body instanceof Response) return body;
    return runEmbeddings(ctx, ctx.supervisor.client!, body, requestId(c), c.req.raw.signal);
  });
}
