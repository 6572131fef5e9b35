// The worker heartbeat record: what a worker tells every router about itself.
// One zod schema is the contract; docs/REGISTRY.md describes it for humans.
import { z } from "zod";

export const workerStates = ["warming", "ready", "draining", "degraded"] as const;
export type WorkerState = (typeof workerStates)[number];

export const layerRangeSchema = z.object({
  model: z.string(),
  start: z.number().int().nonnegative(),
  end: z.number().int().nonnegative(),
});

export const workerRecordSchema = z.object({
  /** Stable id, unique across the fabric (also the Redis key suffix). */
  id: z.string().regex(/^[A-Za-z0-9._-]{1,64}$/),
  /** Base URL the router calls, e.g. http://10.0.0.5:9100 */
  url: z.string().url(),
  /** Model names this worker serves. */
  models: z.array(z.string().min(1)).min(0),
  state: z.enum(workerStates),
  /** Requests being served now. */
  inFlight: z.number().int().nonnegative(),
  /** Requests accepted but waiting for a batch slot. */
  queueDepth: z.number().int().nonnegative(),
  /** Sequences the worker serves concurrently (its batch capacity). */
  capacity: z.number().int().positive(),
  device: z.string().default("cpu"),
  memoryBytes: z.number().int().nonnegative().optional(),
  layerRanges: z.array(layerRangeSchema).default([]),
  /** Names (registry/prefix.ts) of prompt prefixes the engine computed recently, newest first: routers send requests with these prefixes here. */
  prefixes: z.array(z.string().max(64)).max(64).default([]),
  version: z.string().default("0"),
  startedAt: z.number().int(),
  /** Wall-clock ms of this heartbeat (the record is rewritten every beat). */
  updatedAt: z.number().int(),
});

export type WorkerRecord = z.infer<typeof workerRecordSchema>;
export type WorkerRecordInput = z.input<typeof workerRecordSchema>;

/** True when a router may send new requests to this worker. */
export function acceptsNewWork(w: WorkerRecord): boolean {
  return w.state === "ready" || w.state === "degraded";
}
