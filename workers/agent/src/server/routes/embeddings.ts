// POST /v1/embeddings on the worker: engine Embed → OpenAI embedding list
// (floats, or base64 of little-endian f32 like OpenAI's encoding_format).
import type { EngineClient } from "../../engine/client.ts";
import { EngineError } from "../../engine/client.ts";
import type { WorkerContext } from "../context.ts";
import { errorJson } from "../errors.ts";

export async function runEmbeddings(ctx: WorkerContext, engine: EngineClient, body: Record<string, unknown>): Promise<Response> {
  const inputs = typeof body.input === "string" ? [body.input] : Array.isArray(body.input) && body.input.every((s) => typeof s === "string") ? (body.input as string[]) : undefined;
  if (!inputs || inputs.length === 0) return errorJson(400, "input: a string or a non-empty array of strings is required", "invalid_request", "input");
  const base64 = body.encoding_format === "base64";
  const end = ctx.begin();
  try {
    const ev = await engine.once({ case: "embed", value: { $typeName: "switchyard.engine.v1.Embed", model: String(body.model), inputs } });
    if (ev.kind.case !== "embeddings") return errorJson(502, "engine answered without embeddings", "engine_error");
    const data = ev.kind.value.vectors.map((t, index) => {
      const bytes = t.data;
      const f32 = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
      return { object: "embedding", index, embedding: base64 ? Buffer.from(f32.buffer).toString("base64") : Array.from(f32) };
    });
    const prompt = ev.kind.value.usage?.promptTokens ?? 0;
    return Response.json({ object: "list", data, model: body.model, usage: { prompt_tokens: prompt, total_tokens: prompt } });
  } catch (err) {
    if (err instanceof EngineError && err.code === 1) return errorJson(400, err.message, "invalid_request");
    return errorJson(503, (err as Error).message, "engine_error");
  } finally {
    end();
  }
}
