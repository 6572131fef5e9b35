// Shared by the rolling-restart tests: a pool of router processes whose
// readiness clients learn from /readyz as a load balancer does, SIGTERM and
// wait for the exit, and one stream read and checked to its end.
import type { ChildProcess } from "node:child_process";
import type { RouterProc } from "../helpers/router-proc.ts";

export interface PooledRouter {
  name: string;
  router: RouterProc;
  /** What the last /readyz said (200 → true). */
  ready: boolean;
  /** Streams open against it right now, from the clients' side. */
  live: number;
  poller: NodeJS.Timeout;
}

/** Polls /readyz every `everyMs`, as a load balancer's probe (a connection refused is not ready). */
export function pool(name: string, router: RouterProc, everyMs = 50): PooledRouter {
  const entry: PooledRouter = { name, router, ready: false, live: 0, poller: undefined as unknown as NodeJS.Timeout };
  let busy = false;
  entry.poller = setInterval(() => {
    if (busy) return;
    busy = true;
    fetch(`${router.url}/readyz`, { signal: AbortSignal.timeout(1_000) })
      .then(async (r) => {
        await r.arrayBuffer();
        entry.ready = r.status === 200;
      })
      .catch(() => (entry.ready = false))
      .finally(() => (busy = false));
  }, everyMs);
  return entry;
}

/** SIGTERM, then the exit code (null when it died of a signal) and how long the drain took. */
export function sigterm(child: ChildProcess, timeoutMs = 60_000): Promise<{ code: number | null; signal: NodeJS.Signals | null; ms: number }> {
  const t0 = Date.now();
  return new Promise((resolve, reject) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve({ code: child.exitCode, signal: child.signalCode, ms: 0 });
    const timer = setTimeout(() => reject(new Error(`no exit within ${timeoutMs} ms of SIGTERM`)), timeoutMs);
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code, signal, ms: Date.now() - t0 });
    });
    child.kill("SIGTERM");
  });
}

export interface StreamResult {
  status: number;
  requestId: string | null;
  /** The concatenated delta contents. */
  text: string;
  /** Error events received (each an `{"error":…}` payload). */
  errors: string[];
  done: boolean;
  /** Why the request failed outright (connection refused, reset mid-body…). */
  failure?: string;
}

/** Reads a streamed chat completion to its end: its text, its error events, whether [DONE] came. */
export async function readStream(res: Response): Promise<StreamResult> {
  const requestId = res.headers.get("x-request-id");
  let body: string;
  try {
    body = await res.text();
  } catch (err) {
    return { status: res.status, requestId, text: "", errors: [], done: false, failure: `body: ${(err as Error).message}` };
  }
  if (res.status !== 200) return { status: res.status, requestId, text: "", errors: [body], done: false, failure: `status ${res.status}: ${body.slice(0, 300)}` };
  let text = "";
  const errors: string[] = [];
  let done = false;
  for (const block of body.split("\n\n")) {
    if (!block.startsWith("data: ")) continue;
    const data = block.slice(6);
    if (data === "[DONE]") {
      done = true;
      continue;
    }
    const ev = JSON.parse(data) as { error?: unknown; choices?: Array<{ delta?: { content?: string } }> };
    if (ev.error !== undefined) errors.push(data);
    else text += ev.choices?.[0]?.delta?.content ?? "";
  }
  return { status: res.status, requestId, text, errors, done };
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
