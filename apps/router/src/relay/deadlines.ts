// Per-attempt deadline timer. One timer at a time, re-armed as the attempt
// moves through its phases (connect+headers → first token → idle between
// tokens); `refresh()` re-arms cheaply after every event. The request's
// total deadline rides on the same timer: each arm waits for whichever of
// the phase's limit and the time left in the total comes first — one timer
// per attempt, not two.
export type DeadlinePhase = "connect" | "headers" | "answer" | "first_token" | "idle" | "total";

export class DeadlineExceeded extends Error {
  override name = "DeadlineExceeded";
  constructor(readonly phase: DeadlinePhase, readonly ms: number) {
    super(`${phase.replace("_", " ")} deadline of ${ms} ms exceeded`);
  }
}

export class PhaseTimer {
  private timer: NodeJS.Timeout | undefined;
  /** The phase last armed, and its limit. */
  private armed: { phase: DeadlinePhase; ms: number } | undefined;
  /** The running timer ends the total deadline, not the armed phase (less of the total was left than the phase's limit). */
  private byTotal = false;
  /** The running timer's own duration: what Timeout.refresh() restarts. */
  private wait = -1;
  /** armWhile's: the phase is armed again while its backend is alive, until this limit. */
  private extend: { alive: () => boolean; until: number; limitMs: number } | undefined;

  /**
   * @param totalAt performance.now() at which the request's total deadline
   *   passes (Infinity: none); it ends as phase "total" of `totalMs`.
   */
  constructor(
    private readonly onExpire: (err: DeadlineExceeded) => void,
    private readonly totalAt = Number.POSITIVE_INFINITY,
    private readonly totalMs = 0,
  ) {}

  arm(phase: DeadlinePhase, ms: number): void {
    this.extend = undefined;
    this.armArmed(phase, ms);
  }

  /**
   * `phase` for `stepMs`, armed again each time it passes while `alive()`
   * says the backend is still there, for `limitMs` in all (then it expires
   * as phase "answer"). A whole answer's headers come only once it is
   * generated, so their wait is long for a long answer; a backend gone
   * silent (a cut cable: its heartbeats stop too) is still found within a
   * step, not at the limit.
   */
  armWhile(phase: DeadlinePhase, stepMs: number, limitMs: number, alive: () => boolean): void {
    this.armArmed(phase, Math.min(stepMs, limitMs));
    this.extend = { alive, until: performance.now() + limitMs, limitMs };
  }

  private armArmed(phase: DeadlinePhase, ms: number): void {
    this.armed = { phase, ms };
    const left = this.totalAt - performance.now();
    this.byTotal = left <= ms;
    const wait = this.byTotal ? Math.max(0, Math.ceil(left)) : ms;
    if (this.timer && this.wait === wait) {
      this.timer.refresh();
      return;
    }
    if (this.timer) clearTimeout(this.timer);
    this.wait = wait;
    this.timer = setTimeout(this.expire, wait);
  }

  /** After progress: the phase's wait starts over (never past the total deadline, which progress does not move). */
  refresh(): void {
    const { timer, armed } = this;
    if (!timer || !armed || this.byTotal) return;
    if (this.totalAt - performance.now() <= armed.ms) this.armArmed(armed.phase, armed.ms);
    else timer.refresh();
  }

  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.armed = undefined;
    this.byTotal = false;
    this.wait = -1;
    this.extend = undefined;
  }

  private readonly expire = (): void => {
    const { armed, extend } = this;
    if (!armed) return;
    if (this.byTotal) return this.onExpire(new DeadlineExceeded("total", this.totalMs));
    if (extend) {
      const left = extend.until - performance.now();
      if (left <= 0) return this.onExpire(new DeadlineExceeded("answer", extend.limitMs));
      if (extend.alive()) return this.armArmed(armed.phase, Math.min(armed.ms, Math.ceil(left)));
    }
    this.onExpire(new DeadlineExceeded(armed.phase, armed.ms));
  };
}
