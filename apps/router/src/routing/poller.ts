// A snapshot refreshed on a timer from a store (the worker registry, the live
// leases), so the request path reads memory and never waits on Redis.
// Overlapping refreshes coalesce when Redis is slow; a failed one keeps the
// last snapshot and is logged.
import type { Logger } from "../observability/log.ts";

export class Poller {
  private timer: NodeJS.Timeout | undefined;
  private refreshing: Promise<void> | undefined;
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
    this.timer = setInterval(() => void this.refresh(), this.pollMs);
    this.timer.unref();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
  }

  refresh(): Promise<void> {
    this.refreshing ??= this.load()
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
