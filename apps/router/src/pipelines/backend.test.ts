// The route a head shard is sent carries tickets that must outlive the
// request carrying it: the head rebuilds a stream around a lost shard with
// that route until the stream's own deadline, and an expired ticket read as
// a lost shard (each healthy replica blamed in turn).
import { describe, expect, it } from "vitest";
import { decodeShardRoute, workerRecordSchema, SHARD_ROUTE_HEADER, type WorkerRecord } from "@switchyard/state";
import type { WorkerConnections } from "../backends/worker/client.ts";
import { PipelineBackend, routeTicketMs } from "./backend.ts";
import { placePipelines } from "./placement.ts";

const M = "smollm2-135m-instruct";
const shard = (id: string, start: number, end: number): WorkerRecord =>
  workerRecordSchema.parse({ id, url: `http://10.0.0.${id.length}:9100`, models: [], state: "ready", inFlight: 0, queueDepth: 0, capacity: 8, layerRanges: [{ model: M, start, end, blocks: 30, digest: "a".repeat(64) }], startedAt: 1, updatedAt: 2 });

describe("a pipeline's route tickets", () => {
  it("are good for a reused route's minute, the whole request's deadline and a minute of skew", () => {
    const conns = { tokenFor: () => "worker-credential-0123456789" } as unknown as WorkerConnections;
    for (const totalMs of [600_000, 3_600_000]) {
      // A plan of its own each time: a signed route is reused per plan.
      const plan = placePipelines([shard("h", 0, 15), shard("t", 15, 30)]).get(M)![0]!;
      const backend = new PipelineBackend(plan, conns, M, routeTicketMs(totalMs));
      const now = Date.now();
      const header = (backend as unknown as { extraHeaders(): Record<string, string> }).extraHeaders()[SHARD_ROUTE_HEADER]!;
      const route = decodeShardRoute(header);
      expect(route.ok).toBe(true);
      if (!route.ok) return;
      // A request may take the route 60 s after signing and then run totalMs.
      expect(route.route.exp).toBeGreaterThanOrEqual(now + 60_000 + totalMs + 60_000);
      expect(route.route.exp).toBeLessThan(now + 60_000 + totalMs + 120_000);
    }
  });
});
