// Joining safely. Each invited worker gets a Redis ACL user that may write
// only its own registry key (so it cannot overwrite or delete another
// worker's record), and a call secret derived from the routers' secret key,
// which routers present on every request to that worker. Nothing per worker
// has to be stored for routers: they derive the same secret from the id.
// The invite itself (the models the worker may serve) is an admin-written key
// next to the worker's, which routers read and the worker cannot write.
import { createHash, createHmac, randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { onEveryDataNode, type RedisLike } from "../redis.ts";
import { fencingPublicKey } from "./fencing-key.ts";
import { workerIdPattern } from "./record.ts";
import { globEscape, invitedIndexKey, inviteKey, workerKey } from "./redis.ts";
import type { WorkerInviteGrant } from "./store.ts";

export function workerAclUser(workerId: string): string {
  return `sy-worker-${workerId}`;
}

/** The secret routers present to worker `workerId` (and the worker expects). */
export function workerCallSecret(secretKey: string, workerId: string): string {
  return createHmac("sha256", secretKey).update(`switchyard:worker:${workerId}`).digest("base64url");
}

/** SHA-256 (hex) of a Redis password, as `ACL SETUSER … #<hex>` takes it and `ACL GETUSER` lists it. */
export function redisPasswordSha256(password: string): string {
  return createHash("sha256").update(password).digest("hex");
}

/** Whether `s` is what redisPasswordSha256 makes (64 lower-case hex digits). */
export function isPasswordSha256(s: string): boolean {
  return /^[0-9a-f]{64}$/.test(s);
}

/** Why `workerId` cannot name a worker (its key, its ACL user), or undefined when it can. */
export function workerIdProblem(workerId: string): string | undefined {
  return workerIdPattern.test(workerId) ? undefined : `invalid worker id '${workerId}': letters, digits, '.', '_' or '-' (max 64)`;
}

/** A fresh password for a worker's ACL user. */
export function newWorkerPassword(): string {
  return randomBytes(24).toString("base64url");
}

/**
 * What a worker's ACL user may do: the few commands a heartbeat needs, on
 * its own registry key only. `password` is `>plain` or `#sha256hex`.
 */
function workerAclRules(prefix: string, workerId: string, password: string): string[] {
  // ACL key patterns are globs: the prefix must match only itself.
  const key = globEscape(workerKey(prefix, workerId));
  return ["reset", "on", password, `~${key}`, "resetchannels", "-@all", "+set", "+del", "+pexpire", "+ping", "+hello", "+auth", "+client|setname", "+cluster|slots"];
}

/** (Re)creates a worker's ACL user on one node from its password's SHA-256 (what routers restore from Postgres). */
export async function setWorkerUser(node: Redis, prefix: string, workerId: string, passwordSha256: string): Promise<void> {
  if (!isPasswordSha256(passwordSha256)) throw new Error(`worker ${workerId}: not a SHA-256 password hash`);
  await node.call("ACL", "SETUSER", workerAclUser(workerId), ...workerAclRules(prefix, workerId, `#${passwordSha256}`));
}

/** The SHA-256 password hashes of a worker's ACL user on one node (empty when it has no user there). */
export async function workerUserPasswords(node: Redis, workerId: string): Promise<string[]> {
  const info = (await node.call("ACL", "GETUSER", workerAclUser(workerId))) as unknown[] | null;
  if (!info) return [];
  const i = info.findIndex((v) => String(v) === "passwords");
  const list = i >= 0 ? info[i + 1] : undefined;
  return Array.isArray(list) ? list.map(String) : [];
}

export interface Invite {
  workerId: string;
  redisUser: string;
  redisPassword: string;
  callSecret: string;
  /** The models routers will route to this worker for (whatever else it advertises is ignored). */
  models: string[];
  /** The public key routers sign fencing tokens with (the worker's --fencing-key). */
  fencingKey: string;
}

/**
 * Creates (or rotates) the worker's ACL user and records its invite. The user
 * may run only the few commands a heartbeat needs, on its own key only — not
 * on its invite, which routers read to bound what it may be routed for.
 */
export async function inviteWorker(admin: RedisLike, opts: { prefix: string; workerId: string; secretKey: string; models: string[]; password?: string }): Promise<Invite> {
  const models = checkInvite(opts.workerId, opts.models);
  const redisUser = workerAclUser(opts.workerId);
  const redisPassword = opts.password ?? newWorkerPassword();
  // The invited set is how routers find the worker's key (its ACL user cannot add itself to a shared set).
  await writeInviteGrant(admin, opts.prefix, opts.workerId, models);
  // ACL users are per node and neither replicated nor spread by a Cluster:
  // every node gets the user, replicas too (they become primaries on
  // failover). A Cluster client also needs CLUSTER SLOTS to learn the slot map.
  const rules = workerAclRules(opts.prefix, opts.workerId, `>${redisPassword}`);
  await onEveryDataNode(admin, (node) => node.call("ACL", "SETUSER", redisUser, ...rules));
  return { workerId: opts.workerId, redisUser, redisPassword, callSecret: workerCallSecret(opts.secretKey, opts.workerId), models, fencingKey: fencingPublicKey(opts.secretKey) };
}

/** The invite's models, deduplicated; throws on a bad worker id or model list. */
export function checkInvite(workerId: string, models: readonly string[]): string[] {
  const bad = workerIdProblem(workerId);
  if (bad) throw new Error(bad);
  const out = [...new Set(models)];
  if (out.length === 0 || out.some((m) => m.length === 0 || m.length > 256)) throw new Error("an invite names at least one model (each 1–256 characters)");
  return out;
}

/** Writes the invite key and adds the worker to the invited set; with `onlyIfMissing`, an invite key already there is left as it is. */
export async function writeInviteGrant(admin: RedisLike, prefix: string, workerId: string, models: string[], onlyIfMissing = false): Promise<void> {
  const grant: WorkerInviteGrant = { models, createdAt: Date.now() };
  const key = inviteKey(prefix, workerId);
  const m = admin.multi();
  if (onlyIfMissing) m.set(key, JSON.stringify(grant), "NX");
  else m.set(key, JSON.stringify(grant));
  await m.sadd(invitedIndexKey(prefix), workerId).exec();
}

/** Deletes the worker's ACL user and its invite (routers stop routing to it at their next poll). */
export async function revokeWorker(admin: RedisLike, workerId: string, opts: { prefix?: string } = {}): Promise<boolean> {
  const n = Math.max(...(await onEveryDataNode(admin, async (node) => Number(await node.call("ACL", "DELUSER", workerAclUser(workerId))))));
  if (opts.prefix !== undefined) await admin.multi().del(inviteKey(opts.prefix, workerId)).srem(invitedIndexKey(opts.prefix), workerId).exec();
  return n > 0;
}

export function joinRedisUrl(adminUrl: string, invite: Invite): string {
  const u = new URL(adminUrl);
  u.username = encodeURIComponent(invite.redisUser);
  u.password = encodeURIComponent(invite.redisPassword);
  return u.toString();
}
