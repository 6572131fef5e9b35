// A private PostgreSQL server on a spare port, for tests that stop and start
// Postgres (outages) and must never touch the shared server. Uses the
// installed server binaries; as root, runs them as the `postgres` user
// (initdb refuses to run as root).
import { execFile } from "node:child_process";
import { chmodSync, chownSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir, userInfo } from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { freePort } from "#testkit/procs";

const run = promisify(execFile);

function pgBin(name: string): string {
  return name; // on PATH (/usr/local/bin links to the installed major version)
}

export interface PrivatePostgres {
  url: string;
  port: number;
  /** Stop the server (fast shutdown: connections are cut). */
  stop(): Promise<void>;
  start(): Promise<void>;
  /** Stop for good and delete its files. */
  destroy(): Promise<void>;
}

export async function startPrivatePostgres(): Promise<PrivatePostgres> {
  const port = await freePort();
  const dir = mkdtempSync(path.join(tmpdir(), "sy-pg-"));
  const data = path.join(dir, "data");
  const asRoot = userInfo().uid === 0;
  let uid = 0;
  let gid = 0;
  if (asRoot) {
    const { stdout } = await run("id", ["-u", "postgres"]);
    uid = Number(stdout.trim());
    gid = Number((await run("id", ["-g", "postgres"])).stdout.trim());
    chownSync(dir, uid, gid);
    chmodSync(dir, 0o700);
  }
  const exec = (cmd: string, args: string[]) => (asRoot ? run("runuser", ["-u", "postgres", "--", pgBin(cmd), ...args]) : run(pgBin(cmd), args));
  await exec("initdb", ["-D", data, "-A", "trust", "-U", "postgres", "--no-sync", "--locale=C", "-E", "UTF8"]);
  const opts = `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off`;
  const start = async () => {
    await exec("pg_ctl", ["-D", data, "-o", opts, "-l", path.join(dir, "log"), "-w", "-t", "30", "start"]);
  };
  const stop = async () => {
    await exec("pg_ctl", ["-D", data, "-m", "fast", "-w", "-t", "30", "stop"]).catch(() => {});
  };
  await start();
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    port,
    start,
    stop,
    destroy: async () => {
      await stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
