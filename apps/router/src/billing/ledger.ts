// Every dispatched request leaves one spend_ledger row. Rows are buffered and
// written in batches off the request path (insertLedgerRows is idempotent on
// request id + start time, so a retried batch never double-counts). If
// Postgres is down, rows stay buffered and are retried with backoff; the
// buffer is bounded in memory. This is the single-machine sink (`switchyard
// up` without Redis); with Redis, rows go through the durable stream in
// ledger-stream.ts.
import type { NewLedgerRow } from "@switchyard/db";
import type { Logger } from "../observability/log.ts";

export interface LedgerSink {
  /**
   * Resolves once the row is as durable as this sink makes it (Redis stream:
   * appended). `attempts`: the rows of the paid attempts the request failed
   * over from (RequestTab.rows), written in the same step as its own (one
   * stream entry, one buffer push): never one without the other.
   */
  record(row: NewLedgerRow, attempts?: readonly NewLedgerRow[]): Promise<void>;
  /** Write everything buffered now. */
  flush(): Promise<void>;
  close(): Promise<void>;
}

export interface BatchingLedgerOptions {
  flushMs?: number;
  maxBatch?: number;
  maxBuffered?: number;
  log: Logger;
  onDrop?: (n: number) => void;
}

export class BatchingLedgerWriter implements LedgerSink {
  private buffer: NewLedgerRow[] = [];
  private timer: NodeJS.Timeout | undefined;
  private flushing: Promise<void> | undefined;
  private backoffMs = 0;
  private closed = false;

  constructor(
    private readonly write: (rows: NewLedgerRow[]) => Promise<unknown>,
    private readonly opts: BatchingLedgerOptions,
  ) {}

  async record(row: NewLedgerRow, attempts?: readonly NewLedgerRow[]): Promise<void> {
    const max = this.opts.maxBuffered ?? 100_000;
    const n = 1 + (attempts?.length ?? 0);
    if (this.buffer.length + n > max) {
      // Bounded memory: the oldest rows go first, loudly.
      const dropped = this.buffer.splice(0, Math.max(0, this.buffer.length - max + n));
      this.opts.onDrop?.(dropped.length);
      this.opts.log.error("ledger buffer full: rows dropped", { dropped: dropped.length });
    }
    this.buffer.push(row);
    if (attempts) this.buffer.push(...attempts);
    if (this.buffer.length >= (this.opts.maxBatch ?? 500)) void this.flush();
    else this.schedule();
  }

  private schedule(): void {
    if (this.timer || this.closed) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      void this.flush();
    }, (this.opts.flushMs ?? 200) + this.backoffMs);
    this.timer.unref();
  }

  flush(): Promise<void> {
    // Assign first, clear in a later microtask: a drain that finds nothing to
    // do must not leave a settled promise behind that blocks later flushes.
    this.flushing ??= this.drain().finally(() => {
      this.flushing = undefined;
    });
    return this.flushing;
  }

  private async drain(): Promise<void> {
    while (this.buffer.length > 0) {
      const batch = this.buffer.slice(0, this.opts.maxBatch ?? 500);
      try {
        await this.write(batch);
        this.buffer.splice(0, batch.length);
        this.backoffMs = 0;
      } catch (err) {
        this.backoffMs = Math.min(Math.max(this.backoffMs * 2, 250), 10_000);
        this.opts.log.warn("ledger write failed; will retry", { rows: this.buffer.length, retryInMs: this.backoffMs, error: (err as Error).message });
        this.schedule();
        return;
      }
    }
  }

  async close(): Promise<void> {
    this.closed = true;
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
    await this.flush();
  }

  get buffered(): number {
    return this.buffer.length;
  }
}

/** In-memory twin for in-process use and tests. */
export class MemoryLedgerSink implements LedgerSink {
  readonly rows: NewLedgerRow[] = [];
  async record(row: NewLedgerRow, attempts?: readonly NewLedgerRow[]): Promise<void> {
    this.rows.push(row);
    if (attempts) this.rows.push(...attempts);
  }
  async flush(): Promise<void> {}
  async close(): Promise<void> {}
}
