// Which engine a generation runs on: the worker's own, its static pipeline,
// or — when the router names the shards after this head in the request
// (x-switchyard-shard-route) — that route. The route is trusted as far as
// the request is (it carries this worker's credential: only routers have
// it), and checked against this shard: the same model and GGUF digest, its
// stages continuing this shard's blocks to the model's last. A lease on one
// of the route's shards travels with each sequence to that shard, which
// checks its fencing token itself (shard/server.ts).
import { create } from "@bufbuild/protobuf";
import { ShardFenceSchema, type ShardFence } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { decodeShardRoute, FENCING_SIGNATURE_HEADER, FENCING_WORKER_HEADER, SHARD_ROUTE_HEADER } from "@switchyard/state";
import { FENCING_HEADER, parseFencingToken } from "../server/fencing.ts";
import type { WorkerContext } from "../server/context.ts";
import type { GenerateEngine } from "./pipeline.ts";

export { SHARD_ROUTE_HEADER };

export type RouteChoice = { ok: true; engine: GenerateEngine } | { ok: false; status: 400 | 409 | 503; message: string; code: string };

/**
 * The lease fence for a shard after this head, from the router's headers
 * (x-switchyard-fencing-worker naming it; the app's fencing middleware has
 * checked that it is on the route and the token well-formed).
 */
function shardFence(header: (name: string) => string | undefined): ShardFence | undefined {
  const workerId = header(FENCING_WORKER_HEADER);
  const parsed = parseFencingToken(header(FENCING_HEADER));
  if (workerId === undefined || !parsed.ok || parsed.token === undefined) return undefined;
  return create(ShardFenceSchema, { workerId, token: BigInt(parsed.token), signature: header(FENCING_SIGNATURE_HEADER) ?? "" });
}

/** `header`: the request's headers (the route, a lease's fence). */
export function generateEngine(ctx: WorkerContext, header: (name: string) => string | undefined): RouteChoice {
  const routeHeader = header(SHARD_ROUTE_HEADER);
  if (routeHeader === undefined) {
    if (ctx.shardHead && !ctx.shardHead.pipeline.hasStaticPath) {
      return { ok: false, status: 503, code: "shard_route_required", message: "this worker is the head shard of a split model with no static --next: a router's route (x-switchyard-shard-route) is required" };
    }
    return { ok: true, engine: ctx.pipeline ?? ctx.supervisor.client! };
  }
  const head = ctx.shardHead;
  const shard = head?.shard();
  if (!head || !shard) return { ok: false, status: 400, code: "not_a_head_shard", message: "x-switchyard-shard-route: this worker is not the head shard of a split model" };
  const decoded = decodeShardRoute(routeHeader);
  if (!decoded.ok) return { ok: false, status: 400, code: "invalid_shard_route", message: `x-switchyard-shard-route: ${decoded.reason}` };
  const route = decoded.route;
  if (route.model !== shard.model) return { ok: false, status: 409, code: "shard_route_mismatch", message: `x-switchyard-shard-route is for '${route.model}'; this head shard serves '${shard.model}'` };
  if (route.digest !== head.digest) {
    return { ok: false, status: 409, code: "shard_route_mismatch", message: `model file differs: this head shard's GGUF is sha256 ${head.digest.slice(0, 16)}…, the route's ${route.digest.slice(0, 16)}…` };
  }
  const first = route.stages[0]!;
  const last = route.stages.at(-1)!;
  if (first.start !== shard.layerEnd || last.end !== shard.nLayers) {
    return { ok: false, status: 409, code: "shard_route_mismatch", message: `x-switchyard-shard-route covers blocks ${first.start}-${last.end}; after this head's 0-${shard.layerEnd} it must cover ${shard.layerEnd}-${shard.nLayers}` };
  }
  return { ok: true, engine: head.pipeline.routed(route, shardFence(header)) };
}
