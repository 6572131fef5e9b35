import { describe, expect, it } from "vitest";
import { decodeShardLeg, decodeShardRoute, encodeShardRoute, legOf, restRoute, signShardRoute, verifyShardTicket, workerRecordSchema, type WorkerRecord } from "@switchyard/state";
import { describePipeline, pipelineWithout, pipelineWorkers, placePipelines, routePlanOf } from "./placement.ts";

const M = "smollm2-135m-instruct";
const D1 = "a".repeat(64);
const D2 = "b".repeat(64);

function shard(id: string, start: number, end: number, extra: Partial<WorkerRecord> & { digest?: string; blocks?: number } = {}): WorkerRecord {
  const { digest = D1, blocks = 30, ...rest } = extra;
  return workerRecordSchema.parse({
    id,
    url: `http://10.0.0.${id.length}:9100`,
    models: [],
    state: "ready",
    inFlight: 0,
    queueDepth: 0,
    capacity: 8,
    layerRanges: [{ model: M, start, end, blocks, digest }],
    startedAt: 1,
    updatedAt: 2,
    ...rest,
  });
}

describe("placement of split models from heartbeats", () => {
  it("chains shards of one model file into pipelines covering every block, replicas best first", () => {
    const plans = placePipelines([shard("h1", 0, 15), shard("t1", 15, 30, { inFlight: 6 }), shard("t2", 15, 30, { inFlight: 1 })]).get(M)!;
    expect(plans).toHaveLength(1);
    const p = plans[0]!;
    expect(p.head.id).toBe("h1");
    expect(p.stages.map((s) => [s.start, s.end, s.replicas.map((w) => w.id)])).toEqual([[15, 30, ["t2", "t1"]]]);
    expect(describePipeline(p)).toBe("pipeline[h1 0-15 > t2|t1 15-30]");
    expect(pipelineWorkers(p)).toEqual(["h1", "t2", "t1"]);
    // Routed as one worker: the head's id and URL, the model, the capacity of its smallest stage.
    expect(p.record).toMatchObject({ id: "h1", models: [M], capacity: 8 });
  });

  it("leaves out replicas (leased by others) and puts one first, unless the pipeline cannot run without them", () => {
    const p = placePipelines([shard("h", 0, 10), shard("m1", 10, 20), shard("m2", 10, 20, { inFlight: 2 }), shard("t1", 20, 30), shard("t2", 20, 30, { inFlight: 7 })]).get(M)![0]!;
    expect(describePipeline(p)).toBe("pipeline[h 0-10 > m1|m2 10-20 > t1|t2 20-30]");
    const skip = (...ids: string[]) => (id: string) => ids.includes(id);
    // Nothing to leave out: the plan itself.
    expect(pipelineWithout(p, skip("other"))).toBe(p);
    // One replica of a stage: the others serve it; the record's load is that of the busiest first replica now.
    const q = pipelineWithout(p, skip("t1"))!;
    expect(describePipeline(q)).toBe("pipeline[h 0-10 > m1|m2 10-20 > t2 20-30]");
    expect(q.record.inFlight).toBe(7);
    expect(routePlanOf(q).stages.map((s) => s.hops.map((h) => h.id))).toEqual([["m1", "m2"], ["t2"]]);
    expect(describePipeline(p)).toBe("pipeline[h 0-10 > m1|m2 10-20 > t1|t2 20-30]");
    // The holder's leased replica first in its stage.
    expect(describePipeline(pipelineWithout(p, skip(), "m2")!)).toBe("pipeline[h 0-10 > m2|m1 10-20 > t1|t2 20-30]");
    expect(describePipeline(pipelineWithout(p, skip("m1"), "t2")!)).toBe("pipeline[h 0-10 > m2 10-20 > t2|t1 20-30]");
    // Without its head, or without every replica of a stage, there is no pipeline.
    expect(pipelineWithout(p, skip("h"))).toBeUndefined();
    expect(pipelineWithout(p, skip("t1", "t2"))).toBeUndefined();
  });

  it("prefers fewer hops, covers three-way splits, and gives every head its pipeline", () => {
    const plans = placePipelines([shard("h1", 0, 10), shard("h2", 0, 10), shard("m", 10, 20), shard("t", 20, 30), shard("big", 10, 30)]).get(M)!;
    expect(plans.map((p) => describePipeline(p))).toEqual(["pipeline[h1 0-10 > big 10-30]", "pipeline[h2 0-10 > big 10-30]"]);
    const three = placePipelines([shard("h", 0, 10), shard("m", 10, 20), shard("t", 20, 30)]).get(M)!;
    expect(three.map(describePipeline)).toEqual(["pipeline[h 0-10 > m 10-20 > t 20-30]"]);
  });

  it("lists nothing without a complete pipeline: a gap, a shard still warming, or only mismatched model files", () => {
    expect(placePipelines([shard("h", 0, 15), shard("t", 16, 30)]).get(M)).toBeUndefined();
    expect(placePipelines([shard("h", 0, 15), shard("t", 15, 30, { state: "warming" })]).get(M)).toBeUndefined();
    expect(placePipelines([shard("h", 0, 15), shard("t", 15, 30, { state: "draining" })]).get(M)).toBeUndefined();
    // Another GGUF (digest), or the same name with another block count: never chained.
    expect(placePipelines([shard("h", 0, 15), shard("t", 15, 30, { digest: D2 })]).get(M)).toBeUndefined();
    expect(placePipelines([shard("h", 0, 15), shard("t", 15, 32, { blocks: 32 })]).get(M)).toBeUndefined();
    // A mismatched replica is left out; the matching one serves.
    const plans = placePipelines([shard("h", 0, 15), shard("t-other", 15, 30, { digest: D2 }), shard("t", 15, 30)]).get(M)!;
    expect(plans.map(describePipeline)).toEqual(["pipeline[h 0-15 > t 15-30]"]);
    // A whole worker's range (0-30) is no shard; records without a digest (older workers) are not chained.
    expect(placePipelines([shard("whole", 0, 30), shard("t", 15, 30)]).get(M)).toBeUndefined();
    const noDigest = workerRecordSchema.parse({ ...shard("t", 15, 30), layerRanges: [{ model: M, start: 15, end: 30 }] });
    expect(placePipelines([shard("h", 0, 15), noDigest]).get(M)).toBeUndefined();
  });

  it("signs a route the head can read and each shard can check with its own credential only", () => {
    const p = placePipelines([shard("h", 0, 10), shard("m1", 10, 20), shard("m2", 10, 20), shard("t", 20, 30)]).get(M)![0]!;
    const creds: Record<string, string> = { m1: "secret-m1", m2: "secret-m2", t: "secret-t" };
    const exp = Date.now() + 60_000;
    const route = signShardRoute(routePlanOf(p), (id) => creds[id], exp)!;
    const read = decodeShardRoute(encodeShardRoute(route));
    expect(read.ok && read.route).toEqual(route);
    const leg = legOf(route, 0);
    const back = decodeShardLeg(encodeShardRoute(leg));
    expect(back.ok && back.leg).toEqual(leg);
    for (const hop of route.stages[0]!.hops) expect(verifyShardTicket(creds[hop.id]!, hop.id, leg, hop.ticket)).toEqual({ ok: true });
    // Another worker's ticket, another credential, a changed rest of the route, an expired one: refused.
    const [a, b] = route.stages[0]!.hops;
    expect(verifyShardTicket(creds.m1!, "m1", leg, b!.ticket).ok).toBe(false);
    expect(verifyShardTicket("secret-t", "m1", leg, a!.ticket).ok).toBe(false);
    const redirected = { ...leg, rest: [{ ...leg.rest[0]!, hops: [{ ...leg.rest[0]!.hops[0]!, url: "http://169.254.169.254/" }] }] };
    expect(verifyShardTicket(creds.m1!, "m1", redirected, a!.ticket)).toMatchObject({ ok: false, reason: /not this worker's/ });
    expect(verifyShardTicket(creds.m1!, "m1", leg, a!.ticket, exp + 1)).toMatchObject({ ok: false, reason: /expired/ });
    expect(verifyShardTicket(creds.m1!, "m1", leg, undefined).ok).toBe(false);
    // The last stage's leg is checked by the last shard the same way.
    const tailLeg = legOf(route, 1);
    expect(restRoute(tailLeg)).toBeUndefined();
    expect(verifyShardTicket(creds.t!, "t", tailLeg, route.stages[1]!.hops[0]!.ticket)).toEqual({ ok: true });
    // A replica the router holds no credential for is left out; a stage without any makes no route.
    expect(signShardRoute(routePlanOf(p), (id) => (id === "m2" ? undefined : creds[id]), exp)!.stages[0]!.hops.map((h) => h.id)).toEqual(["m1"]);
    expect(signShardRoute(routePlanOf(p), (id) => (id === "t" ? undefined : creds[id]), exp)).toBeUndefined();
  });

  it("refuses malformed route headers", () => {
    expect(decodeShardRoute(undefined)).toMatchObject({ ok: false });
    expect(decodeShardRoute("!!")).toMatchObject({ ok: false, reason: /base64url/ });
    expect(decodeShardRoute("x".repeat(20_000))).toMatchObject({ ok: false, reason: /over/ });
    const t = "A".repeat(43);
    const gap = { v: 1, model: M, digest: D1, exp: 1, stages: [{ start: 10, end: 20, hops: [{ id: "m", url: "http://a:1", ticket: t }] }, { start: 21, end: 30, hops: [{ id: "t", url: "http://b:1", ticket: t }] }] };
    expect(decodeShardRoute(encodeShardRoute(gap as never))).toMatchObject({ ok: false, reason: /not where stage 0 ends/ });
  });
});
