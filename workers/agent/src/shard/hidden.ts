// Hidden states of a split model (issue 11, item 7): each shard captures the
// layers it holds — l with layer_start < l <= layer_end, and 0 (the
// embeddings) on the first — and, while later layers are asked for, passes
// its output rows (raw f32) to the next shard in one HIDDEN frame; the
// answers come back merged, so the head returns what an unsplit worker does.
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import {
  ErrorCode,
  HiddenStatesResultSchema,
  HiddenStatesSchema,
  type HiddenStates,
  type HiddenStatesResult,
  type Loaded,
  type Tensor,
} from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { EngineError, type EngineClient } from "../engine/client.ts";
import { FrameKind } from "./frame.ts";
import type { ShardLink } from "./link.ts";

/** The connection to the next shard (made on first use), if there is one. */
export type NextShard = () => Promise<ShardLink>;

/** Whether layer `l` (0 = embeddings, i = output of block i) is this shard's to compute. */
export function holdsLayer(shard: Loaded, l: number): boolean {
  return (shard.layerStart < l && l <= shard.layerEnd) || (l === 0 && shard.layerStart === 0);
}

/**
 * This shard's part of `req` (explicit layers, all within [0, n_layers]):
 * its own layers from the local engine, the rest from the next shard, which
 * gets this shard's output rows. `req.activations` is set on every shard but
 * the first. Layers come back in the order of `req.layers`.
 */
export async function shardHiddenStates(engine: EngineClient, shard: Loaded, req: HiddenStates, next: NextShard | undefined): Promise<HiddenStatesResult> {
  if (req.model !== shard.model) throw new EngineError(ErrorCode.INVALID_REQUEST, `this shard serves '${shard.model}', not '${req.model}'`);
  const own = [...new Set(req.layers.filter((l) => holdsLayer(shard, l)))];
  const rest = [...new Set(req.layers.filter((l) => l > shard.layerEnd))];
  const earlier = req.layers.find((l) => !holdsLayer(shard, l) && l <= shard.layerEnd);
  if (earlier !== undefined) throw new EngineError(ErrorCode.INVALID_REQUEST, `layer ${earlier} comes before this shard's blocks ${shard.layerStart}-${shard.layerEnd}`);
  if (own.length === 0 && rest.length === 0) throw new EngineError(ErrorCode.INVALID_REQUEST, "no layers asked of this shard");
  if (rest.length > 0 && !next) {
    throw new EngineError(ErrorCode.INVALID_REQUEST, `layers ${rest.join(",")} are past this shard's blocks (it ends at ${shard.layerEnd} of ${shard.nLayers}) and it has no next shard`);
  }
  const ev = await engine.once({ case: "hiddenStates", value: create(HiddenStatesSchema, { ...req, layers: own, passOn: rest.length > 0 }) });
  if (ev.kind.case !== "hiddenStates") throw new EngineError(ErrorCode.INTERNAL, `engine answered hidden states with ${ev.kind.case}`);
  const local = ev.kind.value;
  const found = new Map<number, Tensor>(local.layers.map((l, i) => [l, local.tensors[i]!]));
  if (rest.length > 0) {
    if (!local.output) throw new EngineError(ErrorCode.INTERNAL, "the engine passed no rows on");
    const body = toBinary(HiddenStatesSchema, create(HiddenStatesSchema, { model: req.model, layers: rest, pooling: req.pooling, dtype: req.dtype, activations: local.output, ...(req.fence ? { fence: req.fence } : {}) }));
    const reply = await (await next!()).request(FrameKind.HIDDEN, body);
    if (reply.kind !== FrameKind.HIDDEN_STATES) throw new EngineError(ErrorCode.INTERNAL, `the next shard answered hidden states with frame kind ${reply.kind}`);
    const remote = fromBinary(HiddenStatesResultSchema, reply.body);
    remote.layers.forEach((l, i) => found.set(l, remote.tensors[i]!));
  }
  const missing = req.layers.find((l) => !found.has(l));
  if (missing !== undefined) throw new EngineError(ErrorCode.INTERNAL, `layer ${missing} missing from the pipeline's answer`);
  return create(HiddenStatesResultSchema, { layers: req.layers, tensors: req.layers.map((l) => found.get(l)!), nTokens: local.nTokens });
}

/** The head's side: a request as a whole worker takes it (empty layers = all), checked, then down the pipeline. */
export async function pipelineHiddenStates(engine: EngineClient, shard: Loaded, req: HiddenStates, next: NextShard): Promise<HiddenStatesResult> {
  const nl = shard.nLayers;
  const layers = req.layers.length === 0 ? Array.from({ length: nl + 1 }, (_, i) => i) : req.layers;
  const bad = layers.find((l) => l > nl);
  if (bad !== undefined) throw new EngineError(ErrorCode.INVALID_REQUEST, `layer ${bad} out of range 0..=${nl}`);
  return shardHiddenStates(engine, shard, { ...req, layers }, next);
}
