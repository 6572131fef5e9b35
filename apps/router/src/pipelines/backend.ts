// A split model's pipeline as a backend: requests go to its head shard like
// to any worker (same connections, credential, fencing, relaying, failover),
// with the route of the shards after it in x-switchyard-shard-route — each
// replica with a ticket under its own credential, good for as long as a
// request using it may last (routeTicketMs).
import { encodeShardRoute, SHARD_ROUTE_HEADER, signShardRoute, type WorkerRecord } from "@switchyard/state";
import type { Backend } from "../backends/types.ts";
import { WorkerBackend, type WorkerConnections } from "../backends/worker/client.ts";
import type { WorkerDirectory } from "../routing/directory.ts";
import { describePipeline, pipelineWithout, pipelineWorkers, routePlanOf, type PipelinePlan } from "./placement.ts";

/** A signed route is reused this long (tickets are HMACs: cheap, but not free on every request). */
const REUSE_MS = 60_000;

/**
 * How long a route's tickets let the head open connections along it: a
 * head rebuilds a stream around a lost shard with the route its request
 * came with, so the tickets must outlive the longest request that may
 * carry them — signed, reused for REUSE_MS, then running up to
 * `deadlines.totalMs` — plus a minute of clock skew between router and
 * shards. (Fixed at 10 minutes before, a stream past that could not be
 * rebuilt, and each healthy replica it tried was taken for lost.)
 */
export function routeTicketMs(totalMs: number): number {
  return REUSE_MS + totalMs + 60_000;
}

const signed = new WeakMap<PipelinePlan, { header: string; until: number }>();

export class PipelineBackend extends WorkerBackend {
  readonly pipelineWorkers: readonly string[];
  private current: PipelinePlan;

  constructor(
    plan: PipelinePlan,
    private readonly conns: WorkerConnections,
    model: string,
    /** How long its route's tickets are good for (routeTicketMs). */
    private readonly ticketMs: number,
  ) {
    super(plan.record, conns, model);
    this.current = plan;
    this.pipelineWorkers = pipelineWorkers(plan);
  }

  /** The pipeline this request will use (narrowed, if it was). */
  get plan(): PipelinePlan {
    return this.current;
  }

  /**
   * For this request only: drops the replicas `skip` names from the route
   * the head gets, `prefer` first in its stage; false (and unchanged) when
   * the pipeline cannot run without them.
   */
  narrow(skip: (workerId: string) => boolean, prefer?: string): boolean {
    const p = pipelineWithout(this.current, skip, prefer);
    if (!p) return false;
    this.current = p;
    return true;
  }

  describe(): string {
    return describePipeline(this.current);
  }

  protected override extraHeaders(): Record<string, string> {
    const now = Date.now();
    let s = signed.get(this.current);
    if (!s || s.until < now) {
      const route = signShardRoute(routePlanOf(this.current), (id) => this.conns.tokenFor(id), now + this.ticketMs);
      // Without credentials for a stage's replicas the head gets no route and refuses clearly.
      s = { header: route ? encodeShardRoute(route) : "", until: now + REUSE_MS };
      signed.set(this.current, s);
    }
    return s.header ? { [SHARD_ROUTE_HEADER]: s.header } : {};
  }
}

/** The chain's worker backend factory: a pipeline's record gets a PipelineBackend, any other a WorkerBackend. */
export function workerOrPipeline(directory: WorkerDirectory, connections: WorkerConnections, totalMs: number): (w: WorkerRecord, model: string) => Backend {
  const ticketMs = routeTicketMs(totalMs);
  return (w, model) => {
    const plan = directory.pipelineOf(w);
    return plan ? new PipelineBackend(plan, connections, model, ticketMs) : new WorkerBackend(w, connections, model);
  };
}
