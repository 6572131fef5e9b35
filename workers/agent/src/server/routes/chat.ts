// POST /v1/chat/completions on the worker: OpenAI chat → one engine
// generation (or, on the head shard of a split model, one down the pipeline).
import type { Hono } from "hono";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { routerPrefixName } from "@switchyard/state";
import type { WorkerContext } from "../context.ts";
import { errorJson } from "../errors.ts";
import { contentText } from "../converters.ts";
import { routerCacheScope, runGenerate, type GenerateBody } from "../generate.ts";
import { modelBody, requestId, traceSpanId } from "../request.ts";
import { generateEngine, SHARD_ROUTE_HEADER } from "../../shard/route.ts";

export function registerChat(app: Hono, ctx: WorkerContext): void {
  app.post("/v1/chat/completions", async (c) => {
    const body = await modelBody(c, ctx, ModelKind.LLAMA_GGUF);
    if (body instanceof Response) return body;
    if (!Array.isArray(body.messages) || body.messages.length === 0) return errorJson(400, "messages: at least one message is required", "invalid_request", "messages");
    const messages = (body.messages as { role?: unknown; content?: unknown }[]).map((m) => ({ role: String(m.role ?? "user"), content: contentText(m.content) }));
    // vLLM's continuation fields: the router's stream resume sends them.
    const continueFinal = body.continue_final_message === true;
    if (continueFinal && messages.at(-1)!.role !== "assistant") {
      return errorJson(400, "continue_final_message: the last message must be the assistant's", "invalid_request", "messages");
    }
    if (continueFinal && body.add_generation_prompt === true) {
      return errorJson(400, "continue_final_message and add_generation_prompt cannot both be true", "invalid_request", "add_generation_prompt");
    }
    // The head shard of a split model runs it down the pipeline (the router's route, or its static --next).
    const engine = generateEngine(ctx, c.req.header(SHARD_ROUTE_HEADER));
    if (!engine.ok) return errorJson(engine.status, engine.message, engine.code);
    return runGenerate(ctx, engine.engine, body as unknown as GenerateBody, { case: "messages", value: messages, continueFinal }, { chat: true, requestId: requestId(c), spanId: traceSpanId(c), signal: c.req.raw.signal, prefix: routerPrefixName(body), cacheScope: routerCacheScope(body) });
  });
}
