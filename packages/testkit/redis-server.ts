// A private redis-server on a spare port, for tests and benches that need
// their own configuration (auth, restarts, a keyspace of their own) and must
// never touch the shared one.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { freePort } from "./procs.ts";

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

export interface PrivateRedis {
  url: string;
  port: number;
  stop(): Promise<void>;
}

/** `opts.port`: start on that port (a restart of a server stopped before). */
export async function startPrivateRedis(args: string[] = [], opts: { port?: number } = {}): Promise<PrivateRedis> {
  const port = opts.port ?? (await freePort());
  const dir = mkdtempSync(path.join(tmpdir(), "sy-redis-"));
  const child: ChildProcess = spawn("redis-server", ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir, ...args], { stdio: "ignore" });
  const pass = args.includes("--requirepass") ? args[args.indexOf("--requirepass") + 1] : undefined;
  const url = `redis://${pass ? `:${pass}@` : ""}127.0.0.1:${port}`;
  for (let i = 0; i < 100; i++) {
    const r = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    r.on("error", () => {});
    try {
      await r.connect();
      await r.ping();
      r.disconnect();
      break;
    } catch {
      r.disconnect();
      await sleep(50);
    }
  }
  return {
    url,
    port,
    stop: () =>
      new Promise((resolve) => {
        child.once("exit", () => {
          rmSync(dir, { recursive: true, force: true });
          resolve();
        });
        child.kill("SIGKILL");
      }),
  };
}
