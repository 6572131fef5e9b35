// Real Redis Cluster and Sentinel topologies for tests, from the installed
// redis-server / redis-sentinel on spare ports, each in its own temp dir,
// killed and removed afterwards. The cluster is built by
// `redis-cli --cluster create … --cluster-replicas 1` (3+ masters) or by
// hand (one master owning every slot, a cheap "other" cluster).
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { Redis } from "ioredis";
import { sleep, waitFor } from "./env.ts";

const run = promisify(execFile);

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once("error", () => resolve(false));
    s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
  });
}

/**
 * Where the ports are drawn from: below the kernel's range for outgoing
 * connections' local ports, bus port (+10000) included. A server port in
 * that range can be taken by any client's connect() between the check here
 * and the server's bind, and the server then exits at start (seen in CI as
 * a Sentinel on 33200 never answering).
 */
function portBand(): { from: number; size: number } {
  const BUS = 10_000;
  const ENOUGH = 2_000;
  let low = 32_768;
  let high = 60_999;
  try {
    [low, high] = readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/).map(Number) as [number, number];
  } catch {
    // Not Linux: the usual defaults.
  }
  // Below the range: ports from 10000, their bus ports under `low`.
  if (low - BUS - 10_000 > ENOUGH) return { from: 10_000, size: low - BUS - 10_000 };
  // An odd range: above it if there is room, else the old band.
  if (65_535 - BUS - high > ENOUGH) return { from: high + 1, size: 65_535 - BUS - high };
  return { from: 20_000, size: 20_000 };
}
const band = portBand();

/** A port whose cluster bus port (+10000) is free too. */
export async function clusterPort(taken: Set<number> = new Set()): Promise<number> {
  for (;;) {
    const p = band.from + Math.floor(Math.random() * band.size);
    if (taken.has(p) || taken.has(p + 10_000) || taken.has(p - 10_000)) continue;
    if ((await portFree(p)) && (await portFree(p + 10_000))) {
      taken.add(p);
      return p;
    }
  }
}

function admin(port: number): Redis {
  const r = new Redis({ host: "127.0.0.1", port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1000, commandTimeout: 5000 });
  r.on("error", () => {});
  return r;
}

/** Runs one command on the node at `port` over a fresh connection. */
export async function nodeCall(port: number, ...args: string[]): Promise<unknown> {
  const r = admin(port);
  try {
    await r.connect();
    return await r.call(args[0]!, ...args.slice(1));
  } finally {
    r.disconnect();
  }
}

async function waitPing(port: number): Promise<void> {
  await waitFor(
    async () => {
      try {
        return (await nodeCall(port, "PING")) === "PONG";
      } catch {
        return false;
      }
    },
    { timeoutMs: 10_000, intervalMs: 50, what: `redis-server on ${port}` },
  );
}

export interface ClusterNodeInfo {
  id: string;
  port: number;
  role: "master" | "replica";
  /** For a replica: its master's id. */
  masterId?: string;
  /** Down (fail flag) as this node's peers see it. */
  failed: boolean;
}

export interface TestCluster {
  /** `127.0.0.1:port` of every node, the seed list. */
  seeds: string[];
  ports: number[];
  /** CLUSTER NODES as one live node sees it. */
  nodes(): Promise<ClusterNodeInfo[]>;
  /** The master serving `key`'s slot, and its replicas. */
  ownerOf(key: string): Promise<{ slot: number; master: ClusterNodeInfo; replicas: ClusterNodeInfo[] }>;
  /** SIGKILL the node on `port` (no shutdown save; the cluster sees it fail). */
  kill(port: number): Promise<void>;
  /** Every live replica has finished syncing with its master (master_link_status:up). */
  waitReplicasInSync(timeoutMs?: number): Promise<void>;
  /** Every node alive agrees: cluster_state:ok. */
  waitOk(timeoutMs?: number): Promise<void>;
  stop(): Promise<void>;
}

export async function startRedisCluster(opts: { masters?: number; replicasPerMaster?: number; nodeTimeoutMs?: number } = {}): Promise<TestCluster> {
  const masters = opts.masters ?? 3;
  const replicas = opts.replicasPerMaster ?? 1;
  const count = masters * (1 + replicas);
  const dir = mkdtempSync(path.join(tmpdir(), "sy-cluster-"));
  const taken = new Set<number>();
  const ports: number[] = [];
  for (let i = 0; i < count; i++) ports.push(await clusterPort(taken));
  const children = new Map<number, ChildProcess>();
  for (const port of ports) {
    const child = spawn(
      "redis-server",
      [
        "--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--dbfilename", `dump-${port}.rdb`,
        "--save", "", "--appendonly", "no",
        "--cluster-enabled", "yes", "--cluster-config-file", `nodes-${port}.conf`,
        "--cluster-node-timeout", String(opts.nodeTimeoutMs ?? 3000),
        // A replica may be promoted however long it was cut off (tests kill masters on purpose).
        "--cluster-replica-validity-factor", "0",
      ],
      { stdio: "ignore" },
    );
    children.set(port, child);
  }
  const stopAll = stopWithProcess(children, dir);
  try {
    await Promise.all(ports.map(waitPing));
    if (masters >= 3) {
      await run("redis-cli", ["--cluster", "create", ...ports.map((p) => `127.0.0.1:${p}`), "--cluster-replicas", String(replicas), "--cluster-yes"], { timeout: 60_000 });
    } else {
      // One master owning every slot (redis-cli wants three): its replicas by hand.
      await nodeCall(ports[0]!, "CLUSTER", "ADDSLOTSRANGE", "0", "16383");
      const id = String(await nodeCall(ports[0]!, "CLUSTER", "MYID"));
      for (const p of ports.slice(1)) {
        await nodeCall(p, "CLUSTER", "MEET", "127.0.0.1", String(ports[0]));
        await waitFor(async () => String(await nodeCall(p, "CLUSTER", "NODES")).includes(id), { timeoutMs: 10_000, what: "cluster meet" });
        await nodeCall(p, "CLUSTER", "REPLICATE", id);
      }
    }
  } catch (err) {
    await stopAll();
    throw err;
  }
  const alive = () => ports.filter((p) => children.get(p)!.exitCode === null && children.get(p)!.signalCode === null);
  const nodes = async (): Promise<ClusterNodeInfo[]> => {
    for (const p of alive()) {
      try {
        const text = String(await nodeCall(p, "CLUSTER", "NODES"));
        return text
          .split("\n")
          .filter((l) => l.trim())
          .map((l) => {
            const [id, addr, flags, master] = l.split(" ");
            const f = flags!.split(",");
            return {
              id: id!,
              port: Number(addr!.split("@")[0]!.split(":").pop()),
              role: f.includes("master") ? "master" : "replica",
              ...(master && master !== "-" ? { masterId: master } : {}),
              failed: f.includes("fail") || f.includes("fail?"),
            };
          });
      } catch {
        // try the next node
      }
    }
    throw new Error("no cluster node answers");
  };
  const cluster: TestCluster = {
    seeds: ports.map((p) => `127.0.0.1:${p}`),
    ports,
    nodes,
    ownerOf: async (key) => {
      const slot = Number(await nodeCall(alive()[0]!, "CLUSTER", "KEYSLOT", key));
      for (const p of alive()) {
        const shards = (await nodeCall(p, "CLUSTER", "SLOTS")) as Array<[number, number, ...Array<[string, number, string]>]>;
        const range = shards.find(([lo, hi]) => slot >= lo && slot <= hi);
        if (!range) continue;
        const all = await nodes();
        const masterPort = Number((range[2] as [string, number, string])[1]);
        const master = all.find((n) => n.port === masterPort)!;
        return { slot, master, replicas: all.filter((n) => n.masterId === master.id && !n.failed) };
      }
      throw new Error(`no node serves slot ${slot}`);
    },
    kill: (port) =>
      new Promise<void>((resolve) => {
        const c = children.get(port)!;
        if (c.exitCode !== null || c.signalCode !== null) return resolve();
        c.once("exit", () => resolve());
        c.kill("SIGKILL");
      }),
    waitOk: async (timeoutMs = 30_000) => {
      await waitFor(
        async () => {
          for (const p of alive()) {
            try {
              if (!/cluster_state:ok/.test(String(await nodeCall(p, "CLUSTER", "INFO")))) return false;
            } catch {
              return false;
            }
          }
          return true;
        },
        { timeoutMs, intervalMs: 100, what: "cluster_state:ok on every node" },
      );
    },
    waitReplicasInSync: async (timeoutMs = 30_000) => {
      await waitFor(
        async () => {
          for (const n of (await nodes()).filter((x) => x.role === "replica" && !x.failed)) {
            if (!/master_link_status:up/.test(String(await nodeCall(n.port, "INFO", "replication")))) return false;
          }
          return true;
        },
        { timeoutMs, intervalMs: 100, what: "every replica in sync with its master" },
      );
    },
    stop: stopAll,
  };
  await cluster.waitOk();
  // Every node knows every other (gossip done), replicas attached.
  await waitFor(async () => (await nodes()).filter((n) => n.role === "replica").length === masters * replicas, { timeoutMs: 20_000, what: "replicas attached" });
  // …and done with their first sync: a replica promoted before it has the
  // data would bring up an empty slot.
  await cluster.waitReplicasInSync();
  return cluster;
}

export interface TestSentinels {
  name: string;
  /** `127.0.0.1:port` of each Sentinel. */
  sentinels: string[];
  primaryPort: number;
  replicaPort: number;
  /** The primary's port as the Sentinels report it now. */
  currentPrimary(): Promise<number>;
  kill(port: number): Promise<void>;
  stop(): Promise<void>;
}

/** A primary, one replica and three Sentinels (quorum 2) watching it as `name`. */
export async function startSentinels(opts: { name?: string; downAfterMs?: number } = {}): Promise<TestSentinels> {
  const name = opts.name ?? "sy-primary";
  const dir = mkdtempSync(path.join(tmpdir(), "sy-sentinel-"));
  const taken = new Set<number>();
  const primaryPort = await clusterPort(taken);
  const replicaPort = await clusterPort(taken);
  const sentinelPorts = [await clusterPort(taken), await clusterPort(taken), await clusterPort(taken)];
  const children = new Map<number, ChildProcess>();
  const data = (port: number, extra: string[]) =>
    spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--dir", dir, "--dbfilename", `dump-${port}.rdb`, "--save", "", "--appendonly", "no", ...extra], { stdio: "ignore" });
  const stopAll = stopWithProcess(children, dir);
  try {
    children.set(primaryPort, data(primaryPort, []));
    children.set(replicaPort, data(replicaPort, ["--replicaof", "127.0.0.1", String(primaryPort)]));
    await waitPing(primaryPort);
    await waitPing(replicaPort);
    await waitFor(async () => /master_link_status:up/.test(String(await nodeCall(replicaPort, "INFO", "replication"))), { timeoutMs: 15_000, what: "replica in sync" });
    for (const port of sentinelPorts) {
      const conf = path.join(dir, `sentinel-${port}.conf`);
      writeFileSync(
        conf,
        [
          `port ${port}`,
          "bind 127.0.0.1",
          `dir ${dir}`,
          `sentinel monitor ${name} 127.0.0.1 ${primaryPort} 2`,
          `sentinel down-after-milliseconds ${name} ${opts.downAfterMs ?? 1500}`,
          `sentinel failover-timeout ${name} 10000`,
          `sentinel parallel-syncs ${name} 1`,
          "",
        ].join("\n"),
      );
      children.set(port, spawn("redis-sentinel", [conf], { stdio: "ignore" }));
    }
    for (const p of sentinelPorts) await waitPing(p);
    // Each Sentinel has found the replica and the other Sentinels.
    await waitFor(
      async () => {
        for (const p of sentinelPorts) {
          const info = (await nodeCall(p, "SENTINEL", "MASTER", name)) as string[];
          const field = (k: string) => Number(info[info.indexOf(k) + 1]);
          if (field("num-slaves") < 1 || field("num-other-sentinels") < 2) return false;
        }
        return true;
      },
      { timeoutMs: 30_000, intervalMs: 200, what: "sentinels see the replica and each other" },
    );
  } catch (err) {
    await stopAll();
    throw err;
  }
  return {
    name,
    sentinels: sentinelPorts.map((p) => `127.0.0.1:${p}`),
    primaryPort,
    replicaPort,
    currentPrimary: async () => {
      for (const p of sentinelPorts) {
        try {
          const addr = (await nodeCall(p, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", name)) as [string, string];
          return Number(addr[1]);
        } catch {
          await sleep(10);
        }
      }
      throw new Error("no sentinel answers");
    },
    kill: (port) =>
      new Promise<void>((resolve) => {
        const c = children.get(port)!;
        if (c.exitCode !== null || c.signalCode !== null) return resolve();
        c.once("exit", () => resolve());
        c.kill("SIGKILL");
      }),
    stop: stopAll,
  };
}

/**
 * Ties servers to this test process: however it ends, they end with it (and
 * their directory goes). The returned function stops them now.
 */
function stopWithProcess(children: Map<number, ChildProcess>, dir: string): () => Promise<void> {
  const onExit = () => {
    for (const c of children.values()) c.kill("SIGKILL");
    rmSync(dir, { recursive: true, force: true });
  };
  process.once("exit", onExit);
  return async () => {
    process.off("exit", onExit);
    await Promise.all(
      [...children.values()].map(
        (c) =>
          new Promise<void>((resolve) => {
            if (c.exitCode !== null || c.signalCode !== null) return resolve();
            c.once("exit", () => resolve());
            c.kill("SIGKILL");
          }),
      ),
    );
    rmSync(dir, { recursive: true, force: true });
  };
}
