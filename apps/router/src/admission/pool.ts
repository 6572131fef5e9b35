// A worker pool's load as this router sees it: the workers that serve one
// model (accepting new work), from their heartbeats, corrected by what this
// router admitted and finished since those heartbeats — so a burst between
// two beats cannot overshoot a band's ceiling.
//
// Saturation is the worse of slot occupancy (inFlight / capacity) and queue
// depth (queueDepth / capacity), summed over the pool. A worker's inFlight
// counts every request it holds, queued ones included (the agent counts HTTP
// requests in progress), so 1.0 means every decode slot is taken and above
// 1.0 requests are waiting on the workers.
import { acceptsNewWork, type WorkerRecord } from "@switchyard/state";

export class PoolLoad {
  /** Σ capacity of the pool's workers that accept new work (0: nothing to gate). */
  capacity = 0;
  /** Σ inFlight and Σ queueDepth at the last heartbeats seen. */
  private reportedInFlight = 0;
  private reportedQueue = 0;
  /** Identifies the heartbeats behind `reported*`: a new beat rebases the local correction. */
  private stamp = "";
  /** Requests this router admitted onto the pool and that have not ended. */
  private local = 0;
  /** `local` when the current heartbeats were taken in. */
  private localAtReport = 0;

  constructor(readonly name: string) {}

  /** Takes in the pool's current records (every registry refresh). */
  observe(records: readonly WorkerRecord[]): void {
    let capacity = 0;
    let inFlight = 0;
    let queue = 0;
    let beats = 0;
    for (const w of records) {
      if (!acceptsNewWork(w)) continue;
      capacity += w.capacity;
      inFlight += w.inFlight;
      queue += w.queueDepth;
      beats += w.updatedAt;
    }
    this.capacity = capacity;
    // The directory re-reads the registry more often than workers beat: only
    // a new heartbeat replaces the base (else admissions since the beat would
    // be forgotten at every refresh).
    const stamp = `${records.length}:${beats}`;
    if (stamp === this.stamp) return;
    this.stamp = stamp;
    this.reportedInFlight = inFlight;
    this.reportedQueue = queue;
    this.localAtReport = this.local;
  }

  admitted(): void {
    this.local++;
  }

  finished(): void {
    this.local--;
  }

  /** This router's requests on the pool now. */
  get outstanding(): number {
    return this.local;
  }

  /** In-flight requests on the pool, estimated now. */
  inFlight(): number {
    // The heartbeat plus our own changes since; never below what we alone
    // have outstanding (a beat taken before our requests reached the worker).
    return Math.max(this.reportedInFlight + this.local - this.localAtReport, this.local);
  }

  saturation(): number {
    if (this.capacity <= 0) return 0;
    return Math.max(this.inFlight(), this.reportedQueue) / this.capacity;
  }
}
