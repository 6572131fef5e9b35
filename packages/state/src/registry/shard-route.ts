// Pipeline routes for split models. A router that sends a request to the
// head shard of a pipeline names, in one header, the shards after it: per
// stage (a block range) the live replicas in preference order, each with a
// ticket. A ticket is an HMAC under that worker's own call credential (the
// secret routers present to it) over its id, the model file's digest, its
// blocks, an expiry and everything after its stage — so a shard accepts a
// connection only on a route some router chose for it, the head never learns
// another worker's credential, and no worker can point the shard after it at
// a URL no router chose. The head trusts the header itself because the
// request carries the head's own credential.
import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import * as z from "zod";
import { workerIdPattern } from "./record.ts";

/** The request header carrying a route from the router to the head shard (base64url of its JSON). */
export const SHARD_ROUTE_HEADER = "x-switchyard-shard-route";
/** Stages after the head at most, and replicas named per stage. */
export const MAX_ROUTE_STAGES = 16;
export const MAX_STAGE_HOPS = 4;
/** A route header longer than this is refused unread. */
export const MAX_ROUTE_HEADER_BYTES = 12 * 1024;

const ticketPattern = /^[A-Za-z0-9_-]{43}$/;

export const shardHopSchema = z.object({
  id: z.string().regex(workerIdPattern),
  url: z.string().url().max(512),
  ticket: z.string().regex(ticketPattern),
});

export const shardStageSchema = z.object({
  start: z.number().int().nonnegative(),
  end: z.number().int().positive(),
  hops: z.array(shardHopSchema).min(1).max(MAX_STAGE_HOPS),
});

export const shardRouteSchema = z.object({
  v: z.literal(1),
  model: z.string().min(1).max(256),
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  /** Tickets are good until then (ms since the epoch); a connection made before lives on. */
  exp: z.number().int().positive(),
  stages: z.array(shardStageSchema).min(1).max(MAX_ROUTE_STAGES),
});

export type ShardHop = z.infer<typeof shardHopSchema>;
export type ShardStage = z.infer<typeof shardStageSchema>;
export type ShardRoute = z.infer<typeof shardRouteSchema>;

/** One shard's part of a route: what its ticket covers, sent with the connection to it. */
export interface ShardLeg {
  model: string;
  digest: string;
  exp: number;
  start: number;
  end: number;
  /** The stages after this shard's. */
  rest: ShardStage[];
}

export const shardLegSchema = z.object({
  model: z.string().min(1).max(256),
  digest: z.string().regex(/^[0-9a-f]{64}$/),
  exp: z.number().int().positive(),
  start: z.number().int().nonnegative(),
  end: z.number().int().positive(),
  rest: z.array(shardStageSchema).max(MAX_ROUTE_STAGES),
});

/** The leg of stage `i` of a route. */
export function legOf(route: ShardRoute, i: number): ShardLeg {
  const s = route.stages[i]!;
  return { model: route.model, digest: route.digest, exp: route.exp, start: s.start, end: s.end, rest: route.stages.slice(i + 1) };
}

/** The stages after a leg, as a route of their own (what a middle shard passes on). */
export function restRoute(leg: ShardLeg): ShardRoute | undefined {
  return leg.rest.length ? { v: 1, model: leg.model, digest: leg.digest, exp: leg.exp, stages: leg.rest } : undefined;
}

function ticketMessage(workerId: string, leg: ShardLeg): string {
  // Arrays, not objects: the bytes signed do not depend on key order.
  const rest = JSON.stringify(leg.rest.map((s) => [s.start, s.end, s.hops.map((h) => [h.id, h.url, h.ticket])]));
  const restHash = createHash("sha256").update(rest).digest("hex");
  return `switchyard:shard:v1\n${JSON.stringify([workerId, leg.model, leg.digest, leg.start, leg.end, leg.exp, restHash])}`;
}

/** The ticket for worker `workerId` on this leg, under that worker's call credential. */
export function shardTicket(credential: string, workerId: string, leg: ShardLeg): string {
  return createHmac("sha256", credential).update(ticketMessage(workerId, leg)).digest("base64url");
}

export type TicketVerdict = { ok: true } | { ok: false; reason: string };

/** What a shard checks of a connection: its ticket, under its own credential, for its own id, unexpired. */
export function verifyShardTicket(credential: string, workerId: string, leg: ShardLeg, ticket: string | undefined, nowMs = Date.now()): TicketVerdict {
  if (!ticket || !ticketPattern.test(ticket)) return { ok: false, reason: "no shard ticket (a router's route) with the connection" };
  const want = Buffer.from(shardTicket(credential, workerId, leg));
  const got = Buffer.from(ticket);
  if (want.length !== got.length || !timingSafeEqual(want, got)) return { ok: false, reason: "the shard ticket is not this worker's for this route" };
  if (leg.exp <= nowMs) return { ok: false, reason: `the shard ticket expired ${nowMs - leg.exp} ms ago` };
  return { ok: true };
}

/** A route before its tickets: the stages after the head with their replicas, best first. */
export interface RoutePlan {
  model: string;
  digest: string;
  stages: Array<{ start: number; end: number; hops: Array<{ id: string; url: string }> }>;
}

/**
 * Signs a plan into a route (tickets from the last stage back, since each
 * covers the stages after it). `credentialOf` gives each worker's call
 * credential; a replica without one is left out, and a stage left without
 * replicas makes the route impossible (undefined).
 */
export function signShardRoute(plan: RoutePlan, credentialOf: (workerId: string) => string | undefined, exp: number): ShardRoute | undefined {
  const stages: ShardStage[] = [];
  for (let i = plan.stages.length - 1; i >= 0; i--) {
    const p = plan.stages[i]!;
    const leg: ShardLeg = { model: plan.model, digest: plan.digest, exp, start: p.start, end: p.end, rest: [...stages] };
    const hops: ShardHop[] = [];
    for (const h of p.hops.slice(0, MAX_STAGE_HOPS)) {
      const cred = credentialOf(h.id);
      if (cred) hops.push({ id: h.id, url: h.url, ticket: shardTicket(cred, h.id, leg) });
    }
    if (hops.length === 0) return undefined;
    stages.unshift({ start: p.start, end: p.end, hops });
  }
  return { v: 1, model: plan.model, digest: plan.digest, exp, stages };
}

export function encodeShardRoute(route: ShardRoute | ShardLeg): string {
  return Buffer.from(JSON.stringify(route)).toString("base64url");
}

function decodeJson(text: string | undefined): { ok: true; json: unknown } | { ok: false; reason: string } {
  if (!text) return { ok: false, reason: "empty" };
  if (text.length > MAX_ROUTE_HEADER_BYTES) return { ok: false, reason: `over ${MAX_ROUTE_HEADER_BYTES} bytes` };
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return { ok: false, reason: "not base64url" };
  try {
    return { ok: true, json: JSON.parse(Buffer.from(text, "base64url").toString("utf8")) };
  } catch {
    return { ok: false, reason: "not JSON" };
  }
}

/** A route header as the head shard reads it: bounded, parsed, its stages contiguous. */
export function decodeShardRoute(text: string | undefined): { ok: true; route: ShardRoute } | { ok: false; reason: string } {
  const j = decodeJson(text);
  if (!j.ok) return j;
  const parsed = shardRouteSchema.safeParse(j.json);
  if (!parsed.success) return { ok: false, reason: parsed.error.issues.slice(0, 2).map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") };
  const r = parsed.data;
  for (let i = 0; i < r.stages.length; i++) {
    const s = r.stages[i]!;
    if (s.start >= s.end) return { ok: false, reason: `stage ${i}: blocks ${s.start}-${s.end} are empty` };
    if (i > 0 && s.start !== r.stages[i - 1]!.end) return { ok: false, reason: `stage ${i} starts at block ${s.start}, not where stage ${i - 1} ends (${r.stages[i - 1]!.end})` };
  }
  return { ok: true, route: r };
}

/** A leg as a shard reads it from a connection. */
export function decodeShardLeg(text: string | undefined): { ok: true; leg: ShardLeg } | { ok: false; reason: string } {
  const j = decodeJson(text);
  if (!j.ok) return j;
  const parsed = shardLegSchema.safeParse(j.json);
  if (!parsed.success) return { ok: false, reason: parsed.error.issues.slice(0, 2).map((i) => `${i.path.join(".")}: ${i.message}`).join("; ") };
  const leg = parsed.data;
  let at = leg.end;
  for (const s of leg.rest) {
    if (s.start !== at || s.end <= s.start) return { ok: false, reason: `the route's stages after blocks ${leg.start}-${leg.end} do not continue them` };
    at = s.end;
  }
  return { ok: true, leg };
}
