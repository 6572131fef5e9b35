// Per-attempt deadline timer. One timer at a time, re-armed as the attempt
// moves through its phases (connect+headers → first token → idle between
// tokens); `refresh()` re-arms cheaply after every event. The request's
// total deadline rides on the same timer: each arm waits for whichever of
// the phase's limit and the time left in the total comes first — one timer
// per attempt, not two.
export type DeadlinePhase = "connect" | "headers" | "first_token" | "idle" | "total";

export class DeadlineExceeded extends Error {
  override name = "DeadlineExceeded";
  constructor(readonly phase: DeadlinePhase, readonly ms: number) {
    super(`${phase.replace("_", " ")} deadline of ${ms} ms exceeded`);
  }
}

export class PhaseTimer {
  private timer: NodeJS.Timeout | undefined;
  /** The phase the running timer ends (or "total"), and that phase's limit. */
  private current: { phase: DeadlinePhase; ms: number } | undefined;
  /** The phase last armed (refresh re-arms it when the total comes closer than its limit). */
  private armed: { phase: DeadlinePhase; ms: number } | undefined;
  /** The running timer's own duration: what Timeout.refresh() restarts. */
  private wait = -1;

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
    this.armed = { phase, ms };
    const left = this.totalAt - performance.now();
    const total = left <= ms;
    const wait = total ? Math.max(0, Math.ceil(left)) : ms;
    this.current = total ? { phase: "total", ms: this.totalMs } : this.armed;
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
    const { timer, current, armed } = this;
    if (!timer || !current || !armed || current.phase === "total") return;
    if (this.totalAt - performance.now() <= armed.ms) this.arm(armed.phase, armed.ms);
    else timer.refresh();
  }

  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.current = undefined;
    this.armed = undefined;
    this.wait = -1;
  }

  private readonly expire = (): void => {
    const c = this.current;
    if (!c) return;
    this.onExpire(new DeadlineExceeded(c.phase, c.ms));
  };
}
