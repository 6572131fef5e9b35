// EngineClient: one running engine process, spoken to over stdio with
// varint size-delimited protobuf frames. Many requests share it: events are
// routed to their request by id. If the process dies, every open request
// gets an error event and `exited` resolves.
import { spawn, type ChildProcessWithoutNullStreams } from "node:child_process";
import { create } from "@bufbuild/protobuf";
import { sizeDelimitedDecodeStream, sizeDelimitedEncode } from "@bufbuild/protobuf/wire";
import {
  type Event,
  EventSchema,
  type Request,
  RequestSchema,
  ErrorCode,
} from "@switchyard/proto/switchyard/engine/v1/engine_pb";

export type EngineEvent = Event;
export type RequestKind = Request["kind"];

export class EngineError extends Error {
  override name = "EngineError";
  constructor(
    readonly code: ErrorCode,
    message: string,
  ) {
    super(message);
  }
}

interface Pending {
  push(ev: Event): void;
  fail(err: Error): void;
}

export interface EngineProcessOptions {
  binary: string;
  device: string;
  threads?: number;
  onLog?: (line: string) => void;
}

export class EngineClient {
  private readonly child: ChildProcessWithoutNullStreams;
  private readonly pending = new Map<string, Pending>();
  private seq = 0;
  readonly ready: Promise<{ device: string; version: string }>;
  readonly exited: Promise<{ code: number | null; signal: NodeJS.Signals | null; stderrTail: string }>;
  private dead: Error | undefined;
  private stderrTail = "";
  /** When the engine last sent a frame, or began to owe one (performance.now()). */
  private quietSince = performance.now();
  /** Set when the watchdog killed the engine: why, for every request that fails with it. */
  private stalled: string | undefined;
  private watchdog: NodeJS.Timeout | undefined;

  constructor(opts: EngineProcessOptions) {
    const args = ["--device", opts.device, ...(opts.threads ? ["--threads", String(opts.threads)] : [])];
    // Its own process group: a terminal's Ctrl-C or a group-wide SIGTERM must
    // reach the agent, which drains first and then stops the engine. If the
    // agent dies outright, the engine sees EOF on stdin and exits by itself.
    const child = spawn(opts.binary, args, { stdio: ["pipe", "pipe", "pipe"], detached: true });
    this.child = child;
    this.child.stderr.setEncoding("utf8");
    let partial = "";
    this.child.stderr.on("data", (d: string) => {
      this.stderrTail = (this.stderrTail + d).slice(-4000);
      partial += d;
      let nl: number;
      while ((nl = partial.indexOf("\n")) >= 0) {
        opts.onLog?.(partial.slice(0, nl));
        partial = partial.slice(nl + 1);
      }
    });
    this.child.stdin.on("error", () => {}); // EPIPE after a crash; `exited` reports it
    let resolveReady!: (v: { device: string; version: string }) => void;
    let rejectReady!: (e: Error) => void;
    this.ready = new Promise((res, rej) => {
      resolveReady = res;
      rejectReady = rej;
    });
    this.ready.catch(() => {});
    this.exited = new Promise((resolve) => {
      this.child.once("exit", (code, signal) => {
        clearInterval(this.watchdog);
        this.dead = new EngineError(ErrorCode.INTERNAL, this.stalled ?? `engine exited (${signal ?? `code ${code}`})`);
        rejectReady(new Error(`engine exited before it was ready (${signal ?? `code ${code}`}): ${this.stderrTail.trim().split("\n").slice(-3).join(" | ")}`));
        for (const p of this.pending.values()) p.fail(this.dead);
        this.pending.clear();
        resolve({ code, signal, stderrTail: this.stderrTail });
      });
    });
    this.child.once("error", (err) => rejectReady(err));
    void (async () => {
      try {
        for await (const ev of sizeDelimitedDecodeStream(EventSchema, child.stdout)) {
          this.quietSince = performance.now();
          if (ev.kind.case === "ready") {
            resolveReady({ device: ev.kind.value.device, version: ev.kind.value.version });
            continue;
          }
          this.pending.get(ev.requestId)?.push(ev);
        }
      } catch (err) {
        // A corrupt frame means the stream can't be trusted any more.
        this.kill();
        rejectReady(err as Error);
      }
    })();
  }

  get pid(): number | undefined {
    return this.child.pid;
  }

  get alive(): boolean {
    return this.dead === undefined;
  }

  /** Why the watchdog killed this engine, if it did. */
  get stallReason(): string | undefined {
    return this.stalled;
  }

  /**
   * Kills the engine once it has owed an answer for `stallMs` without
   * sending a single frame: a wedged device or a deadlock answers nothing,
   * not even the heartbeat's stats, and stays "ready" to every router while
   * each request sent to it waits out its deadline. Its death is an exit
   * like any other: open requests fail (with the stall as their error) and
   * the supervisor restarts it. A busy engine is never silent this long:
   * it streams tokens, chunks long prompts and answers stats between steps.
   */
  watch(stallMs: number, onStall: (silentMs: number) => void): void {
    clearInterval(this.watchdog);
    this.watchdog = setInterval(() => {
      const silent = performance.now() - this.quietSince;
      if (this.dead || this.stalled || this.pending.size === 0 || silent < stallMs) return;
      this.stalled = `engine stalled: no answer in ${Math.round(silent / 1000)} s; restarting it`;
      onStall(silent);
      this.kill();
    }, Math.max(50, Math.floor(stallMs / 4)));
    this.watchdog.unref();
  }

  nextId(prefix = "r"): string {
    return `${prefix}-${++this.seq}`;
  }

  private send(requestId: string, kind: RequestKind): void {
    if (this.dead) throw this.dead;
    this.child.stdin.write(sizeDelimitedEncode(RequestSchema, create(RequestSchema, { requestId, kind })));
  }

  /**
   * Sends one request and yields its events until a terminal one (done,
   * error or a single-shot result). Throws EngineError on an error event or
   * if the engine dies.
   */
  async *call(kind: RequestKind, requestId = this.nextId()): AsyncGenerator<Event> {
    const queue: Event[] = [];
    let failure: Error | undefined;
    let wake: (() => void) | undefined;
    // An idle engine owes nothing: its silence counts from this first ask.
    if (this.pending.size === 0) this.quietSince = performance.now();
    this.pending.set(requestId, {
      push: (ev) => {
        queue.push(ev);
        wake?.();
      },
      fail: (err) => {
        failure = err;
        wake?.();
      },
    });
    try {
      this.send(requestId, kind);
      for (;;) {
        while (queue.length > 0) {
          const ev = queue.shift()!;
          if (ev.kind.case === "error") throw new EngineError(ev.kind.value.code, ev.kind.value.message);
          yield ev;
          if (ev.kind.case !== "tokens") return; // every other event ends its request
        }
        if (failure) throw failure;
        await new Promise<void>((r) => (wake = r));
        wake = undefined;
      }
    } finally {
      this.pending.delete(requestId);
    }
  }

  /** One-shot request: the single result event. */
  async once(kind: RequestKind, requestId?: string): Promise<Event> {
    for await (const ev of this.call(kind, requestId)) return ev;
    throw new EngineError(ErrorCode.INTERNAL, "engine sent no result");
  }

  cancel(targetRequestId: string): void {
    if (this.dead) return;
    try {
      this.send(this.nextId("c"), { case: "cancel", value: { $typeName: "switchyard.engine.v1.Cancel", targetRequestId } });
    } catch {
      // engine already gone
    }
  }

  async shutdown(graceMs = 5000): Promise<void> {
    if (this.dead) return;
    try {
      this.send(this.nextId("s"), { case: "shutdown", value: { $typeName: "switchyard.engine.v1.Shutdown" } });
      this.child.stdin.end();
    } catch {
      // already gone
    }
    const t = setTimeout(() => this.kill(), graceMs);
    await this.exited;
    clearTimeout(t);
  }

  kill(signal: NodeJS.Signals = "SIGKILL"): void {
    try {
      this.child.kill(signal);
    } catch {
      // already gone
    }
  }
}
