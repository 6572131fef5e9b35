// One router per core (`switchyard router --processes N`, `router.processes`):
// a primary forks N router processes that share the public listener
// (node:cluster hands connections round-robin), restarts one that dies, and
// serves the admin port itself: /metrics is every process's metrics added up
// (/metrics?process=PID one process's own), /readyz asks each of them.
// The routers keep no state of their own that others need (Redis and
// Postgres hold it), so N of them behave as N replicas.
import cluster, { type Worker } from "node:cluster";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { Config } from "./config.ts";
import type { Logger } from "./observability/log.ts";
import { Counter, Gauge, RouterMetrics } from "./observability/metrics.ts";
import type { RouterHandle } from "./server.ts";

/** Messages between the primary and its router processes (IPC). */
type ToChild = { sy: "metrics"; id: number } | { sy: "readiness"; id: number } | { sy: "stop" };
type ToPrimary =
  | { sy: "listening"; url: string }
  | { sy: "metrics"; id: number; text: string }
  | { sy: "readiness"; id: number; ok: boolean; body: Record<string, unknown> };

const isMessage = (m: unknown): m is { sy: string } => typeof m === "object" && m !== null && typeof (m as { sy?: unknown }).sy === "string";

/**
 * V8's semi-space for a router process, in MB (the young generation is two
 * of them; node's default is 16). A scavenge copies what the requests in
 * flight hold, however large the semi-space, so a larger one collects as
 * much garbage in fewer, not longer, pauses: with 64, one router process
 * used 15–22 % less CPU per non-streaming request and 6–16 % less per stream
 * (docs/BENCHMARKS.md, "the young generation"), for 70–100 MB more resident
 * memory under load (V8 grows the space only while allocation is fast).
 */
export const ROUTER_SEMI_SPACE_MB = 64;

/** V8 takes `_` or `-` in a flag's name, and its value after `=` or as the next word. */
const semiSpaceFlag = /(^|\s)--max[-_]semi[-_]space[-_]size([=\s]|$)/;

/**
 * The node flags a router process runs with: the primary's own (a
 * --cpu-prof profiles each process), and the router's semi-space unless node
 * was given one (on its command line or in NODE_OPTIONS, which forks
 * inherit): an operator's own setting wins. The Docker image's router
 * entrypoint passes the same flag to a router started as one process.
 */
export function routerExecArgv(execArgv: readonly string[] = process.execArgv, nodeOptions: string = process.env.NODE_OPTIONS ?? ""): string[] {
  if (execArgv.some((a) => semiSpaceFlag.test(a)) || semiSpaceFlag.test(nodeOptions)) return [...execArgv];
  return [...execArgv, `--max-semi-space-size=${ROUTER_SEMI_SPACE_MB}`];
}

/** Where a router process's primary serves the admin port (set in the processes it forks). */
const ADMIN_URL_ENV = "SWITCHYARD_ROUTER_PRIMARY_ADMIN_URL";

/** Which of the primary's router processes this is (0, 1, …; set in the processes it forks). */
const INDEX_ENV = "SWITCHYARD_ROUTER_PROCESS_INDEX";

/** True in a process forked by `superviseRouters`. */
export function isRouterProcess(): boolean {
  return cluster.isWorker;
}

/** A router alone, or the first of `--processes N`: the one that says what every process would (start-up warnings). */
export function isFirstRouterProcess(): boolean {
  return !cluster.isWorker || process.env[INDEX_ENV] === "0";
}

/** In a router process: the admin URL its primary serves. */
export function primaryAdminUrl(): string | undefined {
  return cluster.isWorker ? process.env[ADMIN_URL_ENV] : undefined;
}

/**
 * In a router process: answer the primary's metrics and readiness questions,
 * and resolve when it (or a SIGTERM sent to this process) says to stop.
 * SIGINT is the primary's to act on (Ctrl-C reaches the whole process group).
 */
export function serveToPrimary(router: RouterHandle, render: () => string): Promise<void> {
  const send = (m: ToPrimary) => process.send?.(m);
  send({ sy: "listening", url: router.url });
  process.on("SIGINT", () => {});
  return new Promise<void>((resolve) => {
    process.once("SIGTERM", () => resolve());
    process.on("message", (m: unknown) => {
      if (!isMessage(m)) return;
      const msg = m as ToChild;
      if (msg.sy === "stop") resolve();
      else if (msg.sy === "metrics") send({ sy: "metrics", id: msg.id, text: render() });
      else if (msg.sy === "readiness")
        void router.deps.readiness().then(
          (r) => send({ sy: "readiness", id: msg.id, ok: r.redis && r.postgres && !r.draining, body: { ...r, workers: router.deps.directory.all().length, ...(router.deps.summary ? { state: router.deps.summary } : {}) } }),
          (err: Error) => send({ sy: "readiness", id: msg.id, ok: false, body: { error: err.message } }),
        );
    });
  });
}

type Family = { type: string; lines: string[]; series: Map<string, number> };

/**
 * Adds up Prometheus text from several processes: histograms summed series
 * by series, counters and gauges by their declared merge (sum or max).
 * CPU per request is recomputed: each process's CPU since its metrics began
 * (its figure × its requests; process_cpu_seconds_total counts its start-up
 * too, which is no request's) summed, over the summed requests.
 */
export function mergeMetrics(texts: string[], mergeOf: (name: string) => "sum" | "max" = () => "sum"): string {
  const families = new Map<string, Family>();
  let servingCpu = 0;
  let allRequests = 0;
  for (const text of texts) {
    let current: Family | undefined;
    let currentName = "";
    let perRequest = 0;
    let requests = 0;
    for (const line of text.split("\n")) {
      if (!line) continue;
      if (line.startsWith("# HELP ")) {
        currentName = line.slice(7, line.indexOf(" ", 7));
        current = families.get(currentName);
        if (!current) families.set(currentName, (current = { type: "untyped", lines: [line], series: new Map() }));
        continue;
      }
      if (line.startsWith("# TYPE ")) {
        const [, , name, type] = line.split(" ");
        currentName = name!;
        current = families.get(currentName);
        if (!current) families.set(currentName, (current = { type: type!, lines: [], series: new Map() }));
        if (current.lines.length < 2) {
          current.type = type!;
          current.lines.push(line);
        }
        continue;
      }
      if (line.startsWith("#") || !current) continue;
      const sp = line.lastIndexOf(" ");
      const key = line.slice(0, sp);
      const v = Number(line.slice(sp + 1));
      if (currentName === "switchyard_cpu_seconds_per_request") perRequest = v;
      else if (currentName === "switchyard_requests_total") requests += v;
      const prev = current.series.get(key);
      const max = current.type !== "histogram" && mergeOf(currentName) === "max";
      current.series.set(key, prev === undefined ? v : max ? Math.max(prev, v) : prev + v);
    }
    servingCpu += perRequest * requests;
    allRequests += requests;
  }
  families.get("switchyard_cpu_seconds_per_request")?.series.set("switchyard_cpu_seconds_per_request", allRequests > 0 ? servingCpu / allRequests : 0);
  const out: string[] = [];
  for (const f of families.values()) {
    out.push(...f.lines);
    for (const [k, v] of f.series) out.push(`${k} ${v}`);
  }
  return out.join("\n") + "\n";
}

export interface SuperviseOptions {
  processes: number;
  log: Logger;
  /** Resolves when the primary should stop (a signal). */
  untilStop: Promise<unknown>;
  /** A second signal while stopping: end the router processes now. */
  onForce?: (kill: () => void) => void;
  /** Called once every first process listens: the public URL they share, the admin URL, their pids (`switchyard up` prints them). */
  onUp?: (info: { url: string; adminUrl: string; pids: number[] }) => void;
}

/**
 * The primary: forks `processes` routers (each re-runs this command), serves
 * the admin port, restarts a router that exits unasked (after it had started;
 * one that fails at start stops them all with its exit code), and on stop
 * asks each to drain and waits for them. Returns the exit code.
 */
export async function superviseRouters(config: Config, opts: SuperviseOptions): Promise<number> {
  const { log, processes } = opts;
  const live = new Map<number, { worker: Worker; pid: number; started: boolean; index: number }>();
  const metrics = new RouterMetrics();
  const restarts = new Counter("switchyard_router_process_restarts_total", "Router processes restarted by the primary after they died.");
  const gauge = new Gauge("switchyard_router_processes", "Router processes serving now.");
  gauge.set({}, () => [...live.values()].filter((p) => p.started).length);
  const mergeOf = new Map(metrics.all().flatMap((m) => (m instanceof Gauge || m instanceof Counter ? [[m.name, m.merge] as const] : [])));
  let stopping = false;
  let failed: number | undefined;
  let firstUp!: () => void;
  let publicUrl = "";
  let startFailed!: (code: number) => void;
  /** Until every first process has started: a failure then stops them all. */
  let initial = true;
  const allUp = new Promise<void>((resolve, reject) => {
    firstUp = resolve;
    startFailed = (code) => reject(Object.assign(new Error(`a router process exited with ${code} while starting`), { exitCode: code }));
  });
  allUp.catch(() => {});
  let nextId = 1;
  const pending = new Map<number, (m: ToPrimary) => void>();
  let backoffMs = 100;
  let adminUrl = "";
  let lastRestart = 0;

  const fork = (index: number, adminUrl: string) => {
    const worker = cluster.fork({ [INDEX_ENV]: String(index), [ADMIN_URL_ENV]: adminUrl });
    const entry = { worker, pid: worker.process.pid ?? 0, started: false, index };
    live.set(worker.id, entry);
    // A send to a process already gone is answered by its callback above; any
    // other channel error of a dying process is no reason for the primary to die.
    worker.on("error", (err: Error) => log.warn("router process channel error", { pid: entry.pid, error: err.message }));
    worker.on("message", (m: unknown) => {
      if (!isMessage(m)) return;
      const msg = m as ToPrimary;
      if (msg.sy === "listening") {
        entry.started = true;
        publicUrl ||= msg.url;
        if ([...live.values()].filter((p) => p.started).length >= processes) firstUp();
      } else if ("id" in msg) pending.get(msg.id)?.(msg);
    });
    worker.on("exit", (code, signal) => {
      live.delete(worker.id);
      if (stopping) return;
      if (!entry.started && initial) {
        // Failing at start (config, migrations, a taken port): every restart would fail the same way.
        failed = code ?? 1;
        startFailed(failed);
        return;
      }
      const now = Date.now();
      // Dying again soon after a restart backs off (up to 5 s); a long healthy run resets it.
      backoffMs = now - lastRestart > 30_000 ? 100 : Math.min(5_000, backoffMs * 2);
      lastRestart = now;
      restarts.inc();
      log.warn("router process died; restarting it", { pid: entry.pid, code, signal, inMs: backoffMs });
      setTimeout(() => {
        if (!stopping) fork(index, adminUrl);
      }, backoffMs).unref();
    });
  };

  /** Asks every started process; those that do not answer within 2 s are left out. */
  const ask = async (kind: "metrics" | "readiness", only?: number): Promise<Array<{ pid: number; msg: ToPrimary }>> => {
    const targets = [...live.values()].filter((p) => p.started && (only === undefined || p.pid === only));
    return (
      await Promise.all(
        targets.map(
          (p) =>
            new Promise<{ pid: number; msg: ToPrimary } | undefined>((resolve) => {
              const id = nextId++;
              const timer = setTimeout(() => {
                pending.delete(id);
                resolve(undefined);
              }, 2_000);
              pending.set(id, (msg) => {
                clearTimeout(timer);
                pending.delete(id);
                resolve({ pid: p.pid, msg });
              });
              const missed = () => {
                clearTimeout(timer);
                pending.delete(id);
                resolve(undefined);
              };
              // A process dying as it is asked (killed, crashed) has a closed
              // pipe: the send fails with EPIPE, reported to this callback —
              // without one it is an 'error' event, and unhandled it took the
              // primary down (a CI run: /readyz asked while a SIGKILLed
              // process was going).
              if (!p.worker.isConnected()) return missed();
              try {
                p.worker.send({ sy: kind, id } satisfies ToChild, undefined, undefined, (err) => {
                  if (err) missed();
                });
              } catch {
                missed();
              }
            }),
        ),
      )
    ).filter((x): x is { pid: number; msg: ToPrimary } => x !== undefined);
  };

  const admin: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://admin");
    const reply = (status: number, type: string, body: string) => {
      res.writeHead(status, { "content-type": type });
      res.end(body);
    };
    if (req.method !== "GET") return reply(405, "application/json", JSON.stringify({ error: "method not allowed" }));
    if (url.pathname === "/healthz") return reply(200, "application/json", JSON.stringify({ status: "ok" }));
    if (url.pathname === "/metrics") {
      const one = url.searchParams.get("process");
      void ask("metrics", one === null ? undefined : Number(one)).then((answers) => {
        const texts = answers.map((a) => (a.msg as { text: string }).text);
        if (one !== null) return texts[0] === undefined ? reply(404, "text/plain", `no router process ${one}\n`) : reply(200, "text/plain; version=0.0.4", texts[0]);
        reply(200, "text/plain; version=0.0.4", mergeMetrics(texts, (n) => mergeOf.get(n) ?? "sum") + gauge.render() + "\n" + restarts.render() + "\n");
      });
      return;
    }
    if (url.pathname === "/readyz") {
      void ask("readiness").then((answers) => {
        const each = answers.map((a) => {
          const { state: _state, ...rest } = (a.msg as { body: Record<string, unknown> }).body;
          return { pid: a.pid, ...rest, ready: (a.msg as { ok: boolean }).ok };
        });
        // Ready while one process is (the others may be restarting): the listener is served.
        const ok = !stopping && each.some((p) => p.ready);
        // The fields a one-process router's /readyz has, from the first process that answers ready (state: where it lives).
        const first = answers.find((a) => (a.msg as { ok: boolean }).ok) ?? answers[0];
        const { redis, postgres, workers, state } = ((first?.msg as { body?: Record<string, unknown> } | undefined)?.body ?? {}) as Record<string, unknown>;
        reply(
          ok ? 200 : 503,
          "application/json",
          JSON.stringify({ status: stopping ? "draining" : ok ? "ready" : "not_ready", redis: redis ?? false, postgres: postgres ?? false, workers: workers ?? 0, ...(state ? { state } : {}), processes: each, restarts: restarts.total() }),
        );
      });
      return;
    }
    reply(404, "application/json", JSON.stringify({ error: "not found" }));
  });

  // The admin port first: its URL goes to each process (their logs name it), and /readyz answers while they start.
  admin.keepAliveTimeout = config.router.keepAliveTimeoutMs;
  try {
    await new Promise<void>((resolve, reject) => {
      admin.once("error", reject);
      admin.listen(config.router.adminPort, config.router.adminHost, () => resolve());
    });
  } catch (err) {
    log.error("admin listener failed", { error: (err as Error).message });
    return 1;
  }
  adminUrl = `http://${config.router.adminHost}:${(admin.address() as AddressInfo).port}`;
  // Each forked process re-runs the same command line, with the router's node flags.
  cluster.setupPrimary({ execArgv: routerExecArgv() });
  for (let i = 0; i < processes; i++) fork(i, adminUrl);
  try {
    await Promise.race([allUp, opts.untilStop.then(() => undefined)]);
  } catch (err) {
    stopping = true;
    for (const p of live.values()) p.worker.process.kill("SIGKILL");
    admin.close();
    log.error("router processes did not start", { error: (err as Error).message });
    return (err as { exitCode?: number }).exitCode || 1;
  }
  initial = false;
  if (!stopping) {
    const pids = [...live.values()].map((p) => p.pid);
    log.info("router processes listening", { processes, pids, admin: adminUrl });
    opts.onUp?.({ url: publicUrl, adminUrl, pids });
  }
  if (failed === undefined) await opts.untilStop;
  stopping = true;
  // Each drains as `switchyard router` does on SIGTERM; a second signal ends them now.
  const exited = [...live.values()].map((p) => new Promise<void>((r) => (p.worker.isDead() ? r() : p.worker.once("exit", () => r()))));
  opts.onForce?.(() => {
    for (const p of live.values()) p.worker.process.kill("SIGKILL");
  });
  for (const p of live.values()) {
    // One still starting listens for no message yet (a stop sent now would be
    // lost, and it would serve on after the primary waits for it): it holds
    // no request, so SIGTERM ends it.
    if (!p.started) {
      p.worker.process.kill("SIGTERM");
      continue;
    }
    try {
      p.worker.send({ sy: "stop" } satisfies ToChild);
    } catch {
      p.worker.process.kill("SIGTERM");
    }
  }
  await Promise.all(exited);
  await new Promise<void>((r) => admin.close(() => r()));
  return failed ?? 0;
}
