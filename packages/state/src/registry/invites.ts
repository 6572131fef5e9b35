// Joining safely. Each invited worker gets a Redis ACL user that may write
// only its own registry key (so it cannot overwrite or delete another
// worker's record), and a call secret derived from the routers' secret key,
// which routers present on every request to that worker. Nothing per worker
// has to be stored for routers: they derive the same secret from the id.
// The invite itself (the models the worker may serve) is an admin-written key
// next to the worker's, which routers read and the worker cannot write.
import { createHmac, randomBytes } from "node:crypto";
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
export async function inviteWorker(admin: RedisLike, opts: { prefix: string; workerId: string; secretKey: string; models: string[] }): Promise<Invite> {
  if (!workerIdPattern.test(opts.workerId)) throw new Error(`invalid worker id '${opts.workerId}': letters, digits, '.', '_' or '-' (max 64)`);
  const models = [...new Set(opts.models)];
  if (models.length === 0 || models.some((m) => m.length === 0 || m.length > 256)) throw new Error("an invite names at least one model (each 1–256 characters)");
  const redisUser = workerAclUser(opts.workerId);
  const redisPassword = randomBytes(24).toString("base64url");
  // ACL key patterns are globs: the prefix must match only itself.
  const key = globEscape(workerKey(opts.prefix, opts.workerId));
  const grant: WorkerInviteGrant = { models, createdAt: Date.now() };
  // The invited set is how routers find the worker's key (its ACL user cannot add itself to a shared set).
  await admin.multi().set(inviteKey(opts.prefix, opts.workerId), JSON.stringify(grant)).sadd(invitedIndexKey(opts.prefix), opts.workerId).exec();
  // ACL users are per node and neither replicated nor spread by a Cluster:
  // every node gets the user, replicas too (they become primaries on
  // failover). A Cluster client also needs CLUSTER SLOTS to learn the slot map.
  const rules = [`>${redisPassword}`, `~${key}`, "resetchannels", "-@all", "+set", "+del", "+pexpire", "+ping", "+hello", "+auth", "+client|setname", "+cluster|slots"];
  await onEveryDataNode(admin, (node) => node.call("ACL", "SETUSER", redisUser, "reset", "on", ...rules));
  return { workerId: opts.workerId, redisUser, redisPassword, callSecret: workerCallSecret(opts.secretKey, opts.workerId), models, fencingKey: fencingPublicKey(opts.secretKey) };
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
