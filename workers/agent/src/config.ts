// The worker agent's configuration, parsed once (as the router's config.ts
// is): startAgent validates its options against one schema, fills in every
// default here, and the rest of the agent reads only the parsed value. The
// environment is read in this file alone (the model cache and the engine's
// cargo target dir), so what a worker runs with is visible in one place and
// a typo fails at start, not later. Flags and config files are the CLI's:
// `switchyard worker` turns them into these options.
import os from "node:os";
import path from "node:path";
import * as z from "zod";
import { DEFAULT_WORKER_TTL_MS } from "@switchyard/state";

/** The environment variables the agent reads (and nothing else reads any). */
export interface AgentEnv {
  /** Model cache root (default ~/.cache/switchyard). */
  SWITCHYARD_CACHE?: string;
  /** Where cargo builds the engine (default ~/.cache/switchyard/target). */
  CARGO_TARGET_DIR?: string;
}

const env = (): AgentEnv => process.env as AgentEnv;

/** The model cache: SWITCHYARD_CACHE or ~/.cache/switchyard. */
export function defaultCacheDir(e: AgentEnv = env()): string {
  return e.SWITCHYARD_CACHE ?? path.join(os.homedir(), ".cache", "switchyard");
}

/** The engine's cargo target dir: CARGO_TARGET_DIR or ~/.cache/switchyard/target (kept outside the clone). */
export function engineTargetDir(e: AgentEnv = env()): string {
  return e.CARGO_TARGET_DIR ?? path.join(os.homedir(), ".cache", "switchyard", "target");
}

const LayerRangeSchema = z
  .object({ start: z.number().int().min(0), end: z.number().int().min(1) })
  .strict()
  .refine((r) => r.start < r.end, { message: "start must be below end (blocks [start, end))" });

const PeerSchema = z.object({ url: z.string().url(), token: z.string().min(1) }).strict();

/**
 * Everything about a worker that is plain data (the registry store and the
 * log sink are dependencies, passed beside it). Defaults are the ones a
 * worker runs with when a flag is absent.
 */
export const WorkerConfigSchema = z
  .object({
    models: z.array(z.string().min(1)).min(1, "at least one --model is required"),
    workerId: z.string().min(1).max(128).optional(),
    /** Interface to listen on. */
    host: z.string().min(1).default("127.0.0.1"),
    /** 0: any free port. */
    port: z.number().int().min(0).max(65535).default(0),
    /** URL routers use to reach this worker; defaults to http://host:port. */
    advertise: z.string().min(1).optional(),
    /** The router's credential; requests without it are refused. */
    token: z.string().min(1, "a worker token is required"),
    device: z.enum(["auto", "cpu", "cuda", "metal"]).default("auto"),
    engineBinary: z.string().min(1).optional(),
    maxBatch: z.number().int().min(1).max(1024).default(16),
    maxSeqLen: z.number().int().min(16).max(1 << 20).default(2048),
    /** Bytes the worker's llama models may take (weights + KV for maxBatch × maxSeqLen); default: the host's memory or its cgroup limit. */
    memoryBudget: z.number().int().min(1).optional(),
    threads: z.number().int().min(1).max(1024).optional(),
    heartbeatMs: z.number().int().min(10).default(1000),
    /** How long a record outlives its last heartbeat. */
    ttlMs: z.number().int().min(50).default(DEFAULT_WORKER_TTL_MS),
    drainGraceMs: z.number().int().min(0).default(30_000),
    /**
     * An engine that owes an answer and sends nothing for this long (ms) is
     * wedged (a hung device, a deadlock): it is killed and restarted, and its
     * requests fail at once instead of at their deadlines. 0 turns it off.
     */
    engineStallMs: z
      .number()
      .int()
      .refine((ms) => ms === 0 || (ms >= 1000 && ms <= 3_600_000), "must be 0 (off) or 1000 to 3600000 ms")
      .default(60_000),
    /** File that keeps the highest lease fencing token across restarts (none: in memory only). */
    fencingStatePath: z.string().min(1).optional(),
    /** The routers' public fencing key (the join command's --fencing-key): only router-signed fencing tokens count. */
    fencingKey: z.string().min(1).optional(),
    /** Serve only blocks [start, end) of the llama model: one shard of a split model (`--layers 0-15`). */
    layers: LayerRangeSchema.optional(),
    /** The next shard of the pipeline (its URL and the credential it accepts); none on the last shard. */
    next: PeerSchema.optional(),
    /** Send activations to the next shard as f16 rows (half the bytes; f32 is exact). */
    shardF16: z.boolean().default(false),
    /**
     * A shard connection silent this long (ms) counts as lost, like a closed
     * one: the keepalive this shard asks of the next (it pings every quarter
     * of it). 0 turns it off.
     */
    shardKeepaliveMs: z
      .number()
      .int()
      .refine((ms) => ms === 0 || (ms >= 200 && ms <= 600_000), "must be 0 (off) or 200 to 600000 ms")
      .default(5000),
    /** On the head shard: steps (micro-batches) in flight down the pipeline at once (default: one per shard, from its share of the blocks). */
    pipelineDepth: z.number().int().min(1).max(64).optional(),
    /** Model cache root (default: defaultCacheDir()). */
    cacheDir: z.string().min(1).optional(),
  })
  .strict()
  .superRefine((c, ctx) => {
    // A record that expires between two heartbeats flaps in every router.
    if (c.ttlMs <= c.heartbeatMs) ctx.addIssue({ code: "custom", path: ["ttlMs"], message: `must exceed heartbeatMs (${c.heartbeatMs})` });
    if (c.next && !c.layers) ctx.addIssue({ code: "custom", path: ["next"], message: "the next shard needs layers (this worker must be a shard itself)" });
  });

export type WorkerConfigInput = z.input<typeof WorkerConfigSchema>;
export type WorkerConfig = z.output<typeof WorkerConfigSchema> & { cacheDir: string };

export class WorkerConfigError extends Error {
  constructor(readonly issues: { path: string; message: string }[]) {
    super(`invalid worker config: ${issues.map((i) => (i.path ? `${i.path}: ${i.message}` : i.message)).join("; ")}`);
    this.name = "WorkerConfigError";
  }
}

/**
 * Validates a worker's options and fills in the defaults and what comes from
 * the environment (options win over the environment). Throws
 * WorkerConfigError naming each bad field; unknown fields are refused.
 */
export function parseWorkerConfig(input: WorkerConfigInput, e: AgentEnv = env()): WorkerConfig {
  const r = WorkerConfigSchema.safeParse(input);
  if (!r.success) throw new WorkerConfigError(r.error.issues.map((i) => ({ path: i.path.join("."), message: i.message })));
  return { ...r.data, cacheDir: r.data.cacheDir ?? defaultCacheDir(e) };
}
