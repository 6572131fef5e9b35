// POST /v1/tokenize on the worker: how many tokens a chat request's prompt
// is, counted by the engine (Tokenize) exactly as a generation of the same
// messages would tokenize them — the model's own tokenizer through its chat
// template, the generation prompt appended, the tools rendered when the
// request's tool_choice shows them to the model — without generating. The
// router asks it for POST /v1/messages/count_tokens. vLLM's /tokenize names:
// `{count, max_model_len}`.
import { randomUUID } from "node:crypto";
import type { Hono } from "hono";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { WorkerContext } from "../context.ts";
import { chatInput, engineErrorStatus, toTokenize } from "../converters.ts";
import { errorJson } from "../errors.ts";
import { unknownField } from "../fields.ts";
import { engineRequestId, modelBody, requestId, traceSpanId } from "../request.ts";

export function registerTokenize(app: Hono, ctx: WorkerContext): void {
  app.post("/v1/tokenize", async (c) => {
    const body = await modelBody(c, ctx, ModelKind.LLAMA_GGUF);
    if (body instanceof Response) return body;
    const unknown = unknownField(body, "tokenize");
    if (unknown) return errorJson(400, `${unknown}: not a field this worker knows; it would be ignored`, "invalid_request", unknown);
    // As for a generation (the same reading): an image or audio part is refused, not counted as if
    // it were dropped; the tools the prompt renders are tool_choice's (none with "none").
    const input = chatInput(body);
    if ("param" in input) return errorJson(input.status, input.message, "invalid_request", input.param);
    const { messages, structured } = input;
    const model = ctx.supervisor.loaded.get(String(body.model))!;
    const engine = ctx.supervisor.client!;
    try {
      const ev = await engine.once({ case: "tokenize", value: toTokenize(String(body.model), messages, structured.tools) }, engineRequestId(requestId(c), traceSpanId(c), () => randomUUID().slice(0, 8)));
      if (ev.kind.case !== "tokenIds") return errorJson(502, "engine answered without token ids", "engine_error");
      return Response.json({ count: ev.kind.value.ids.length, max_model_len: model.maxSeqLen });
    } catch (err) {
      const e = engineErrorStatus(err);
      return errorJson(e.status, e.message, e.code, e.param);
    }
  });
}
