// POST /v1/embeddings on the worker: engine Embed → OpenAI embedding list
// (floats, or base64 of little-endian f32 like OpenAI's encoding_format).
import { randomUUID } from "node:crypto";
import type { Hono } from "hono";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { EngineClient } from "../../engine/client.ts";
import { EngineError } from "../../engine/client.ts";
import type { WorkerContext } from "../context.ts";
import { embeddingsData, engineErrorStatus, toEmbed } from "../converters.ts";
import { errorJson } from "../errors.ts";
import { unknownField } from "../fields.ts";
import { engineRequestId, modelBody, requestId, traceSpanId } from "../request.ts";

/** Inputs per request at most: OpenAI's limit, the engine's, and the router's default (config embeddings.maxInputs). */
export const EMBEDDINGS_MAX_INPUTS = 2048;
/** Characters across all inputs of one request at most (the engine's 4 MiB of UTF-8 holds this many). */
export const EMBEDDINGS_MAX_INPUT_CHARS = 1_048_576;

async function runEmbeddings(ctx: WorkerContext, engine: EngineClient, body: Record<string, unknown>, engineId: string, signal: AbortSignal): Promise<Response> {
  const model = ctx.supervisor.loaded.get(String(body.model))!;
  // Token ids are read in the model's own vocabulary (its tokenizer is the engine's).
  const embed = toEmbed(String(body.model), body.input, model.vocabSize);
  if ("param" in embed) return errorJson(400, embed.message, "invalid_request", embed.param);
  const count = embed.inputs.length + embed.tokenInputs.length;
  if (count > EMBEDDINGS_MAX_INPUTS) return errorJson(400, `input: at most ${EMBEDDINGS_MAX_INPUTS} inputs per request (got ${count})`, "invalid_request", "input");
  let chars = 0;
  for (const s of embed.inputs) chars += s.length;
  for (const t of embed.tokenInputs) chars += t.ids.length;
  if (chars > EMBEDDINGS_MAX_INPUT_CHARS) return errorJson(400, `input: at most ${EMBEDDINGS_MAX_INPUT_CHARS} characters across all inputs per request (got ${chars})`, "invalid_request", "input");
  // Truncating a vector only keeps its meaning for models trained to be
  // truncated (Matryoshka); none of the engine's is, so only the full width is honoured.
  if (body.dimensions != null && body.dimensions !== model.embeddingDim) {
    return errorJson(400, `dimensions: model '${String(body.model)}' was not trained for truncated embeddings; it gives ${model.embeddingDim} dimensions only`, "invalid_request", "dimensions");
  }
  const base64 = body.encoding_format === "base64";
  const end = ctx.begin();
  // A client that goes away frees the engine: it embeds in chunks and drops a cancelled job between two.
  const onAbort = () => engine.cancel(engineId);
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    const ev = await engine.once({ case: "embed", value: embed }, engineId);
    if (ev.kind.case !== "embeddings") return errorJson(502, "engine answered without embeddings", "engine_error");
    const data = embeddingsData(ev.kind.value, base64);
    const prompt = ev.kind.value.usage?.promptTokens ?? 0;
    return Response.json({ object: "list", data, model: body.model, usage: { prompt_tokens: prompt, total_tokens: prompt } });
  } catch (err) {
    if (err instanceof EngineError && err.code === 1) return errorJson(400, err.message, "invalid_request", engineErrorStatus(err).param);
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
    const unknown = unknownField(body, "embeddings");
    if (unknown) return errorJson(400, `${unknown}: not a field this worker knows; it would be ignored`, "invalid_request", unknown);
    // The engine job is named by the router's request id and its attempt's span (a trace finds it).
    return runEmbeddings(ctx, ctx.supervisor.client!, body, engineRequestId(requestId(c), traceSpanId(c), () => randomUUID().slice(0, 8)), c.req.raw.signal);
  });
}
