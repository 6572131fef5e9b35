// A streamed (SSE) answer read without a body stream: undici's dispatch
// handler gives each chunk of the response straight to the SSE batch queue
// (relay/sse.ts). Through request() each chunk went through a Readable (a
// push, a nextTick to read more, a 'data' emit) on every token of every
// stream, and each request was an AsyncResource too (issue 14: the body's
// Readable was a tenth of what a stream allocated). Backpressure is the
// queue's: when it is full, onData says so and undici stops reading the
// socket until the relay catches up and resume() is called.
import { onAbort, type AbortLike } from "../abort.ts";
import { SseBatchQueue, type SseBatchReader, type SseQueueOptions } from "../relay/sse.ts";
import { ERROR_BODY_MAX_BYTES } from "./transport.ts";
import type { Pool } from "./undici.ts";

export interface SseAnswer {
  statusCode: number;
  /** A 2xx answer's events, batch by batch. */
  batches: SseBatchReader;
  /** Any other answer's body as text: its first ERROR_BODY_MAX_BYTES ("" when it broke off). */
  errorText(): Promise<string>;
  /** Ends the request now (its connection is closed, not returned to the pool). */
  abort(): void;
}

type DispatchOptions = Parameters<Pool["dispatch"]>[0];
type DispatchHandler = Parameters<Pool["dispatch"]>[1];

/** Sends the request; resolves at the answer's head, rejects with the transport's error before it (the caller classifies). */
export function dispatchSse(pool: Pool, opts: DispatchOptions, signal: AbortLike, sse: SseQueueOptions): Promise<SseAnswer> {
  return new Promise<SseAnswer>((resolve, reject) => {
    pool.dispatch(opts, new SseHandler(signal, sse, resolve, reject) as unknown as DispatchHandler);
  });
}

const stopped = () => Object.assign(new Error("the relay stopped reading"), { code: "UND_ERR_ABORTED" });

/** undici's handler protocol (onConnect → onHeaders → onData… → onComplete, or onError at any point). */
class SseHandler {
  private abortRequest: ((reason: unknown) => void) | undefined;
  private resumeRequest: (() => void) | undefined;
  /** The signal's reason when it aborted before the request was sent. */
  private reason: unknown = undefined;
  private offAbort: (() => void) | undefined;
  private answered = false;
  private queue: SseBatchQueue | undefined;
  /** A non-2xx answer's body, gathered up to ERROR_BODY_MAX_BYTES. */
  private error: { parts: Buffer[]; bytes: number; text: Promise<string>; settle: (text: string) => void } | undefined;

  constructor(
    signal: AbortLike,
    private readonly sse: SseQueueOptions,
    private readonly resolve: (a: SseAnswer) => void,
    private readonly reject: (err: unknown) => void,
  ) {
    if (signal.aborted) this.reason = signal.reason ?? stopped();
    else
      this.offAbort = onAbort(signal, () => {
        this.reason = signal.reason ?? stopped();
        this.abortRequest?.(this.reason);
      });
  }

  onConnect(abort: (reason: unknown) => void): void {
    if (this.reason !== undefined) {
      abort(this.reason);
      return;
    }
    this.abortRequest = abort;
  }

  onHeaders(statusCode: number, _rawHeaders: unknown, resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx: the answer is still to come
    this.answered = true;
    this.resumeRequest = resume;
    const abort = () => this.abortRequest?.(stopped());
    if (statusCode >= 200 && statusCode < 300) {
      this.queue = new SseBatchQueue({ resume: () => this.resumeRequest?.(), stop: abort, finished: () => this.release() }, this.sse);
    } else {
      let settle!: (text: string) => void;
      const text = new Promise<string>((r) => (settle = r));
      this.error = { parts: [], bytes: 0, text, settle };
    }
    const queue = this.queue;
    this.resolve({
      statusCode,
      batches: queue ?? new SseBatchQueue({ resume: () => {}, stop: () => {} }),
      errorText: () => this.error?.text ?? Promise.resolve(""),
      abort,
    });
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.queue) return this.queue.chunk(chunk);
    const e = this.error;
    if (!e) return true;
    const room = ERROR_BODY_MAX_BYTES - e.bytes;
    e.parts.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
    e.bytes += Math.min(room, chunk.length);
    if (e.bytes >= ERROR_BODY_MAX_BYTES) {
      // All of it the router keeps: the rest is not read.
      this.settleError();
      this.abortRequest?.(stopped());
    }
    return true;
  }

  onComplete(): void {
    this.queue?.end();
    this.settleError();
    this.release();
  }

  onError(err: unknown): void {
    this.release();
    if (!this.answered) {
      this.reject(err);
      return;
    }
    this.queue?.fail(err);
    if (this.error) this.error.settle("");
  }

  private settleError(): void {
    const e = this.error;
    if (e) e.settle(Buffer.concat(e.parts, e.bytes).toString("utf8"));
  }

  private release(): void {
    this.offAbort?.();
    this.offAbort = undefined;
  }
}
