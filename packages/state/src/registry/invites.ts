// Joining safely. Each invited worker gets a Redis ACL user that may write
// only its own registry key (so it cannot overwrite or delete another
// worker's record), and a call secret derived from the routers' secret key,
// which routers present on every request to that worker. Nothing per worker
// has to be stored for routers: they derive the same secret from the id.
import { createHmac, randomBytes } from "node:crypto";
import type { Redis } from "ioredis";
import { workerKey } from "./redis.ts";

export const workerIdPattern = /^[A-Za-z0-9._-]{1,64}$/;

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
}

/**
 * Creates (or rotates) the worker's ACL user. The user may run only the few
 * commands a heartbeat needs, on its own key only.
 */
export async function inviteWorker(admin: Redis, opts: { prefix: string; workerId: string; secretKey: string }): Promise<Invite> {
  if (!workerIdPattern.test(opts.workerId)) throw new Error(`invalid worker id '${opts.workerId}': letters, digits, '.', '_' or '-' (max 64)`);
  const redisUser = workerAclUser(opts.workerId);
  const redisPassword = randomBytes(24).toString("base64url");
  const key = workerKey(opts.prefix, opts.workerId);
  await admin.call(
    "ACL",
    "SETUSER",
    redisUser,
    "reset",
    "on",
    `>${redisPassword}`,
    `~${key}`,
    "resetchannels",
    "-@all",
    "+set",
    "+del",
    "+pexpire",
    "+ping",
    "+hello",
    "+auth",
    "+client|setname",
  );
  return { workerId: opts.workerId, redisUser, redisPassword, callSecret: workerCallSecret(opts.secretKey, opts.workerId) };
}

export async function revokeWorker(admin: Redis, workerId: string): Promise<boolean> {
  const n = (await admin.call("ACL", "DELUSER", workerAclUser(workerId))) as number;
  return n > 0;
}

export function joinRedisUrl(adminUrl: string, invite: Invite): string {
  const u = new URL(adminUrl);
  u.username = encodeURIComponent(invite.redisUser);
  u.password = encodeURIComponent(invite.redisPassword);
  return u.toString();
}
