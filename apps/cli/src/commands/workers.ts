// `switchyard workers invite NAME` / `workers revoke NAME` (admin): a per-
// worker Redis ACL user that can write only that worker's record, the invite
// routers read (the models it may serve), the secret routers will present to
// it, the routers' public fencing key, and the one-line join command.
import { redisTarget } from "@switchyard/router";
import { inviteWorker, joinRedisUrl, openRedis, revokeWorker, type Invite, type RedisTarget } from "@switchyard/state";
import { configFrom } from "../context.ts";
import { UsageError } from "../usage.ts";

export async function workersCommand(args: string[], flags: { config?: string; model?: string[]; advertise?: string }): Promise<number> {
  const [verb, name, ...rest] = args;
  if (verb !== "invite" && verb !== "revoke") throw new UsageError(`workers: expected 'invite NAME' or 'revoke NAME', got '${verb ?? ""}'`);
  if (!name) throw new UsageError(`workers ${verb}: missing NAME`);
  if (rest.length) throw new UsageError(`workers ${verb}: unexpected argument '${rest[0]}'`);
  const config = configFrom(flags);
  const target = redisTarget(config);
  if (!target) throw new UsageError("workers: needs the fabric's Redis (redis.url / REDIS_URL, redis.cluster or redis.sentinels) with admin rights");
  // Every node gets the worker's ACL user (a Cluster's, a Sentinel primary's replicas).
  const redis = await openRedis(target);
  try {
    if (verb === "revoke") {
      const gone = await revokeWorker(redis, name, { prefix: config.redis.keyPrefix });
      process.stdout.write(gone ? `revoked worker ${name}: it can no longer heartbeat\n` : `no invited worker named ${name}\n`);
      return gone ? 0 : 1;
    }
    const secretKey = config.workers.secretKey;
    if (!secretKey) throw new UsageError("workers invite: set workers.secretKey (SWITCHYARD_WORKER_SECRET_KEY) to the key your routers use");
    // The invite bounds what routers route to this worker: nothing it advertises beyond these models.
    const invite = await inviteWorker(redis, { prefix: config.redis.keyPrefix, workerId: name, secretKey, models: flags.model?.length ? flags.model : ["smollm2-135m-instruct"] });
    const models = invite.models.map((m) => `--model '${m}'`).join(" ");
    const advertise = flags.advertise ?? "http://THIS-HOST:9100";
    const prefix = config.redis.keyPrefix === "sy:" ? "" : ` --key-prefix '${config.redis.keyPrefix}'`;
    process.stderr.write(`invited worker ${name}. Give its owner this command (it carries secrets; it is shown once):\n\n`);
    const join = joinRedis(target, invite);
    process.stdout.write(`${join.env}npx switchyard worker --id ${name}${join.flag}${prefix} --token '${invite.callSecret}' --fencing-key ${invite.fencingKey} ${models} --advertise ${advertise}\n`);
    return 0;
  } finally {
    redis.disconnect();
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
