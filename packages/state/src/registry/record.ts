// The worker heartbeat record: what a worker tells every router about itself.
// One zod schema is the contract; docs/REGISTRY.md describes it for humans.
import * as z from "zod";

export const workerStates = ["warming", "ready", "draining", "degraded"] as const;
export type WorkerState = (typeof workerStates)[number];

export const layerRangeSchema = z.object({
  model: z.string(),
  start: z.number().int().nonnegative(),
  end: z.number().int().nonnegative(),
  /** Blocks the whole model has (a shard's range is part of them); absent in records of older workers. */
  blocks: z.number().int().positive().optional(),
  /** SHA-256 (hex) of the model file the blocks come from: routers chain only shards of one file. */
  digest: z.string().regex(/^[0-9a-f]{64}$/).optional(),
});

export type LayerRangeRecord = z.infer<typeof layerRangeSchema>;

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
  /** Model weights the engine holds, measured at load (a shard: its blocks only, plus embeddings on the first and norm + head on the last). */
  weightBytes: z.number().int().nonnegative().optional(),
  /** KV caches the engine has allocated now (whole-model sequences and shard sequences). */
  kvCacheBytes: z.number().int().nonnegative().optional(),
  layerRanges: z.array(layerRangeSchema).default([]),
  /** Names (registry/prefix.ts) of prompt prefixes the engine computed recently, newest first: routers send requests with these prefixes here. */
  prefixes: z.array(z.string().max(64)).max(64).default([]),
  version: z.string().default("0"),
  startedAt: z.number().int(),
  /** Agent start → first ready (models loaded and warmed up), in ms; absent until then. */
  readyMs: z.number().int().nonnegative().optional(),
  /** Wall-clock ms of this heartbeat (the record is rewritten every beat). */
  updatedAt: z.number().int(),
  /**
   * The TTL the record is written with, ms. When the registry loses its
   * records (Redis back empty), routers keep routing to this worker that
   * long, or until it heartbeats again. Absent in records of older workers.
   */
  ttlMs: z.number().int().positive().optional(),
});

export type WorkerRecord = z.infer<typeof workerRecordSchema>;
export type WorkerRecordInput = z.input<typeof workerRecordSchema>;

/** True when a router may send new requests to this worker. */
export function acceptsNewWork(w: WorkerRecord): boolean {
  return w.state === "ready" || w.state === "degraded";
}

/** Worker ids: also the Redis key suffix and the ACL user's name. */
export const workerIdPattern = /^[A-Za-z0-9._-]{1,64}$/;

/** The TTL a worker's record is written with by default (the agent's `ttlMs`); routers assume it for a record that names none. */
export const DEFAULT_WORKER_TTL_MS = 3_000;

export type DecodedRecord = { ok: true; record: WorkerRecord } | { ok: false; reason: "id_mismatch" | "too_large" | "invalid_record" | "invalid_key"; detail: string };

/**
 * A stored record as routers must read it: `keyId` is the id its key belongs
 * to — the one thing the writer could not choose (its ACL user may write only
 * that key) — and a record naming any other id is refused. Size is checked
 * before parsing.
 */
export function decodeRecord(keyId: string, raw: string, maxBytes: number): DecodedRecord {
  if (!workerIdPattern.test(keyId)) return { ok: false, reason: "invalid_key", detail: "the key's suffix is not a worker id" };
  // UTF-16 length ≤ bytes ≤ 3 × it: the cheap test first.
  if (raw.length > maxBytes || (raw.length * 3 > maxBytes && Buffer.byteLength(raw) > maxBytes)) {
    return { ok: false, reason: "too_large", detail: `record is over ${maxBytes} bytes` };
  }
  let json: unknown;
  try {
    json = JSON.parse(raw);
  } catch {
    return { ok: false, reason: "invalid_record", detail: "record is not JSON" };
  }
  const parsed = workerRecordSchema.safeParse(json);
  if (!parsed.success) return { ok: false, reason: "invalid_record", detail: parsed.error.issues.slice(0, 3).map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") };
  if (parsed.data.id !== keyId) return { ok: false, reason: "id_mismatch", detail: `record says id '${parsed.data.id.slice(0, 64)}' but is stored under worker '${keyId}'` };
  return { ok: true, record: parsed.data };
}

/** An invite as stored next to the worker keys (docs/REGISTRY.md). */
export const inviteGrantSchema = z.object({
  models: z.array(z.string().min(1).max(256)).max(256),
  createdAt: z.number().int(),
});

/** An invite as stored, or undefined when absent or unreadable (an unreadable invite allows nothing). */
export function decodeInvite(raw: string | null | undefined): z.infer<typeof inviteGrantSchema> | undefined {
  if (typeof raw !== "string") return undefined;
  try {
    const parsed = inviteGrantSchema.safeParse(JSON.parse(raw));
    return parsed.success ? parsed.data : undefined;
  } catch {
    return undefined;
  }
}
