// Invites outlive Redis. `switchyard workers invite` records each invite in
// Postgres (worker_invites: the models, the SHA-256 of the worker's Redis
// password) before it writes Redis, and `workers revoke` leaves a tombstone
// there first. Redis holds the live copy and loses it: ACL users are in no
// RDB or AOF file, so every restart drops them — an invited worker then
// cannot AUTH, its heartbeats fail, and within its TTL routers stop routing
// to it — and a Redis back empty drops the invite keys as well. Each router
// puts back, on every data node, what Postgres says should be there: the ACL
// users of live invites (from the hash: `ACL SETUSER … #<sha256>`, no
// password needed) and their invite keys; and it takes away what a revoke
// left behind. Every router does it, every `workers.inviteSyncMs` and when
// its connection to Redis comes back; all of it is idempotent.
//
// Invites made before Postgres kept them (in Redis only) are adopted: their
// password hash is read back with ACL GETUSER and recorded, unless Postgres
// has any row for the worker (a revoke's tombstone included).
import { adoptWorkerInvite, listWorkerInvites, liveWorkerIds, type Db, type WorkerInviteRow } from "@switchyard/db";
import { inviteKey, invitedIndexKey, isPasswordSha256, onEveryDataNode, redisMasters, ReplicaConnections, setWorkerUser, workerAclUser, workerUserPasswords, writeInviteGrant, type RedisLike } from "@switchyard/state";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";

export interface InviteKeeperDeps {
  redis: RedisLike;
  db: Db;
  prefix: string;
  log: Logger;
  metrics: RouterMetrics;
}

/** What one pass changed in Redis. */
export interface InviteRepairs {
  /** ACL users made again, one per node and worker. */
  usersRestored: number;
  invitesRestored: number;
  /** Revoked workers' ACL users (per node) and invite keys taken away. */
  usersRemoved: number;
  invitesRemoved: number;
  /** Redis-only invites now recorded in Postgres. */
  adopted: number;
  /** Workers whose ACL user or invite key was put back. */
  workers: string[];
}

export class InviteKeeper {
  private timer: NodeJS.Timeout | undefined;
  private running: Promise<void> | undefined;
  private again = false;
  private failing = false;
  private closed = false;
  /** Its connections to the replicas (ACL users are per node), kept across passes; closed by close(). */
  private readonly replicas = new ReplicaConnections();

  constructor(private readonly deps: InviteKeeperDeps) {}

  /** Checks now, then every `everyMs` (0: only when kicked). */
  start(everyMs: number): void {
    if (everyMs > 0) {
      this.timer = setInterval(() => this.kick(), everyMs);
      this.timer.unref();
    }
    this.kick();
  }

  /** Runs a pass soon: one at a time, and one more after it when kicked meanwhile. */
  kick(): void {
    if (this.closed) return;
    if (this.running) {
      this.again = true;
      return;
    }
    this.running = this.pass().finally(() => {
      this.running = undefined;
      if (this.again) {
        this.again = false;
        this.kick();
      }
    });
  }

  /** Waits for the pass in flight (tests, shutdown). */
  async idle(): Promise<void> {
    while (this.running) await this.running;
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Stops, waits for the pass in flight, and closes the connections to the replicas (shutdown). */
  async close(): Promise<void> {
    this.closed = true;
    this.stop();
    await this.idle();
    this.replicas.close();
  }

  private async pass(): Promise<void> {
    const { log, metrics } = this.deps;
    try {
      const r = await this.repair();
      if (this.failing) log.info("worker invites checked again");
      this.failing = false;
      const count = (repair: string, n: number) => n > 0 && metrics.inviteRepairs.inc({ repair }, n);
      count("user_restored", r.usersRestored);
      count("invite_restored", r.invitesRestored);
      count("user_removed", r.usersRemoved);
      count("invite_removed", r.invitesRemoved);
      count("adopted", r.adopted);
      if (r.usersRestored + r.invitesRestored > 0) {
        log.warn("worker invites restored in Redis from Postgres (Redis drops ACL users at every restart)", { users: r.usersRestored, invites: r.invitesRestored, workers: r.workers.slice(0, 10) });
      }
      if (r.usersRemoved + r.invitesRemoved > 0) log.warn("revoked workers' ACL users or invites found in Redis: removed", { users: r.usersRemoved, invites: r.invitesRemoved });
      if (r.adopted > 0) log.info("worker invites made before Postgres kept them: recorded there", { adopted: r.adopted });
    } catch (err) {
      if (!this.failing) log.warn("worker invites not checked against Postgres (Redis or Postgres unreachable, or the routers' Redis user lacks ACL rights); trying again", { error: (err as Error).message });
      this.failing = true;
    }
  }

  /** One pass: Postgres' invites against every Redis data node. */
  async repair(): Promise<InviteRepairs> {
    const { redis, db, prefix } = this.deps;
    const out: InviteRepairs = { usersRestored: 0, invitesRestored: 0, usersRemoved: 0, invitesRemoved: 0, adopted: 0, workers: [] };
    const rows = await listWorkerInvites(db, prefix);
    const live = rows.filter((r) => r.revokedAt === null && isPasswordSha256(r.passwordSha256));
    const revoked = rows.filter((r) => r.revokedAt !== null);
    live.push(...(await this.adopt(new Set(rows.map((r) => r.workerId)), out)));
    const put = new Set<string>();

    // Invite keys: put back the live ones, take away the revoked ones.
    const all = [...live, ...revoked];
    const keys = all.map((r) => inviteKey(prefix, r.workerId));
    const values = keys.length > 0 ? await redis.mget(...keys) : [];
    const missing = live.filter((_, i) => values[i] === null);
    const stillLive = await liveWorkerIds(db, prefix, missing.map((r) => r.workerId));
    for (const r of missing) {
      if (!stillLive.has(r.workerId)) continue; // revoked since the list
      await writeInviteGrant(redis, prefix, r.workerId, r.models, true);
      out.invitesRestored++;
      put.add(r.workerId);
    }
    const stale = revoked.filter((_, i) => values[live.length + i] !== null).map((r) => r.workerId);
    if (stale.length > 0) {
      await redis.multi().del(...stale.map((id) => inviteKey(prefix, id))).srem(invitedIndexKey(prefix), ...stale).exec();
      out.invitesRemoved += stale.length;
    }

    // ACL users: per node, since nodes neither replicate nor share them.
    await onEveryDataNode(redis, async (node) => {
      const users = new Set(((await node.call("ACL", "USERS")) as unknown[]).map(String));
      const lacking = live.filter((r) => !users.has(workerAclUser(r.workerId)));
      const ok = await liveWorkerIds(db, prefix, lacking.map((r) => r.workerId));
      for (const r of lacking) {
        if (!ok.has(r.workerId)) continue;
        await setWorkerUser(node, prefix, r.workerId, r.passwordSha256);
        out.usersRestored++;
        put.add(r.workerId);
      }
      for (const r of revoked) {
        if (!users.has(workerAclUser(r.workerId))) continue;
        await node.call("ACL", "DELUSER", workerAclUser(r.workerId));
        out.usersRemoved++;
      }
    }, this.replicas);
    out.workers = [...put];
    return out;
  }

  /** Records the invites Redis has and Postgres has no row of; returns them as live rows. */
  private async adopt(known: Set<string>, out: InviteRepairs): Promise<WorkerInviteRow[]> {
    const { redis, db, prefix } = this.deps;
    const ids = ((await redis.smembers(invitedIndexKey(prefix))) as string[]).filter((id) => !known.has(id));
    if (ids.length === 0) return [];
    const grants = await redis.mget(...ids.map((id) => inviteKey(prefix, id)));
    // Any primary that has the user: the first (a Cluster sets it on every node).
    const node = redisMasters(redis)[0]!;
    const adopted: WorkerInviteRow[] = [];
    for (const [i, id] of ids.entries()) {
      const models = modelsOf(grants[i] ?? null);
      const [hash] = await workerUserPasswords(node, id);
      if (!models || !hash || !isPasswordSha256(hash)) continue;
      const row = { keyPrefix: prefix, workerId: id, models, passwordSha256: hash };
      if (!(await adoptWorkerInvite(db, row))) continue;
      adopted.push({ ...row, createdAt: new Date(), revokedAt: null });
      out.adopted++;
    }
    return adopted;
  }
}

function modelsOf(grant: string | null): string[] | undefined {
  if (grant === null) return undefined;
  try {
    const models = (JSON.parse(grant) as { models?: unknown }).models;
    return Array.isArray(models) && models.length > 0 && models.every((m) => typeof m === "string") ? (models as string[]) : undefined;
  } catch {
    return undefined;
  }
}
