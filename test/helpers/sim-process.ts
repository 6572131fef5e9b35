// A sim worker in a process of its own (bench/sim-main.ts), for chaos tests
// that must stop or kill it: SIGSTOP freezes its sockets and heartbeats,
// SIGKILL drops them, exactly as a wedged or crashed worker host would.
import { spawn, type ChildProcess } from "node:child_process";
import path from "node:path";
import { freePort } from "#testkit/procs";

export interface SimProcess {
  id: string;
  url: string;
  child: ChildProcess;
  signal(sig: NodeJS.Signals): void;
  /** SIGKILL (after SIGCONT, should it be stopped) and wait for the exit. */
  kill(): Promise<void>;
}

export interface SimProcessOptions {
  id: string;
  redisUrl: string;
  prefix: string;
  models?: string[];
  tokens?: number;
  interTokenMs?: number;
  ttftMs?: number;
  heartbeatMs?: number;
  ttlMs?: number;
  state?: "ready" | "degraded";
}

const main = path.resolve(import.meta.dirname, "../../bench/sim-main.ts");

export async function startSimProcess(o: SimProcessOptions): Promise<SimProcess> {
  const port = await freePort();
  const child = spawn(process.execPath, ["--import", "tsx", main], {
    env: {
      ...process.env,
      PORT: String(port),
      WORKER_ID: o.id,
      REDIS_URL: o.redisUrl,
      PREFIX: o.prefix,
      MODELS: (o.models ?? ["sim"]).join(","),
      TOKENS: String(o.tokens ?? 5),
      INTER_TOKEN_MS: String(o.interTokenMs ?? 0),
      TTFT_MS: String(o.ttftMs ?? 0),
      ...(o.heartbeatMs ? { HEARTBEAT_MS: String(o.heartbeatMs) } : {}),
      ...(o.ttlMs ? { TTL_MS: String(o.ttlMs) } : {}),
      ...(o.state ? { STATE: o.state } : {}),
    },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let err = "";
  child.stderr!.on("data", (d: Buffer) => (err = (err + d.toString()).slice(-2000)));
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout!.on("data", (d: Buffer) => {
      out += d.toString();
      const m = /listening (\S+)/.exec(out);
      if (m) resolve(m[1]!);
    });
    child.once("exit", (code) => reject(new Error(`sim ${o.id} exited ${code} before listening: ${err}`)));
  });
  const exited = new Promise<void>((r) => child.once("exit", () => r()));
  return {
    id: o.id,
    url,
    child,
    signal: (sig) => void child.kill(sig),
    kill: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGCONT");
      child.kill("SIGKILL");
      await exited;
    },
  };
}
