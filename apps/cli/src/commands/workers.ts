// `switchyard workers invite NAME` / `workers revoke NAME` (admin): a per-
// worker Redis ACL user that can write only that worker's record, the invite
// routers read (the models it may serve), the secret routers will present to
// it, the routers' public fencing key, and the one-line join command.
// Postgres keeps the invite too (worker_invites), written before Redis:
// Redis loses ACL users at every restart, and routers restore them from it.
import { recordWorkerInvite, revokeWorkerInvite } from "@switchyard/db";
import { redisTarget } from "@switchyard/router";
import { checkInvite, inviteWorker, joinRedisUrl, newWorkerPassword, openRedis, redisPasswordSha256, revokeWorker, workerIdProblem, type Invite, type RedisTarget } from "@switchyard/state";
import { configFrom, openDb } from "../context.ts";
import { UsageError } from "../usage.ts";

export async function workersCommand(args: string[], flags: { config?: string; model?: string[]; advertise?: string }): Promise<number> {
  const [verb, name, ...rest] = args;
  if (verb !== "invite" && verb !== "revoke") throw new UsageError(`workers: expected 'invite NAME' or 'revoke NAME', got '${verb ?? ""}'`);
  if (!name) throw new UsageError(`workers ${verb}: missing NAME`);
  if (rest.length) throw new UsageError(`workers ${verb}: unexpected argument '${rest[0]}'`);
  const config = configFrom(flags);
  const target = redisTarget(config);
  if (!target) throw new UsageError("workers: needs the fabric's Redis (redis.url / REDIS_URL, redis.cluster or redis.sentinels) with admin rights");
  const secretKey = config.workers.secretKey;
  if (verb === "invite" && !secretKey) throw new UsageError("workers invite: set workers.secretKey (SWITCHYARD_WORKER_SECRET_KEY) to the key your routers use");
  const prefix = config.redis.keyPrefix;
  // The invite bounds what routers route to this worker: nothing it advertises beyond these models.
  // Checked before anything is written: a revoke leaves a tombstone row, which a mistyped id should not.
  const badId = workerIdProblem(name);
  if (badId) throw new UsageError(`workers ${verb}: ${badId}`);
  const models = verb === "invite" ? checkInvite(name, flags.model?.length ? flags.model : ["smollm2-135m-instruct"]) : [];
  const db = await openDb(config, { migrate: true, quiet: true });
  // Every node gets the worker's ACL user (a Cluster's, a Sentinel primary's replicas).
  let redis: Awaited<ReturnType<typeof openRedis>> | undefined;
  try {
    redis = await openRedis(target);
    if (verb === "revoke") {
      // The tombstone first: no router restores the user once it is written.
      const known = await revokeWorkerInvite(db.db, prefix, name);
      const gone = await revokeWorker(redis, name, { prefix });
      process.stdout.write(gone || known ? `revoked worker ${name}: it can no longer heartbeat\n` : `no invited worker named ${name}\n`);
      return gone || known ? 0 : 1;
    }
    const password = newWorkerPassword();
    await recordWorkerInvite(db.db, { keyPrefix: prefix, workerId: name, models, passwordSha256: redisPasswordSha256(password) });
    const invite = await inviteWorker(redis, { prefix, workerId: name, secretKey: secretKey!, models, password });
    const modelFlags = invite.models.map((m) => `--model '${m}'`).join(" ");
    const advertise = flags.advertise ?? "http://THIS-HOST:9100";
    const prefixFlag = prefix === "sy:" ? "" : ` --key-prefix '${prefix}'`;
    process.stderr.write(`invited worker ${name}. Give its owner this command (it carries secrets; it is shown once):\n\n`);
    const join = joinRedis(target, invite);
    process.stdout.write(`${join.env}npx switchyard worker --id ${name}${join.flag}${prefixFlag} --token '${invite.callSecret}' --fencing-key ${invite.fencingKey} ${modelFlags} --advertise ${advertise}\n`);
    return 0;
  } finally {
    redis?.disconnect();
    await db.close();
    await db.stopEmbedded();
  }
}

/** How the worker reaches the fabric's Redis as its ACL user: a --redis URL, or the cluster / Sentinel settings as env. */
function joinRedis(target: RedisTarget, invite: Invite): { env: string; flag: string } {
  if (target.url) return { env: "", flag: ` --redis '${joinRedisUrl(target.url, invite)}'` };
  const env = [
    target.cluster ? `SWITCHYARD_REDIS__CLUSTER='${JSON.stringify(target.cluster)}'` : `SWITCHYARD_REDIS__SENTINELS='${JSON.stringify(target.sentinels)}' SWITCHYARD_REDIS__NAME='${target.name}'`,
    `SWITCHYARD_REDIS__USERNAME='${invite.redisUser}'`,
    `SWITCHYARD_REDIS__PASSWORD='${invite.redisPassword}'`,
    ...(target.tls ? ["SWITCHYARD_REDIS__TLS=true"] : []),
    ...(target.sentinelUsername !== undefined ? [`SWITCHYARD_REDIS__SENTINEL_USERNAME='${target.sentinelUsername}'`] : []),
    ...(target.sentinelPassword !== undefined ? [`SWITCHYARD_REDIS__SENTINEL_PASSWORD='${target.sentinelPassword}'`] : []),
  ];
  return { env: `${env.join(" ")} `, flag: "" };
}
