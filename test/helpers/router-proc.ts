// A router as its own OS process (`switchyard router`), for tests that run
// several replicas or kill one with SIGKILL.
import path from "node:path";
import { freePort, startProc, waitHttp, type Proc } from "#testkit/procs";

const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");

export interface RouterProc {
  url: string;
  /** The admin listener (/metrics, /readyz). */
  adminUrl: string;
  proc: Proc;
  /** SIGKILL: no drain, no flush, nothing settled. */
  kill9(): Promise<void>;
  /** SIGTERM: the router drains, settles and flushes its ledger buffer. */
  stop(): Promise<void>;
}

export async function spawnRouter(env: Record<string, string>, label = "router"): Promise<RouterProc> {
  // A port picked free can be taken by someone else before the router binds
  // it: if the process dies before answering, try again on fresh ports.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const adminPort = await freePort();
    // One router process unless the test asks for more (router.processes defaults to one per core).
    const proc = startProc(process.execPath, [bin, "router"], { SWITCHYARD_PORT: String(port), SWITCHYARD_ROUTER__ADMIN_PORT: String(adminPort), SWITCHYARD_LOG__LEVEL: "warn", SWITCHYARD_ROUTER__PROCESSES: "1", ...env }, label);
    const url = `http://127.0.0.1:${port}`;
    const exited = new Promise<"exited">((resolve) => proc.child.once("exit", () => resolve("exited")));
    const up = waitHttp(`${url}/healthz`, { timeoutMs: 60_000, ok: (s) => s === 200 }).then(() => "up" as const);
    if ((await Promise.race([up, exited])) === "up") {
      return {
        url,
        adminUrl: `http://127.0.0.1:${adminPort}`,
        proc,
        stop: () => proc.stop(),
        kill9: () =>
          new Promise<void>((resolve) => {
            if (proc.child.exitCode !== null || proc.child.signalCode !== null) return resolve();
            proc.child.once("exit", () => resolve());
            proc.child.kill("SIGKILL");
          }),
      };
    }
    up.catch(() => {});
    if (attempt >= 3) throw new Error(`${label} exited before answering (3 attempts)`);
  }
}
