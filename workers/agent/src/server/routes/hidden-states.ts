// POST /v1/hidden_states on the worker: per-layer activations as safetensors
// bytes (default) or JSON floats (Accept: application/json). On the head of a
// split model each layer comes from the shard that holds it (shard/hidden.ts).
import { randomUUID } from "node:crypto";
import type { Hono } from "hono";
import { ModelKind, type HiddenStatesResult, type Tensor } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { EngineClient } from "../../engine/client.ts";
import { EngineError } from "../../engine/client.ts";
import type { WorkerContext } from "../context.ts";
import { errorJson } from "../errors.ts";
import { toHiddenStates } from "../converters.ts";
import { engineRequestId, modelBody, requestId, traceSpanId } from "../request.ts";
import { encodeSafetensors, tensorToFloats } from "../safetensors.ts";
import { ShardRefusedError } from "../../shard/link.ts";
import { generateEngine } from "../../shard/route.ts";
import type { GenerateEngine } from "../../shard/pipeline.ts";

async function runHiddenStates(ctx: WorkerContext, engine: EngineClient, pipeline: GenerateEngine, body: Record<string, unknown>, wantJson: boolean, engineId: string): Promise<Response> {
  const request = toHiddenStates(body);
  if (!("$typeName" in request)) return errorJson(400, request.message, "invalid_request", request.param);
  const end = ctx.begin();
  try {
    let result: HiddenStatesResult;
    if (pipeline.hiddenStates) result = await pipeline.hiddenStates(request);
    else {
      const ev = await engine.once({ case: "hiddenStates", value: request }, engineId);
      if (ev.kind.case !== "hiddenStates") return errorJson(502, "engine answered without hidden states", "engine_error");
      result = ev.kind.value;
    }
    const { layers: got, tensors, nTokens } = result;
    const named: [string, Tensor][] = got.map((l, i) => [`layer_${l}`, tensors[i]!]);
    const headers = { "x-switchyard-tokens": String(nTokens), "x-switchyard-layers": got.join(",") };
    if (wantJson) {
      return Response.json(
        { object: "hidden_states", model: body.model, n_tokens: nTokens, layers: Object.fromEntries(named.map(([k, t]) => [k, { shape: t.shape.map(Number), data: tensorToFloats(t) }])) },
        { headers },
      );
    }
    const bytes = encodeSafetensors(named, { model: String(body.model), n_tokens: String(nTokens), pooling: String(body.pooling ?? "none") });
    return new Response(bytes, { headers: { ...headers, "content-type": "application/octet-stream", "content-length": String(bytes.byteLength) } });
  } catch (err) {
    if (err instanceof ShardRefusedError) return errorJson(err.status, err.message, err.code);
    if (err instanceof EngineError && (err.code === 1 || err.code === 3)) return errorJson(400, err.message, "invalid_request");
    return errorJson(503, (err as Error).message, "engine_error");
  } finally {
    end();
  }
}

export function registerHiddenStates(app: Hono, ctx: WorkerContext): void {
  app.post("/v1/hidden_states", async (c) => {
    const body = await modelBody(c, ctx, ModelKind.LLAMA_GGUF);
    if (body instanceof Response) return body;
    // The head shard of a split model gathers the layers down the pipeline (the router's route, or its static --next).
    const choice = generateEngine(ctx, (name) => c.req.header(name));
    if (!choice.ok) return errorJson(choice.status, choice.message, choice.code);
    // The engine job is named by the router's request id and its attempt's span (a trace finds it).
    const engineId = engineRequestId(requestId(c), traceSpanId(c), () => randomUUID().slice(0, 8));
    return runHiddenStates(ctx, ctx.supervisor.client!, choice.engine, body, (c.req.header("accept") ?? "").includes("application/json"), engineId);
  });
}
