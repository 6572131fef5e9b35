// POST /v1/chat/completions on the worker: OpenAI chat → one engine
// generation (or, on the head shard of a split model, one down the pipeline).
import type { Hono } from "hono";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { routerPrefixName } from "@switchyard/state";
import type { WorkerContext } from "../context.ts";
import { errorJson } from "../errors.ts";
import { chatInput } from "../converters.ts";
import { routerCacheScope, runGenerate, type GenerateBody } from "../generate.ts";
import { unknownField } from "../fields.ts";
import { modelBody, requestId, traceSpanId } from "../request.ts";
import { generateEngine } from "../../shard/route.ts";

export function registerChat(app: Hono, ctx: WorkerContext): void {
  app.post("/v1/chat/completions", async (c) => {
    const body = await modelBody(c, ctx, ModelKind.LLAMA_GGUF);
    if (body instanceof Response) return body;
    const unknown = unknownField(body, "chat");
    if (unknown) return errorJson(400, `${unknown}: not a field this worker knows; it would be ignored`, "invalid_request", unknown);
    if (body.audio != null || (Array.isArray(body.modalities) && body.modalities.some((m) => m !== "text"))) {
      const param = body.audio != null ? "audio" : "modalities";
      return errorJson(400, `${param}: this worker answers with text only`, "invalid_request", param);
    }
    // The engine's models read text: an image or audio part would be dropped, so it is refused.
    const input = chatInput(body);
    if ("param" in input) return errorJson(input.status, input.message, "invalid_request", input.param);
    const { messages, structured } = input;
    // vLLM's continuation fields: the router's stream resume sends them.
    const continueFinal = body.continue_final_message === true;
    if (continueFinal && messages.at(-1)!.role !== "assistant") {
      return errorJson(400, "continue_final_message: the last message must be the assistant's", "invalid_request", "messages");
    }
    if (continueFinal && body.add_generation_prompt === true) {
      return errorJson(400, "continue_final_message and add_generation_prompt cannot both be true", "invalid_request", "add_generation_prompt");
    }
    // The head shard of a split model runs it down the pipeline (the router's route, or its static --next).
    const engine = generateEngine(ctx, (name) => c.req.header(name));
    if (!engine.ok) return errorJson(engine.status, engine.message, engine.code);
    return runGenerate(ctx, engine.engine, body as unknown as GenerateBody, [{ case: "messages", value: messages, continueFinal, structured }], { chat: true, model: ctx.supervisor.loaded.get(String(body.model))!, requestId: requestId(c), spanId: traceSpanId(c), signal: c.req.raw.signal, prefix: routerPrefixName(body), cacheScope: routerCacheScope(body) });
  });
}
