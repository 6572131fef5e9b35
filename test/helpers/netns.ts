// Many hosts on one machine: each "host" is a Linux network namespace with one
// veth into a shared bridge (itself in a "switch" namespace), addresses from a
// private 10.231.N.0/24; the test process (the client) gets one veth into the
// bridge too. Links can be cut (`ip link set down`), a path between two hosts
// partitioned (blackhole routes on both ends: packets silently dropped, as
// 100 % loss would) and a link slowed (HTB rate limit). Needs root, `ip` and
// `tc`. Everything a fabric makes is named syh<pid>_<n>…: a run first removes
// what a crashed run (dead pid) left, and removes its own at the end or on exit.
//
// The kernel here has no sch_netem (CONFIG_NET_SCH_NETEM unset), so delay and
// loss are modelled with what it has: blackhole routes for loss, HTB for a
// slow link.
import { execFileSync, spawn, type ChildProcess } from "node:child_process";
import { chmodSync, chownSync, existsSync, mkdtempSync, readFileSync, rmSync, appendFileSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { sleep } from "./env.ts";
import { alive } from "#testkit/procs";

const PREFIX = "syh";

function ip(args: string[], opts: { ignoreErrors?: boolean } = {}): string {
  try {
    return execFileSync("ip", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    if (opts.ignoreErrors) return "";
    const e = err as { stderr?: string; message: string };
    throw new Error(`ip ${args.join(" ")}: ${e.stderr?.trim() || e.message}`);
  }
}

function tc(args: string[]): string {
  try {
    return execFileSync("tc", args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (err) {
    const e = err as { stderr?: string; message: string };
    throw new Error(`tc ${args.join(" ")}: ${e.stderr?.trim() || e.message}`);
  }
}

function namespaces(): string[] {
  return ip(["netns", "list"], { ignoreErrors: true })
    .split("\n")
    .map((l) => l.split(" ")[0]!.trim())
    .filter(Boolean);
}

/** Kill every process inside `ns`, then delete it (a namespace with processes in it outlives its name). */
function deleteNamespace(ns: string): void {
  for (let i = 0; i < 20; i++) {
    const pids = ip(["netns", "pids", ns], { ignoreErrors: true }).split(/\s+/).filter(Boolean).map(Number);
    if (pids.length === 0) break;
    for (const pid of pids) {
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        // gone already
      }
    }
    execFileSync("sleep", ["0.05"]);
  }
  ip(["netns", "del", ns], { ignoreErrors: true });
}

/** Remove namespaces and root-side links left by runs whose process is gone. */
export function cleanupStale(): string[] {
  const removed: string[] = [];
  const owner = (name: string) => {
    const m = new RegExp(`^${PREFIX}(\\d+)_\\d+(?:-|$)`).exec(name);
    return m ? Number(m[1]) : undefined;
  };
  for (const ns of namespaces()) {
    const pid = owner(ns);
    if (pid === undefined || alive(pid)) continue;
    deleteNamespace(ns);
    removed.push(ns);
  }
  for (const line of ip(["-o", "link", "show"], { ignoreErrors: true }).split("\n")) {
    const name = /^\d+:\s+([^:@\s]+)/.exec(line)?.[1];
    if (!name) continue;
    const pid = owner(name);
    if (pid === undefined || alive(pid)) continue;
    ip(["link", "del", name], { ignoreErrors: true });
    removed.push(name);
  }
  return removed;
}

/** A 10.231.N.0/24 no address or route on this machine uses yet. */
function freeSubnet(): string {
  const used = ip(["-4", "-o", "addr", "show"], { ignoreErrors: true }) + ip(["-4", "route", "show", "table", "all"], { ignoreErrors: true });
  const start = 10 + (process.pid % 200);
  for (let k = 0; k < 240; k++) {
    const n = 10 + ((start - 10 + k) % 240);
    if (!used.includes(`10.231.${n}.`)) return `10.231.${n}`;
  }
  throw new Error("no free 10.231.N.0/24 subnet");
}

export interface Host {
  name: string;
  /** Namespace name (for `ip netns exec`). */
  ns: string;
  ip: string;
  /** The host's port on the bridge (in the switch namespace): `ip link set … down` cuts its cable. */
  bridgePort: string;
}

export interface NsProcess {
  child: ChildProcess;
  /** The last 8 kB of its stdout and stderr. */
  output(): string;
  /** Resolves with the first match of `re` in its output. */
  waitFor(re: RegExp, timeoutMs: number): Promise<RegExpExecArray>;
  /** SIGTERM, then SIGKILL after `graceMs`; resolves when it exited. */
  stop(graceMs?: number): Promise<void>;
  exited: Promise<number | null>;
}

export class Fabric {
  readonly hosts = new Map<string, Host>();
  /** The test process's own address on the bridge. */
  readonly clientIp: string;
  private readonly sw: string;
  private readonly rootLink: string;
  private readonly procs = new Set<NsProcess>();
  private readonly tmpDirs: string[] = [];
  private next = 10;
  private destroyed = false;
  private readonly onExit = () => this.destroySync();
  private readonly onSignal = (sig: NodeJS.Signals) => {
    this.destroySync();
    process.exit(sig === "SIGINT" ? 130 : 143);
  };

  private static made = 0;

  private constructor(
    readonly subnet: string,
    /** The name every namespace and link of this fabric starts with (also the test process's own link). */
    readonly tag = `${PREFIX}${process.pid}_${Fabric.made++}`,
  ) {
    this.sw = `${tag}-sw`;
    this.rootLink = tag;
    this.clientIp = `${subnet}.1`;
  }

  /** Build the switch and the client's link; removes a crashed run's leftovers first. */
  static create(): Fabric {
    if (userInfo().uid !== 0) throw new Error("network namespaces need root");
    cleanupStale();
    const f = new Fabric(freeSubnet());
    process.once("exit", f.onExit);
    process.once("SIGINT", f.onSignal);
    process.once("SIGTERM", f.onSignal);
    try {
      ip(["netns", "add", f.sw]);
      ip(["-n", f.sw, "link", "set", "lo", "up"]);
      ip(["-n", f.sw, "link", "add", "br0", "type", "bridge"]);
      ip(["-n", f.sw, "link", "set", "br0", "up"]);
      ip(["link", "add", f.rootLink, "type", "veth", "peer", "name", "p-client", "netns", f.sw]);
      ip(["-n", f.sw, "link", "set", "p-client", "master", "br0", "up"]);
      ip(["addr", "add", `${f.clientIp}/24`, "dev", f.rootLink]);
      ip(["link", "set", f.rootLink, "up"]);
    } catch (err) {
      f.destroySync();
      throw err;
    }
    return f;
  }

  /** A new host: its own namespace, one veth into the bridge, the next address. */
  addHost(name: string): Host {
    if (!/^[a-z0-9-]{1,12}$/.test(name)) throw new Error(`host name '${name}': 1–12 of a-z0-9-`);
    if (this.hosts.has(name)) throw new Error(`host ${name} exists`);
    const host: Host = { name, ns: `${this.tag}-${name}`, ip: `${this.subnet}.${this.next++}`, bridgePort: `p-${name}` };
    ip(["netns", "add", host.ns]);
    this.hosts.set(name, host);
    ip(["-n", host.ns, "link", "set", "lo", "up"]);
    ip(["-n", this.sw, "link", "add", host.bridgePort, "type", "veth", "peer", "name", "eth0", "netns", host.ns]);
    ip(["-n", this.sw, "link", "set", host.bridgePort, "master", "br0", "up"]);
    ip(["-n", host.ns, "addr", "add", `${host.ip}/24`, "dev", "eth0"]);
    ip(["-n", host.ns, "link", "set", "eth0", "up"]);
    return host;
  }

  host(name: string): Host {
    const h = this.hosts.get(name);
    if (!h) throw new Error(`no host ${name}`);
    return h;
  }

  /** Run a command inside `host`'s namespace to completion. */
  exec(host: string, cmd: string, args: string[]): string {
    return execFileSync("ip", ["netns", "exec", this.host(host).ns, cmd, ...args], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  }

  /** Run a command inside `host`'s namespace, asynchronously, collecting its output. */
  run(host: string, cmd: string, args: string[], env: Record<string, string | undefined> = {}): Promise<{ code: number | null; stdout: string; stderr: string }> {
    const child = spawn("ip", ["netns", "exec", this.host(host).ns, cmd, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "";
    let stderr = "";
    child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
  }

  /** Start a long-running process inside `host`'s namespace. */
  spawn(host: string, cmd: string, args: string[], env: Record<string, string | undefined> = {}): NsProcess {
    const child = spawn("ip", ["netns", "exec", this.host(host).ns, cmd, ...args], { env: { ...process.env, ...env }, stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    const waiters = new Set<() => void>();
    const keep = (d: Buffer) => {
      out = (out + d.toString()).slice(-8192);
      for (const w of waiters) w();
    };
    child.stdout!.on("data", keep);
    child.stderr!.on("data", keep);
    const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
    const p: NsProcess = {
      child,
      exited,
      output: () => out,
      waitFor: (re, timeoutMs) =>
        new Promise((resolve, reject) => {
          const check = () => {
            const m = re.exec(out);
            if (m) {
              done();
              resolve(m);
            }
          };
          const timer = setTimeout(() => {
            done();
            reject(new Error(`${host}: ${cmd} did not print ${re} within ${timeoutMs} ms; output:\n${out}`));
          }, timeoutMs);
          const onExit = () => {
            done();
            reject(new Error(`${host}: ${cmd} exited (${child.exitCode ?? child.signalCode}) before printing ${re}; output:\n${out}`));
          };
          const done = () => {
            clearTimeout(timer);
            waiters.delete(check);
            child.off("exit", onExit);
          };
          waiters.add(check);
          child.once("exit", onExit);
          check();
        }),
      stop: async (graceMs = 5000) => {
        if (child.exitCode === null && child.signalCode === null) {
          child.kill("SIGTERM");
          const t = setTimeout(() => child.kill("SIGKILL"), graceMs);
          await exited;
          clearTimeout(t);
        }
        this.procs.delete(p);
      },
    };
    this.procs.add(p);
    return p;
  }

  /** Cut `host`'s cable at the switch: nothing reaches it, nothing leaves it, no error anyone sees at once. */
  cutLink(host: string): void {
    ip(["-n", this.sw, "link", "set", this.host(host).bridgePort, "down"]);
  }

  restoreLink(host: string): void {
    ip(["-n", this.sw, "link", "set", this.host(host).bridgePort, "up"]);
  }

  /** Drop every packet between two hosts (blackhole routes at both ends), leaving their other paths alone. */
  partition(a: string, b: string): void {
    ip(["-n", this.host(a).ns, "route", "add", "blackhole", `${this.host(b).ip}/32`]);
    ip(["-n", this.host(b).ns, "route", "add", "blackhole", `${this.host(a).ip}/32`]);
  }

  heal(a: string, b: string): void {
    ip(["-n", this.host(a).ns, "route", "del", "blackhole", `${this.host(b).ip}/32`], { ignoreErrors: true });
    ip(["-n", this.host(b).ns, "route", "del", "blackhole", `${this.host(a).ip}/32`], { ignoreErrors: true });
  }

  /** Limit what `host` sends to `kbit` kbit/s (HTB; no burst beyond one packet): a slow link, latency grows with bytes sent. */
  slowLink(host: string, kbit: number): void {
    const ns = this.host(host).ns;
    tc(["-n", ns, "qdisc", "replace", "dev", "eth0", "root", "handle", "1:", "htb", "default", "10"]);
    tc(["-n", ns, "class", "replace", "dev", "eth0", "parent", "1:", "classid", "1:10", "htb", "rate", `${kbit}kbit`, "ceil", `${kbit}kbit`, "burst", "1600b", "cburst", "1600b"]);
  }

  clearLink(host: string): void {
    try {
      tc(["-n", this.host(host).ns, "qdisc", "del", "dev", "eth0", "root"]);
    } catch {
      // nothing shaped
    }
  }

  /** A private directory (removed with the fabric), `owner` uid/gid optional. */
  tmpDir(label: string, owner?: { uid: number; gid: number }): string {
    const dir = mkdtempSync(path.join(tmpdir(), `${this.tag}-${label}-`));
    if (owner) {
      chownSync(dir, owner.uid, owner.gid);
      chmodSync(dir, 0o700);
    }
    this.tmpDirs.push(dir);
    return dir;
  }

  /** Stop every process started here (SIGTERM, then SIGKILL), then remove every namespace and link. */
  async destroy(): Promise<void> {
    await Promise.all([...this.procs].map((p) => p.stop(3000)));
    this.destroySync();
  }

  private destroySync(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    process.off("exit", this.onExit);
    process.off("SIGINT", this.onSignal);
    process.off("SIGTERM", this.onSignal);
    for (const p of this.procs) p.child.kill("SIGKILL");
    for (const h of this.hosts.values()) deleteNamespace(h.ns);
    deleteNamespace(this.sw);
    ip(["link", "del", this.rootLink], { ignoreErrors: true });
    for (const d of this.tmpDirs) rmSync(d, { recursive: true, force: true });
  }

  /** What of this fabric is still on the machine (empty after destroy). */
  leftovers(): string[] {
    const mine = this.tag;
    const links = ip(["-o", "link", "show"], { ignoreErrors: true })
      .split("\n")
      .map((l) => /^\d+:\s+([^:@\s]+)/.exec(l)?.[1])
      .filter((n): n is string => n === mine);
    return [...namespaces().filter((n) => n.startsWith(`${mine}-`)), ...links];
  }
}

export interface NsRedis {
  url: string;
  /** redis://… with the admin password, on the host's address. */
  adminUrl: string;
  proc: NsProcess;
}

/** A private redis-server inside `host`, bound to its address only, default user behind a password. */
export async function startNsRedis(f: Fabric, host: string, opts: { password: string; port?: number }): Promise<NsRedis> {
  const h = f.host(host);
  const port = opts.port ?? 6379;
  const dir = f.tmpDir("redis");
  const proc = f.spawn(host, "redis-server", ["--bind", h.ip, "--port", String(port), "--requirepass", opts.password, "--save", "", "--appendonly", "no", "--dir", dir]);
  const adminUrl = `redis://:${opts.password}@${h.ip}:${port}`;
  for (let i = 0; ; i++) {
    const r = new Redis(adminUrl, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on("error", () => {});
    try {
      await r.connect();
      await r.ping();
      r.disconnect();
      break;
    } catch (err) {
      r.disconnect();
      if (i > 100 || proc.child.exitCode !== null) throw new Error(`redis in ${host} did not start: ${(err as Error).message}\n${proc.output()}`);
      await sleep(50);
    }
  }
  return { url: `redis://${h.ip}:${port}`, adminUrl, proc };
}

export interface NsPostgres {
  /** postgres://postgres@<host ip>:<port>/postgres */
  url: string;
  stop(): Promise<void>;
}

/** A private PostgreSQL inside `host`, listening on its address only (trust auth from the fabric's subnet). */
export async function startNsPostgres(f: Fabric, host: string, opts: { port?: number } = {}): Promise<NsPostgres> {
  const h = f.host(host);
  const port = opts.port ?? 5432;
  const uid = Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" }).trim());
  const gid = Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }).trim());
  const dir = f.tmpDir("pg", { uid, gid });
  const data = path.join(dir, "data");
  execFileSync("runuser", ["-u", "postgres", "--", "initdb", "-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--locale=C", "-E", "UTF8"], { stdio: "ignore" });
  appendFileSync(path.join(data, "pg_hba.conf"), `host all all ${f.subnet}.0/24 trust\n`);
  const pgOpts = `-p ${port} -k ${dir} -c listen_addresses=${h.ip} -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
  const pgctl = (verb: string, extra: string[]) => f.exec(host, "runuser", ["-u", "postgres", "--", "pg_ctl", "-D", data, ...extra, "-w", "-t", "30", verb]);
  try {
    pgctl("start", ["-o", pgOpts, "-l", path.join(dir, "log")]);
  } catch (err) {
    const log = existsSync(path.join(dir, "log")) ? readFileSync(path.join(dir, "log"), "utf8").slice(-2000) : "";
    throw new Error(`postgres in ${host} did not start: ${(err as Error).message}\n${log}`);
  }
  return {
    url: `postgres://postgres@${h.ip}:${port}/postgres`,
    stop: async () => {
      try {
        pgctl("stop", ["-m", "immediate"]);
      } catch {
        // namespace teardown kills it anyway
      }
    },
  };
}
