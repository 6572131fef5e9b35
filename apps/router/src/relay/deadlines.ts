// Per-attempt deadline timer. One timer at a time, re-armed as the attempt
// moves through its phases (connect+headers → first token → idle between
// tokens); `refresh()` re-arms cheaply after every event.
export type DeadlinePhase = "connect" | "headers" | "first_token" | "idle" | "total";

export class DeadlineExceeded extends Error {
  override name = "DeadlineExceeded";
  constructor(readonly phase: DeadlinePhase, readonly ms: number) {
    super(`${phase.replace("_", " ")} deadline of ${ms} ms exceeded`);
  }
}

export class PhaseTimer {
  private timer: NodeJS.Timeout | undefined;
  private current: { phase: DeadlinePhase; ms: number } | undefined;

  constructor(private readonly onExpire: (err: DeadlineExceeded) => void) {}

  arm(phase: DeadlinePhase, ms: number): void {
    if (this.timer && this.current?.ms === ms) {
      this.current = { phase, ms };
      this.timer.refresh();
      return;
    }
    this.clear();
    this.current = { phase, ms };
    this.timer = setTimeout(() => {
      const c = this.current ?? { phase, ms };
      this.onExpire(new DeadlineExceeded(c.phase, c.ms));
    }, ms);
  }

  refresh(): void {
    this.timer?.refresh();
  }

  clear(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    this.current = undefined;
  }
}
