// A private redis-server on a spare port, for tests that need their own
// configuration (auth, restarts) and must never touch the shared one.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { Redis } from "ioredis";
import { freePort } from "#testkit/procs";
import { sleep } from "./env.ts";

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
        child.once("exit", () => resolve());
        child.kill("SIGKILL");
      }),
  };
}
