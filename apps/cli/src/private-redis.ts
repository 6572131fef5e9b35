// `switchyard up --processes N`: the router processes share their registry,
// budgets, leases and ledger buffer through Redis, which in-process stores
// cannot do across processes. Without a configured Redis, `up` starts a
// private redis-server of its own: on a spare port of 127.0.0.1 behind a
// password made for the run, in a process group of its own so the Ctrl-C
// that reaches `up`'s group does not stop it before the routers have
// drained; `up` stops it last.
//
// It holds money (ledger rows and crash intents not yet in Postgres), so it
// is durable: an append-only file in <home>/redis (no RDB snapshots),
// `appendfsync everysec`. Redis write()s the AOF before it answers a
// command, so a killed `up`, a killed redis-server or the next `up`
// stopping a left-over one loses nothing that was acknowledged — but for
// one window: while a slow disk is still fsyncing the last second, everysec
// postpones the write (up to 2 s) and answers meanwhile, so a redis-server
// killed then loses those writes, as the machine going down loses the last
// second not yet fsynced.
// `always` would fsync on every event-loop turn, and every request's ledger
// XADD would wait on the disk (milliseconds on a loaded or networked disk)
// for a failure mode in which the local worker and the requests in flight
// are lost anyway. The next `up` starts it again on the same directory:
// the server loads the file, and the new routers drain the rows (consumer
// group, XAUTOCLAIM for the dead routers' pending ones) and finish the
// dead routers' intents into Postgres. One left behind by an `up` that was
// killed is stopped by the next with SIGTERM (a clean shutdown fsyncs the
// file), SIGKILL only if it does not exit within 5 s — nothing is deleted.
import { spawn, type ChildProcess } from "node:child_process";
import { randomBytes } from "node:crypto";
import { accessSync, constants, existsSync, readFileSync } from "node:fs";
import { mkdir, rm, writeFile } from "node:fs/promises";
import { connect, createServer } from "node:net";
import path from "node:path";
import { UsageError } from "./usage.ts";

export interface PrivateRedis {
  url: string;
  port: number;
  pid: number;
  dir: string;
  /** SIGTERM, then SIGKILL after 5 s; resolves once it has exited. */
  stop(): Promise<void>;
}

/** The executable `name` on PATH, if any. */
export function findOnPath(name: string, envPath = process.env.PATH ?? ""): string | undefined {
  for (const dir of envPath.split(path.delimiter)) {
    if (!dir) continue;
    const file = path.join(dir, name);
    try {
      accessSync(file, constants.X_OK);
      return file;
    } catch {
      // not here
    }
  }
  return undefined;
}

/** What to tell a user whose `up --processes N` has no redis-server to start. */
export function noRedisServer(n: number): UsageError {
  return new UsageError(
    [
      `up: --processes ${n} needs redis-server on PATH: ${n} router processes share the registry, budgets, leases and ledger buffer through Redis (in-process state cannot be shared between processes).`,
      "  Install Redis 6.2 or newer: Debian/Ubuntu 'sudo apt-get install redis-server', Fedora 'sudo dnf install redis', macOS 'brew install redis';",
      "  or point up at a Redis of yours with redis.url / REDIS_URL; or run 'switchyard up' without --processes (one router process, in-memory state).",
    ].join("\n"),
  );
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const port = (srv.address() as { port: number }).port;
      srv.close(() => resolve(port));
    });
  });
}

const gone = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return false;
  } catch {
    return true;
  }
};

/**
 * A redis-server a killed `up` left running (its pid file names it),
 * stopped when /proc says it is still that redis-server: SIGTERM (it
 * fsyncs its append-only file and exits), SIGKILL after 5 s; resolves once
 * it is gone, so the new server opens the file after the old one closed it.
 */
async function stopLeftover(pidFile: string, log: (msg: string) => void): Promise<void> {
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, "utf8").trim());
  if (!Number.isInteger(pid) || pid <= 1) return;
  let cmd = "";
  try {
    cmd = readFileSync(`/proc/${pid}/cmdline`, "utf8");
  } catch {
    return; // gone (or no /proc: left alone rather than guessing)
  }
  if (!cmd.includes("redis-server")) return;
  log(`stopping the private redis-server a previous 'up' left running (pid ${pid}); its data stays and is loaded again`);
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(pid, sig);
    } catch {
      // gone meanwhile
    }
  };
  signal("SIGTERM");
  const deadline = Date.now() + 5_000;
  while (!gone(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
  if (gone(pid)) return;
  signal("SIGKILL");
  while (!gone(pid)) await new Promise((r) => setTimeout(r, 20));
}

/** AUTH and PING on a connection of its own: true once the server answers both. */
function pings(port: number, password: string): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host: "127.0.0.1", port });
    let got = "";
    const done = (ok: boolean) => {
      sock.destroy();
      resolve(ok);
    };
    sock.setTimeout(1_000, () => done(false));
    sock.once("error", () => done(false));
    sock.on("data", (d: Buffer) => {
      got += d.toString();
      if (got.includes("+PONG")) done(got.startsWith("+OK"));
      else if (got.includes("-")) done(false);
    });
    sock.once("connect", () => sock.write(`AUTH ${password}\r\nPING\r\n`));
  });
}

async function waitReady(port: number, password: string, child: ChildProcess, output: () => string): Promise<void> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error(`redis-server exited (${child.exitCode ?? child.signalCode}) at start:\n${output().slice(-1500)}`);
    if (await pings(port, password)) return;
    if (Date.now() > deadline) throw new Error(`redis-server did not answer within 10 s:\n${output().slice(-1500)}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** Starts the private redis-server under `<home>/redis` (loading what an earlier one left there); `bin` from findOnPath. */
export async function startPrivateRedis(bin: string, home: string, log: (msg: string) => void): Promise<PrivateRedis> {
  const dir = path.resolve(home, "redis");
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const pidFile = path.join(dir, "redis-server.pid");
  await stopLeftover(pidFile, log);
  const port = await freePort();
  const password = randomBytes(24).toString("hex");
  // The password goes in on stdin as a config file ("-"), not on the command line `ps` shows.
  const child = spawn(bin, ["-", "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--dir", dir, "--protected-mode", "yes"], {
    stdio: ["pipe", "pipe", "pipe"],
    detached: true,
  });
  let output = "";
  const keep = (d: Buffer) => {
    output = (output + d.toString()).slice(-8_000);
  };
  child.stdout!.on("data", keep);
  child.stderr!.on("data", keep);
  child.stdin!.end(`requirepass ${password}\n`);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const pid = child.pid ?? 0;
  const url = `redis://:${password}@127.0.0.1:${port}`;
  const stop = async () => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 5_000);
      await exited;
      clearTimeout(t);
    }
    await rm(pidFile, { force: true });
  };
  try {
    await writeFile(pidFile, `${pid}\n`);
    await waitReady(port, password, child, () => output);
  } catch (err) {
    await stop();
    throw err;
  }
  // Its output is of no use once it serves; keep the pipes from filling.
  child.stdout!.resume();
  child.stderr!.resume();
  return { url, port, pid, dir, stop };
}
