// POST /v1/completions on the worker: the legacy text completion → one engine
// generation from a raw prompt (no chat template).
import type { Hono } from "hono";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { routerPrefixName } from "@switchyard/state";
import type { WorkerContext } from "../context.ts";
import { errorJson } from "../errors.ts";
import { completionInputs } from "../converters.ts";
import { routerCacheScope, runGenerate, type GenerateBody } from "../generate.ts";
import { unknownField } from "../fields.ts";
import { modelBody, requestId, traceSpanId } from "../request.ts";
import { generateEngine } from "../../shard/route.ts";

export function registerCompletions(app: Hono, ctx: WorkerContext): void {
  app.post("/v1/completions", async (c) => {
    const body = await modelBody(c, ctx, ModelKind.LLAMA_GGUF);
    if (body instanceof Response) return body;
    const unknown = unknownField(body, "completions");
    if (unknown) return errorJson(400, `${unknown}: not a field this worker knows; it would be ignored`, "invalid_request", unknown);
    const model = ctx.supervisor.loaded.get(String(body.model))!;
    // A string, a list of them, token ids, or lists of token ids: each prompt gets its n choices.
    const inputs = completionInputs(body.prompt, model.vocabSize);
    if ("param" in inputs) return errorJson(400, inputs.message, "invalid_request", inputs.param);
    // The head shard of a split model runs it down the pipeline (the router's route, or its static --next).
    const engine = generateEngine(ctx, (name) => c.req.header(name));
    if (!engine.ok) return errorJson(engine.status, engine.message, engine.code);
    return runGenerate(ctx, engine.engine, body as unknown as GenerateBody, inputs, { chat: false, model, requestId: requestId(c), spanId: traceSpanId(c), signal: c.req.raw.signal, prefix: routerPrefixName(body), cacheScope: routerCacheScope(body) });
  });
}
