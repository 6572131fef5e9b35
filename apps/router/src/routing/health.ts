// Worker health as this router sees it: consecutive failures eject a worker
// for a growing interval (1 s, 2 s, 4 s… capped); after it the worker is on
// probation — one success puts it fully back, one failure ejects it again for
// twice as long. A heartbeat showing recovery (a restarted process, or a
// return to `ready`) clears the ejection at once. Heartbeat expiry and the
// warming/draining/degraded states are handled by the directory as before;
// this only adds what the registry cannot know: the calls that failed. An
// ejected worker also waits for a heartbeat newer than its ejection: one
// that is frozen or dead stays out until its record expires, instead of
// costing a request a connect or header deadline at the end of the interval.
// Per router by nature (like Envoy's outlier detection): each router ejects
// on what it saw, and a worker it ejects still serves the others.
import type { WorkerRecord } from "@switchyard/state";
import type { Config } from "../config.ts";
import type { Logger } from "../observability/log.ts";
import type { RouterMetrics } from "../observability/metrics.ts";
import type { UpstreamFailure } from "../backends/types.ts";

export type HealthConfig = Config["routing"]["health"];

export type AttemptOutcome = "ok" | "failed" | "neutral";

interface WorkerHealthState {
  /** Consecutive failures counted towards the soft and the hard threshold. */
  soft: number;
  hard: number;
  /** Ejections in a row (the interval doubles with each). */
  ejections: number;
  /** Epoch ms the current ejection ends (0: not ejected). */
  until: number;
  /** Ended an ejection and has not succeeded since: the next failure ejects again. */
  probation: boolean;
  /** The heartbeat facts that tell a recovery. */
  startedAt?: number;
  state?: WorkerRecord["state"];
  /** updatedAt of the last heartbeat seen. */
  lastBeat?: number;
  /** Ejected, and no heartbeat since: it may be frozen or dead. */
  awaitingBeat: boolean;
  beatAtEject?: number;
}

export interface HealthView {
  ejected: boolean;
  /** ms of ejection left (it may also be waiting for a heartbeat). */
  ejectedForMs: number;
  awaitingHeartbeat: boolean;
  probation: boolean;
  consecutiveFailures: number;
}

/** Failures that say the worker is unreachable or hung rather than erroring. */
function isHard(kind: UpstreamFailure["kind"] | undefined): boolean {
  return kind === "connect" || kind === "timeout";
}

export class WorkerHealth {
  private readonly workers = new Map<string, WorkerHealthState>();

  constructor(
    readonly cfg: HealthConfig,
    private readonly opts: { metrics?: RouterMetrics; log?: Logger; now?: () => number } = {},
  ) {
    opts.metrics?.ejectedWorkers.set({}, () => this.ejectedCount());
  }

  private now(): number {
    return this.opts.now ? this.opts.now() : Date.now();
  }

  private stateOf(workerId: string): WorkerHealthState {
    let s = this.workers.get(workerId);
    if (!s) {
      s = { soft: 0, hard: 0, ejections: 0, until: 0, probation: false, awaitingBeat: false };
      this.workers.set(workerId, s);
    }
    return s;
  }

  /** One attempt's outcome on a worker. `status` 429 is load, not ill health. */
  record(workerId: string, outcome: AttemptOutcome, kind?: UpstreamFailure["kind"], status?: number): void {
    if (outcome === "neutral" || (outcome === "failed" && status === 429)) return;
    const s = this.stateOf(workerId);
    const now = this.now();
    if (outcome === "ok") {
      // A success while still ejected (a request already in flight) proves
      // nothing about the interval; after it, it is the recovery.
      if (s.until > now) return;
      if (s.probation || s.ejections > 0) this.opts.log?.info("worker back in rotation", { worker: workerId });
      this.reset(s);
      return;
    }
    if (this.out(s, now)) return; // already out: failures of requests sent before don't stack
    if (isHard(kind)) s.hard++;
    else s.soft++;
    if (s.probation || s.soft >= this.cfg.failureThreshold || s.hard >= this.cfg.hardFailureThreshold) this.eject(workerId, s, now, kind);
  }

  private eject(workerId: string, s: WorkerHealthState, now: number, kind: UpstreamFailure["kind"] | undefined): void {
    const ms = Math.min(this.cfg.maxEjectMs, this.cfg.baseEjectMs * 2 ** Math.min(30, s.ejections));
    s.ejections++;
    s.until = now + ms;
    s.probation = true;
    // Only a worker whose heartbeats we follow can wait for one.
    s.awaitingBeat = s.lastBeat !== undefined;
    s.beatAtEject = s.lastBeat;
    s.soft = 0;
    s.hard = 0;
    this.opts.metrics?.ejections.inc({ reason: isHard(kind) ? "unreachable" : "failing" });
    this.opts.log?.warn("worker ejected", { worker: workerId, forMs: ms, inARow: s.ejections, kind });
  }

  private reset(s: WorkerHealthState): void {
    s.soft = 0;
    s.hard = 0;
    s.ejections = 0;
    s.until = 0;
    s.probation = false;
    s.awaitingBeat = false;
  }

  private out(s: WorkerHealthState, now: number): boolean {
    return s.until > now || s.awaitingBeat;
  }

  isEjected(workerId: string, now = this.now()): boolean {
    const s = this.workers.get(workerId);
    return s !== undefined && this.out(s, now);
  }

  view(workerId: string): HealthView {
    const s = this.workers.get(workerId);
    const now = this.now();
    if (!s) return { ejected: false, ejectedForMs: 0, awaitingHeartbeat: false, probation: false, consecutiveFailures: 0 };
    return { ejected: this.out(s, now), ejectedForMs: Math.max(0, s.until - now), awaitingHeartbeat: s.awaitingBeat, probation: s.probation, consecutiveFailures: Math.max(s.soft, s.hard) };
  }

  /**
   * Each registry refresh: a worker whose heartbeat shows recovery (its
   * process restarted, or it came back to `ready` from warming/degraded)
   * returns at once; a fresh heartbeat ends the wait for one; workers that
   * left the registry are forgotten.
   */
  observeHeartbeats(records: readonly WorkerRecord[]): void {
    const seen = new Set<string>();
    for (const w of records) {
      seen.add(w.id);
      const s = this.stateOf(w.id);
      const restarted = s.startedAt !== undefined && s.startedAt !== w.startedAt;
      const recovered = s.state !== undefined && s.state !== "ready" && s.state !== "draining" && w.state === "ready";
      if ((restarted || recovered) && (s.until > 0 || s.probation || s.soft > 0 || s.hard > 0)) {
        this.opts.log?.info("worker recovered (heartbeat)", { worker: w.id, restarted, state: w.state });
        this.reset(s);
      }
      if (s.awaitingBeat && w.updatedAt !== s.beatAtEject) s.awaitingBeat = false;
      s.startedAt = w.startedAt;
      s.state = w.state;
      s.lastBeat = w.updatedAt;
    }
    for (const id of this.workers.keys()) if (!seen.has(id)) this.workers.delete(id);
  }

  ejectedCount(): number {
    const now = this.now();
    let n = 0;
    for (const s of this.workers.values()) if (this.out(s, now)) n++;
    return n;
  }
}
