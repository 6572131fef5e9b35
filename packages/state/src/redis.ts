// Redis connection factory shared by routers, workers and the CLI: one node
// (a URL), a Redis Cluster (seed list) or a Sentinel-watched primary. Stores
// take a `RedisLike` (either client) and stay single-slot (hash tags), so the
// same Lua runs on all three; `openRedis` also checks, before anything is
// served, that the seeds form one healthy cluster or that the Sentinels know
// the primary by that name.
import { Cluster, Redis, type ClusterNode, type RedisOptions } from "ioredis";

/** What every store accepts: a single-node (or Sentinel) client, or a Cluster client. */
export type RedisLike = Redis | Cluster;

/** Where the fabric's Redis is: exactly one of url, cluster or sentinels. */
export interface RedisTarget {
  /** `redis[s]://[user:pass@]host:port[/db]`: one node. */
  url?: string;
  /** Cluster seed nodes, `host:port` each (any few masters or replicas of one cluster). */
  cluster?: string[];
  /** Sentinels, `host:port` each, watching the primary called `name`. */
  sentinels?: string[];
  /** The Sentinel name of the primary (with `sentinels`). */
  name?: string;
  /** ACL user and password on the data nodes (cluster and sentinel forms; the URL form carries its own). */
  username?: string;
  password?: string;
  /** Talk TLS to the data nodes (and the Sentinels). */
  tls?: boolean;
  /** Credentials of the Sentinels themselves, when they have any. */
  sentinelUsername?: string;
  sentinelPassword?: string;
}

export interface ConnectRedisOptions {
  lazy?: boolean;
  /** A worker's ACL user may not run INFO, which the ready check uses. */
  readyCheck?: boolean;
  autoPipelining?: boolean;
  /**
   * Commands sent at once even with autoPipelining: those whose caller
   * gathers a turn's work into one command itself (the ledger's XADD), for
   * which an auto-pipeline is one more batch object per turn and nothing saved.
   */
  unpipelined?: string[];
}

export class RedisTargetError extends Error {
  override name = "RedisTargetError";
}

const hostPort = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$/;

/** "host:port" → node; refuses anything else (a URL, a missing port). */
export function parseRedisNode(text: string, what = "redis node"): { host: string; port: number } {
  const m = hostPort.exec(text.trim());
  const port = m ? Number(m[2]) : NaN;
  if (!m || port < 1 || port > 65535) throw new RedisTargetError(`${what} '${text}' is not host:port`);
  return { host: m[1]!.replace(/^\[|\]$/g, ""), port };
}

/** The one Redis form configured (exactly one of url, cluster, sentinels), or undefined for none. */
export function checkRedisTarget(t: RedisTarget): "url" | "cluster" | "sentinel" | undefined {
  const forms = [t.url ? "url" : undefined, t.cluster?.length ? "cluster" : undefined, t.sentinels?.length ? "sentinels" : undefined].filter(Boolean);
  if (forms.length > 1) throw new RedisTargetError(`redis: set exactly one of url, cluster or sentinels (got ${forms.join(" and ")})`);
  if (t.cluster !== undefined && t.cluster.length === 0) throw new RedisTargetError("redis.cluster: the seed list is empty");
  if (t.sentinels !== undefined && t.sentinels.length === 0) throw new RedisTargetError("redis.sentinels: the list is empty");
  if (t.sentinels?.length && !t.name) throw new RedisTargetError("redis.sentinels needs redis.name (the primary's name in the Sentinels)");
  if (t.name && !t.sentinels?.length) throw new RedisTargetError("redis.name is only for redis.sentinels");
  if (t.url && (t.username !== undefined || t.password !== undefined || t.tls !== undefined)) {
    throw new RedisTargetError("redis.username/password/tls are for cluster and sentinels; put them in redis.url (rediss://user:pass@host:port)");
  }
  for (const n of t.cluster ?? []) parseRedisNode(n, "redis.cluster seed");
  for (const n of t.sentinels ?? []) parseRedisNode(n, "redis.sentinels entry");
  if (t.url) {
    try {
      const u = new URL(t.url);
      if (u.protocol !== "redis:" && u.protocol !== "rediss:") throw new Error();
    } catch {
      throw new RedisTargetError(`redis.url '${redactRedisUrl(t.url)}' is not a redis:// or rediss:// URL`);
    }
    return "url";
  }
  if (t.cluster?.length) return "cluster";
  if (t.sentinels?.length) return "sentinel";
  return undefined;
}

export function redactRedisUrl(url: string): string {
  return url.replace(/\/\/([^@/]*)@/, "//***@");
}

/** The target in words, without secrets (logs, startup summary). */
export function describeRedisTarget(t: RedisTarget): string {
  if (t.url) return redactRedisUrl(t.url);
  if (t.cluster?.length) return `cluster ${t.cluster.join(",")}`;
  if (t.sentinels?.length) return `sentinel ${t.name}@${t.sentinels.join(",")}`;
  return "none";
}

/** host:port of every configured node (the SSRF check keeps worker URLs off them). */
export function redisTargetEndpoints(t: RedisTarget): Array<{ host: string; port: number }> {
  if (t.url) {
    try {
      const u = new URL(t.url);
      return u.hostname ? [{ host: u.hostname.replace(/^\[|\]$/g, ""), port: Number(u.port || 6379) }] : [];
    } catch {
      return [];
    }
  }
  return [...(t.cluster ?? []), ...(t.sentinels ?? [])].map((n) => parseRedisNode(n));
}

function nodeOptions(t: RedisTarget, opts: ConnectRedisOptions): RedisOptions {
  return {
    ...(t.username !== undefined ? { username: t.username } : {}),
    ...(t.password !== undefined ? { password: t.password } : {}),
    ...(t.tls ? { tls: {} } : {}),
    enableReadyCheck: opts.readyCheck ?? true,
    // Fail commands fast while disconnected instead of queueing forever.
    maxRetriesPerRequest: 2,
    enableOfflineQueue: true,
    connectTimeout: 2000,
    // A primary demoted under us (failover) answers READONLY: find the new one.
    reconnectOnError: (err) => (err.message.startsWith("READONLY") ? 2 : false),
  };
}

/** A client for `url` (one node) or for the target, not yet checked (see openRedis). */
export function connectRedis(url: string, opts?: ConnectRedisOptions): Redis;
export function connectRedis(target: RedisTarget, opts?: ConnectRedisOptions): RedisLike;
export function connectRedis(target: string | RedisTarget, opts: ConnectRedisOptions = {}): RedisLike {
  const t: RedisTarget = typeof target === "string" ? { url: target } : target;
  const form = checkRedisTarget(t);
  if (!form) throw new RedisTargetError("redis: none of url, cluster or sentinels is set");
  // Commands issued in the same tick leave in one write: a router under load
  // sends each request's XADD, holds and settles as batches, not one syscall each.
  const pipelining = opts.autoPipelining ?? false;
  const unpipelined = pipelining && opts.unpipelined?.length ? { autoPipeliningIgnoredCommands: opts.unpipelined } : {};
  if (form === "cluster") {
    return new Cluster(
      t.cluster!.map((n) => parseRedisNode(n) as ClusterNode),
      {
        redisOptions: nodeOptions(t, { ...opts, readyCheck: false }),
        // Not on a Cluster: ioredis' cluster auto-pipelines mix slots (scripts,
        // per-node SCAN, keyless commands) and fail with "All keys in the
        // pipeline should belong to the same slots allocation group".
        enableAutoPipelining: false,
        lazyConnect: opts.lazy ?? false,
        enableReadyCheck: opts.readyCheck ?? true,
        enableOfflineQueue: true,
        scaleReads: "master",
        // A failover moves slots: learn the new map quickly, and keep retrying
        // commands (not forever) while the cluster elects a new master.
        slotsRefreshInterval: 2000,
        slotsRefreshTimeout: 2000,
        retryDelayOnFailover: 200,
        retryDelayOnClusterDown: 200,
        retryDelayOnTryAgain: 100,
        maxRedirections: 16,
        clusterRetryStrategy: (times) => Math.min(100 * times, 2000),
      },
    );
  }
  const base = nodeOptions(t, opts);
  if (form === "sentinel") {
    return new Redis({
      ...base,
      sentinels: t.sentinels!.map((n) => parseRedisNode(n)),
      name: t.name!,
      role: "master",
      ...(t.sentinelUsername !== undefined ? { sentinelUsername: t.sentinelUsername } : {}),
      ...(t.sentinelPassword !== undefined ? { sentinelPassword: t.sentinelPassword } : {}),
      ...(t.tls ? { enableTLSForSentinelMode: true, sentinelTLS: {} } : {}),
      // Subscribe to +switch-master: follow a promotion at once, not at the next error.
      failoverDetector: true,
      sentinelRetryStrategy: (times: number) => Math.min(100 * times, 2000),
      sentinelCommandTimeout: 2000,
      enableAutoPipelining: pipelining,
      ...unpipelined,
      lazyConnect: opts.lazy ?? false,
    });
  }
  return new Redis(t.url!, { ...base, enableAutoPipelining: pipelining, ...unpipelined, lazyConnect: opts.lazy ?? false });
}

function probe(node: { host: string; port: number }, t: RedisTarget, extra: RedisOptions = {}): Redis {
  const r = new Redis({
    host: node.host,
    port: node.port,
    ...(t.tls ? { tls: {} } : {}),
    lazyConnect: true,
    enableReadyCheck: false,
    maxRetriesPerRequest: 0,
    connectTimeout: 2000,
    commandTimeout: 3000,
    retryStrategy: () => null,
    ...extra,
  });
  r.on("error", () => {});
  return r;
}

/** One seed's view: its node id and the ids of every node of its cluster. */
async function seedView(seed: string, t: RedisTarget): Promise<{ id: string; nodes: Set<string>; state: string } | { error: string }> {
  const r = probe(parseRedisNode(seed), t, { ...(t.username !== undefined ? { username: t.username } : {}), ...(t.password !== undefined ? { password: t.password } : {}) });
  try {
    await r.connect();
    const id = String(await r.call("CLUSTER", "MYID"));
    const nodes = new Set(
      String(await r.call("CLUSTER", "NODES"))
        .split("\n")
        .filter((l) => l.trim() && !/\b(handshake|noaddr)\b/.test(l.split(" ")[2] ?? ""))
        .map((l) => l.split(" ")[0]!),
    );
    const state = /cluster_state:(\w+)/.exec(String(await r.call("CLUSTER", "INFO")))?.[1] ?? "unknown";
    return { id, nodes, state };
  } catch (err) {
    return { error: (err as Error).message };
  } finally {
    r.disconnect();
  }
}

/**
 * Checks the cluster seeds before use: every reachable seed must be a cluster
 * node of one and the same cluster, in state ok (all slots served). A seed
 * list mixing two clusters, or naming a node without cluster mode, is an
 * error — never a router serving with half its state.
 */
export async function checkClusterSeeds(t: RedisTarget): Promise<void> {
  const views = await Promise.all(t.cluster!.map(async (seed) => ({ seed, view: await seedView(seed, t) })));
  const ok = views.filter((v): v is { seed: string; view: { id: string; nodes: Set<string>; state: string } } => !("error" in v.view));
  const disabled = views.find((v) => "error" in v.view && /cluster support disabled/i.test(v.view.error));
  if (disabled) throw new RedisTargetError(`redis.cluster seed ${disabled.seed} is not a cluster node (cluster support disabled): use redis.url for a single node`);
  const auth = views.find((v) => "error" in v.view && /NOAUTH|WRONGPASS|NOPERM/i.test(v.view.error));
  if (auth && "error" in auth.view) throw new RedisTargetError(`redis.cluster seed ${auth.seed} refused us: ${auth.view.error}`);
  if (ok.length === 0) {
    throw new RedisTargetError(`redis.cluster: no seed reachable (${views.map((v) => `${v.seed}: ${"error" in v.view ? v.view.error : "?"}`).join("; ")})`);
  }
  const first = ok[0]!;
  for (const other of ok.slice(1)) {
    if (!first.view.nodes.has(other.view.id) || !other.view.nodes.has(first.view.id)) {
      throw new RedisTargetError(`redis.cluster seeds ${first.seed} and ${other.seed} belong to different clusters: list nodes of one cluster only`);
    }
  }
  const bad = ok.find((v) => v.view.state !== "ok");
  if (bad) throw new RedisTargetError(`redis.cluster: ${bad.seed} reports cluster_state:${bad.view.state} (slots unserved): refusing to start on half a cluster`);
}

/** Checks that some Sentinel knows a primary named `t.name`. */
export async function checkSentinels(t: RedisTarget): Promise<void> {
  const errors: string[] = [];
  let reachable = 0;
  for (const s of t.sentinels!) {
    const r = probe(parseRedisNode(s), { ...(t.tls ? { tls: true } : {}) }, {
      ...(t.sentinelUsername !== undefined ? { username: t.sentinelUsername } : {}),
      ...(t.sentinelPassword !== undefined ? { password: t.sentinelPassword } : {}),
    });
    try {
      await r.connect();
      reachable++;
      const addr = (await r.call("SENTINEL", "GET-MASTER-ADDR-BY-NAME", t.name!)) as unknown;
      if (Array.isArray(addr) && addr.length === 2) return;
      errors.push(`${s}: no primary named '${t.name}'`);
    } catch (err) {
      errors.push(`${s}: ${(err as Error).message}`);
    } finally {
      r.disconnect();
    }
  }
  if (reachable === 0) throw new RedisTargetError(`redis.sentinels: no Sentinel reachable (${errors.join("; ")})`);
  throw new RedisTargetError(`redis.name '${t.name}': no Sentinel knows a primary by that name (${errors.join("; ")})`);
}

function whenReady(r: RedisLike, timeoutMs: number): Promise<void> {
  if (r.status === "ready") return Promise.resolve();
  return new Promise((resolve, reject) => {
    let last = "";
    const onErr = (err: Error) => void (last = err.message);
    const timer = setTimeout(() => {
      r.off("ready", onReady);
      r.off("error", onErr);
      reject(new RedisTargetError(`redis (${r instanceof Cluster ? "cluster" : "node"}) not ready after ${timeoutMs} ms${last ? `: ${last}` : ""}`));
    }, timeoutMs);
    const onReady = () => {
      clearTimeout(timer);
      r.off("error", onErr);
      resolve();
    };
    r.once("ready", onReady);
    r.on("error", onErr);
  });
}

/**
 * Connects and checks the target before anything uses it (routers at boot,
 * CLI commands): a cluster's seeds agree and serve every slot, the Sentinels
 * know the name, the node answers. Throws RedisTargetError saying what is wrong.
 */
export async function openRedis(target: string | RedisTarget, opts: ConnectRedisOptions & { readyTimeoutMs?: number } = {}): Promise<RedisLike> {
  const t: RedisTarget = typeof target === "string" ? { url: target } : target;
  const form = checkRedisTarget(t);
  if (form === "cluster") await checkClusterSeeds(t);
  if (form === "sentinel") await checkSentinels(t);
  const r = connectRedis(t, opts);
  try {
    if (opts.lazy) return r;
    await whenReady(r, opts.readyTimeoutMs ?? 10_000);
    return r;
  } catch (err) {
    r.disconnect();
    throw err;
  }
}

/** The masters to run per-node commands on (SCAN, ACL): every master of a cluster, or the one node. */
export function redisMasters(r: RedisLike): Redis[] {
  return r instanceof Cluster ? r.nodes("master") : [r];
}

/** One master's memory limit and what it does at that limit (INFO memory: managed services refuse CONFIG GET, not INFO). */
export interface EvictionPolicy {
  node: string;
  /** Bytes; 0: no limit. */
  maxmemory: number;
  policy: string;
}

/**
 * Each master's eviction policy. Switchyard's state must not be evicted:
 * budget counters, holds and heartbeats carry TTLs, so a `volatile-*`
 * policy (ElastiCache's default is volatile-lru) drops them first under
 * memory pressure, and a day's counters gone read as unspent.
 */
export async function evictionPolicies(r: RedisLike): Promise<EvictionPolicy[]> {
  return Promise.all(
    redisMasters(r).map(async (node) => {
      const info = String(await node.info("memory"));
      const field = (k: string) => new RegExp(`^${k}:(.*)$`, "m").exec(info)?.[1]?.trim() ?? "";
      return { node: `${node.options.host ?? "?"}:${node.options.port ?? "?"}`, maxmemory: Number(field("maxmemory")) || 0, policy: field("maxmemory_policy") };
    }),
  );
}

/** Policies that may evict Switchyard's keys: any but noeviction, where a memory limit is set. */
export function evicting(p: EvictionPolicy): boolean {
  return p.maxmemory > 0 && p.policy !== "" && p.policy !== "noeviction";
}

/**
 * Connections to the replicas `onEveryDataNode` reaches, kept from one call
 * to the next: a caller that runs every few seconds (the routers' invite
 * keeper) would otherwise open, authenticate and close one per replica each
 * time. A connection is dropped when its replica leaves the topology, when
 * it is no longer ready (the replica restarted: the next call connects
 * again) or when a command on it fails; `close()` drops them all.
 */
export class ReplicaConnections {
  private readonly open = new Map<string, Redis>();

  /** The ready connection to host:port, made now if there is none. */
  async get(host: string, port: number, cred: Pick<RedisOptions, "username" | "password" | "tls">): Promise<Redis> {
    const key = `${host}:${port}`;
    const kept = this.open.get(key);
    if (kept?.status === "ready") return kept;
    this.drop(key);
    const replica = new Redis({
      host,
      port,
      ...(cred.username !== undefined ? { username: cred.username } : {}),
      ...(cred.password !== undefined ? { password: cred.password } : {}),
      ...(cred.tls ? { tls: cred.tls } : {}),
      lazyConnect: true,
      enableReadyCheck: false,
      maxRetriesPerRequest: 1,
      connectTimeout: 2000,
      // No reconnecting in the background: a replica that went away is
      // connected to again by the next call that still finds it listed.
      retryStrategy: () => null,
    });
    replica.on("error", () => {});
    this.open.set(key, replica);
    try {
      await replica.connect();
    } catch (err) {
      this.drop(key);
      throw err;
    }
    return replica;
  }

  /** Closes the connections to replicas not in `keep` ("host:port"). */
  retain(keep: Set<string>): void {
    for (const key of [...this.open.keys()]) if (!keep.has(key)) this.drop(key);
  }

  drop(key: string): void {
    this.open.get(key)?.disconnect();
    this.open.delete(key);
  }

  /** Open connections, by "host:port". */
  get size(): number {
    return this.open.size;
  }

  close(): void {
    for (const key of [...this.open.keys()]) this.drop(key);
  }
}

/**
 * Runs `fn` on every data node that must know an ACL user (ACLs are neither
 * replicated nor spread by a Cluster, and a replica becomes the primary on
 * failover): every node of a Cluster; else the node itself and the replicas
 * its ROLE lists (a Sentinel setup's replicas), reached with the same
 * credentials. With `replicas`, the connections to them are kept there for
 * the next call (closed by its owner); without, opened and closed here.
 */
export async function onEveryDataNode<T>(r: RedisLike, fn: (node: Redis) => Promise<T>, replicas?: ReplicaConnections): Promise<T[]> {
  // A Cluster client pools only masters (scaleReads "master"): its replicas
  // come from CLUSTER NODES; a single node's (Sentinel) replicas from ROLE.
  const first = r instanceof Cluster ? r.nodes("master")[0] : r;
  if (!first) throw new RedisTargetError("redis cluster: no master connected");
  const cred = r instanceof Cluster ? (r.options.redisOptions ?? {}) : r.options;
  const primaries = r instanceof Cluster ? r.nodes("master") : [r];
  const out = await Promise.all(primaries.map(fn));
  let listed: Array<{ host: string; port: number }> = [];
  if (r instanceof Cluster) {
    listed = String(await first.call("CLUSTER", "NODES"))
      .split("\n")
      .map((l) => l.split(" "))
      .filter((f) => f.length > 2 && /\b(slave|replica)\b/.test(f[2]!) && !/\b(fail|noaddr|handshake)\b/.test(f[2]!))
      .map((f) => {
        const addr = f[1]!.split("@")[0]!;
        const i = addr.lastIndexOf(":");
        return { host: addr.slice(0, i).replace(/^\[|\]$/g, ""), port: Number(addr.slice(i + 1)) };
      });
  } else {
    const role = (await r.call("ROLE")) as [string, unknown, Array<[string, string, string]>?];
    if (role[0] === "master") listed = (role[2] ?? []).map(([host, port]) => ({ host, port: Number(port) }));
  }
  const pool = replicas ?? new ReplicaConnections();
  try {
    pool.retain(new Set(listed.map(({ host, port }) => `${host}:${port}`)));
    for (const { host, port } of listed) {
      const replica = await pool.get(host, port, cred);
      try {
        out.push(await fn(replica));
      } catch (err) {
        // Perhaps a connection the replica dropped unseen: a fresh one next time.
        pool.drop(`${host}:${port}`);
        throw err;
      }
    }
  } finally {
    if (!replicas) pool.close();
  }
  return out;
}

/** Keys matching `pattern` on every master (SCAN is per node; a Cluster spreads keys over masters). */
export async function scanKeys(r: RedisLike, pattern: string, count = 1000): Promise<string[]> {
  const out = new Set<string>();
  for (const node of redisMasters(r)) {
    let cursor = "0";
    do {
      const [next, batch] = await node.scan(cursor, "MATCH", pattern, "COUNT", count);
      cursor = next;
      for (const k of batch) out.add(k);
    } while (cursor !== "0");
  }
  return [...out];
}

/** A second connection to the same target (blocking reads hold theirs). */
export function duplicateRedis(r: RedisLike): RedisLike {
  return r instanceof Cluster ? r.duplicate() : r.duplicate();
}
