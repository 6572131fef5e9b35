// POST /v1/hidden_states on the worker: per-layer activations as safetensors
// bytes (default) or JSON floats (Accept: application/json).
import { DType, Pooling, type ChatMessages, type Tensor } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { EngineClient } from "../../engine/client.ts";
import { EngineError } from "../../engine/client.ts";
import type { WorkerContext } from "../context.ts";
import { errorJson } from "../errors.ts";
import { contentText } from "../generate.ts";
import { encodeSafetensors, tensorToFloats } from "../safetensors.ts";

const poolings: Record<string, Pooling> = { none: Pooling.NONE, mean: Pooling.MEAN, last: Pooling.LAST };
const dtypes: Record<string, DType> = { f32: DType.DTYPE_F32, f16: DType.DTYPE_F16 };

export async function runHiddenStates(ctx: WorkerContext, engine: EngineClient, body: Record<string, unknown>, wantJson: boolean): Promise<Response> {
  const pooling = poolings[String(body.pooling ?? "none")];
  if (pooling === undefined) return errorJson(400, "pooling: one of none, mean, last", "invalid_request", "pooling");
  const dtype = dtypes[String(body.dtype ?? "f32")];
  if (dtype === undefined) return errorJson(400, "dtype: one of f32, f16", "invalid_request", "dtype");
  const layers = body.layers === undefined || body.layers === "all" ? [] : body.layers;
  if (!Array.isArray(layers) || !layers.every((l) => Number.isInteger(l) && l >= 0)) return errorJson(400, "layers: 'all' or an array of layer indices", "invalid_request", "layers");
  let input: { case: "prompt"; value: string } | { case: "messages"; value: ChatMessages };
  if (typeof body.input === "string") input = { case: "prompt", value: body.input };
  else if (Array.isArray(body.messages) && body.messages.length > 0) {
    input = {
      case: "messages",
      value: {
        $typeName: "switchyard.engine.v1.ChatMessages",
        messages: (body.messages as { role?: unknown; content?: unknown }[]).map((m) => ({ $typeName: "switchyard.engine.v1.ChatMessage", role: String(m.role ?? "user"), content: contentText(m.content) })),
        continueFinalMessage: false,
      },
    };
  } else return errorJson(400, "input (a string) or messages is required", "invalid_request", "input");
  const end = ctx.begin();
  try {
    const ev = await engine.once({
      case: "hiddenStates",
      value: { $typeName: "switchyard.engine.v1.HiddenStates", model: String(body.model), input, layers: layers as number[], pooling, dtype },
    });
    if (ev.kind.case !== "hiddenStates") return errorJson(502, "engine answered without hidden states", "engine_error");
    const { layers: got, tensors, nTokens } = ev.kind.value;
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
    if (err instanceof EngineError && (err.code === 1 || err.code === 3)) return errorJson(400, err.message, "invalid_request");
    return errorJson(503, (err as Error).message, "engine_error");
  } finally {
    end();
  }
}
