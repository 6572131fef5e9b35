// What the worker's routes share: the supervised engine, the loaded models,
// the in-flight counter and the draining flag.
import type { EngineSupervisor } from "../engine/supervisor.ts";
import type { Loaded } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { GenerateEngine, PipelineHead } from "../shard/pipeline.ts";

export interface WorkerContext {
  supervisor: EngineSupervisor;
  /** Bearer secret the router must present. */
  token: string;
  /** Requests being served now. */
  readonly inFlight: number;
  /** Count one request in; call the returned function (idempotent) when it ends. */
  begin(): () => void;
  draining: boolean;
  /** Resolves when in-flight reaches zero (used by drain). */
  idle(): Promise<void>;
  log: (msg: string, fields?: Record<string, unknown>) => void;
  /** Where the highest lease fencing token seen is kept across restarts (none: in memory only). */
  fencingStatePath?: string;
  /** With the routers' public fencing key, only router-signed fencing tokens for this worker's id count. */
  fencingKey?: { workerId: string; publicKey: string };
  /** A generation with this prompt prefix (registry/prefix.ts) finished: the engine now caches it. */
  notePrefix(key: string): void;
  /** On the head shard of a split model: generations run down the pipeline. */
  pipeline?: GenerateEngine;
  /** On the head shard: the pipeline driver, its shard and GGUF digest, for requests that carry a router's route. */
  shardHead?: { pipeline: PipelineHead; shard: () => Loaded | undefined; digest: string };
}
