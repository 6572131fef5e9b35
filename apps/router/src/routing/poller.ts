// A snapshot refreshed on a timer from a store (the worker registry, the live
// leases), so the request path reads memory and never waits on Redis.
// Timer ticks skip while a refresh runs (Redis is slow); an explicit refresh
// asked for meanwhile gets a load that starts after it, so whoever wrote to
// the store and then refreshes sees that write. A failed refresh keeps the
// last snapshot and is logged.
import type { Logger } from "../observability/log.ts";

export class Poller {
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
  /** The one load queued behind the running one, shared by every refresh asked for meanwhile. */
  private again: Promise<void> | undefined;
  private lastOk = 0;

  constructor(
    private readonly pollMs: number,
    /** Reads the store and installs the new snapshot; throws to keep the old one. */
    private readonly load: () => Promise<void>,
    private readonly log: Logger,
    /** Log message when a refresh fails, e.g. "registry refresh failed". */
    private readonly failure: string,
  ) {}

  async start(): Promise<void> {
    await this.refresh();
    this.timer = setInterval(() => {
      if (!this.refreshing) void this.refresh();
    }, this.pollMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  refresh(): Promise<void> {
    // The running load may have read the store before the caller's write: joining it would hand back a stale snapshot.
    if (this.refreshing) {
      return (this.again ??= this.refreshing.then(() => {
        this.again = undefined;
        return this.refresh();
      }));
    }
    this.refreshing = this.load()
      .then(
        () => {
          this.lastOk = Date.now();
        },
        (err: unknown) => this.log.warn(this.failure, { error: (err as Error).message }),
      )
      .finally(() => {
        this.refreshing = undefined;
      });
    return this.refreshing;
  }

  lastRefreshAgeMs(): number {
    return this.lastOk === 0 ? Infinity : Date.now() - this.lastOk;
  }
}
