// What the worker's routes share: the supervised engine, the loaded models,
// the in-flight counter and the draining flag.
import type { EngineSupervisor } from "../engine/supervisor.ts";
import type { Loaded } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { GenerateEngine, PipelineHead } from "../shard/pipeline.ts";
import type { FencingGuard } from "./fencing.ts";

export interface WorkerContext {
  supervisor: EngineSupervisor;
  /** Bearer secret the router must present. */
  token: string;
  /** Requests being served now. */
  readonly inFlight: number;
  /** Count one request in; call the returned function (idempotent) when it ends. */
  begin(): () => void;
  /**
   * Count one HTTP request in from its arrival until its handler has
   * answered (a body still uploading included): only the drain waits on
   * these; inFlight, which routers see, counts the engine's work alone.
   */
  arrive(): () => void;
  draining: boolean;
  /** Resolves when nothing is in flight or arriving (used by drain). */
  idle(): Promise<void>;
  log: (msg: string, fields?: Record<string, unknown>) => void;
  /**
   * This worker's lease fencing: the highest token seen (kept across restarts
   * with a state file) and, with the routers' public key, the signatures
   * required. Its HTTP API and, on a shard, the sequences opened over shard
   * connections are checked against this one guard.
   */
  fencing: FencingGuard;
  /** A generation with this prompt prefix (registry/prefix.ts) finished: the engine now caches it. */
  notePrefix(key: string): void;
  /** On the head shard of a split model: generations run down the pipeline. */
  pipeline?: GenerateEngine;
  /** On the head shard: the pipeline driver, its shard and GGUF digest, for requests that carry a router's route. */
  shardHead?: { pipeline: PipelineHead; shard: () => Loaded | undefined; digest: string };
}
