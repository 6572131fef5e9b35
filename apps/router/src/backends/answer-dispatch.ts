// A worker's answer read without a body stream: undici's dispatch handler
// is given each chunk of the response as its parser produces it. Through
// request() each chunk went through a Readable (a push, a nextTick to read
// more, a 'data' emit) and each request was an AsyncResource (issue 14:
// the body's Readable was a tenth of what a stream allocated). A streamed
// answer's chunks go straight to the SSE batch queue (relay/sse.ts), whose
// backpressure is onData's answer: when it is full, undici stops reading
// the socket until the relay catches up and resume() is called. A whole
// answer's chunks are gathered within the body limit.
import { onAbort, type AbortLike } from "../abort.ts";
import { SseBatchQueue, type SseBatchReader, type SseQueueOptions } from "../relay/sse.ts";
import { bodyTooLarge, declaredLength, declaredTooLarge, ERROR_BODY_MAX_BYTES } from "./transport.ts";
import type { Pool } from "./undici.ts";

export interface SseAnswer {
  statusCode: number;
  /** Milliseconds undici held the request before writing its headers (AnswerHandler.heldMs). */
  heldMs: number;
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

/**
 * undici's handler protocol (onConnect → onHeaders → onData… → onComplete,
 * or onError at any point): the abort plumbing and a non-2xx answer's
 * error text, shared by both kinds of answer.
 */
abstract class AnswerHandler {
  protected abortRequest: ((reason: unknown) => void) | undefined;
  /** Made just before the dispatch (performance.now()). */
  private readonly madeAt = performance.now();
  /**
   * From the dispatch to onConnect, which undici calls just before it writes
   * the request's headers: the pool's pick of a connection, a new
   * connection's connect, and on a reused idle keep-alive connection its
   * check for bytes the worker sent unasked (undici ≥ 7.28 writes only after
   * the event loop's check phase, so behind whatever else that loop turn
   * runs). Known once the answer's head has come.
   */
  protected heldMs = Number.NaN;
  /** The signal's reason when it aborted before the request was sent. */
  private reason: unknown = undefined;
  private offAbort: (() => void) | undefined;
  protected answered = false;
  /** A non-2xx answer's body, gathered up to ERROR_BODY_MAX_BYTES. */
  protected error: { parts: Buffer[]; bytes: number; text: Promise<string>; settle: (text: string) => void } | undefined;

  constructor(signal: AbortLike) {
    if (signal.aborted) this.reason = signal.reason ?? stopped();
    else
      this.offAbort = onAbort(signal, () => {
        this.reason = signal.reason ?? stopped();
        this.abortRequest?.(this.reason);
      });
  }

  onConnect(abort: (reason: unknown) => void): void {
    this.heldMs = performance.now() - this.madeAt;
    if (this.reason !== undefined) {
      abort(this.reason);
      return;
    }
    this.abortRequest = abort;
  }

  protected readonly abort = () => this.abortRequest?.(stopped());

  /** A non-2xx answer: its body is gathered as error text. */
  protected refusal(): () => Promise<string> {
    let settle!: (text: string) => void;
    const text = new Promise<string>((r) => (settle = r));
    this.error = { parts: [], bytes: 0, text, settle };
    return () => text;
  }

  /** A chunk of a non-2xx answer's body. */
  protected errorData(chunk: Buffer): void {
    const e = this.error;
    if (!e) return;
    const room = ERROR_BODY_MAX_BYTES - e.bytes;
    e.parts.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
    e.bytes += Math.min(room, chunk.length);
    if (e.bytes >= ERROR_BODY_MAX_BYTES) {
      // All of it the router keeps: the rest is not read.
      this.settleError();
      this.abort();
    }
  }

  protected settleError(): void {
    const e = this.error;
    if (e) e.settle(Buffer.concat(e.parts, e.bytes).toString("utf8"));
  }

  protected release(): void {
    this.offAbort?.();
    this.offAbort = undefined;
    if (this.error) this.error.settle("");
  }
}

class SseHandler extends AnswerHandler {
  private resumeRequest: (() => void) | undefined;
  private queue: SseBatchQueue | undefined;

  constructor(
    signal: AbortLike,
    private readonly sse: SseQueueOptions,
    private readonly resolve: (a: SseAnswer) => void,
    private readonly reject: (err: unknown) => void,
  ) {
    super(signal);
  }

  onHeaders(statusCode: number, _rawHeaders: unknown, resume: () => void): boolean {
    if (statusCode < 200) return true; // 1xx: the answer is still to come
    this.answered = true;
    this.resumeRequest = resume;
    const ok = statusCode >= 200 && statusCode < 300;
    const errorText = ok ? () => Promise.resolve("") : this.refusal();
    if (ok) this.queue = new SseBatchQueue({ resume: () => this.resumeRequest?.(), stop: this.abort, finished: () => this.release() }, this.sse);
    this.resolve({ statusCode, heldMs: this.heldMs, batches: this.queue ?? new SseBatchQueue({ resume: () => {}, stop: () => {} }), errorText, abort: this.abort });
    return true;
  }

  onData(chunk: Buffer): boolean {
    if (this.queue) return this.queue.chunk(chunk);
    this.errorData(chunk);
    return true;
  }

  onComplete(): void {
    this.queue?.end();
    this.settleError();
    this.release();
  }

  onError(err: unknown): void {
    this.release();
    if (!this.answered) this.reject(err);
    else this.queue?.fail(err);
  }
}

export interface WholeAnswer {
  statusCode: number;
  /** Milliseconds undici held the request before writing its headers (AnswerHandler.heldMs). */
  heldMs: number;
  /** A 2xx answer's body, whole (rejects past the limit, or when the answer breaks off). */
  body: Promise<Buffer>;
  /** Any other answer's body as text: its first ERROR_BODY_MAX_BYTES ("" when it broke off). */
  errorText(): Promise<string>;
  /** Ends the request now if it is still going (an attempt given up). */
  abort(): void;
}

/** Sends the request; resolves at the answer's head (its body still coming), rejects with the transport's error before it. */
export function dispatchWhole(pool: Pool, opts: DispatchOptions, signal: AbortLike, limit: { maxBytes: number; what: string }): Promise<WholeAnswer> {
  return new Promise<WholeAnswer>((resolve, reject) => {
    pool.dispatch(opts, new WholeHandler(signal, limit, resolve, reject) as unknown as DispatchHandler);
  });
}

class WholeHandler extends AnswerHandler {
  private parts: Buffer[] | undefined;
  private bytes = 0;
  private done: { resolve: (b: Buffer) => void; reject: (err: unknown) => void } | undefined;

  constructor(
    signal: AbortLike,
    private readonly limit: { maxBytes: number; what: string },
    private readonly resolve: (a: WholeAnswer) => void,
    private readonly reject: (err: unknown) => void,
  ) {
    super(signal);
  }

  onHeaders(statusCode: number, rawHeaders: Buffer[] | null): boolean {
    if (statusCode < 200) return true; // 1xx: the answer is still to come
    this.answered = true;
    if (statusCode >= 300) {
      const none = Promise.reject(new Error(`a ${statusCode} answer has no body to relay`));
      none.catch(() => {});
      this.resolve({ statusCode, heldMs: this.heldMs, body: none, errorText: this.refusal(), abort: this.abort });
      return true;
    }
    const body = new Promise<Buffer>((resolve, reject) => (this.done = { resolve, reject }));
    // Read only if the caller does (a rejection nobody awaits is not an unhandled one).
    body.catch(() => {});
    const { maxBytes, what } = this.limit;
    const declared = declaredLength(rawHeader(rawHeaders, "content-length"));
    this.resolve({ statusCode, heldMs: this.heldMs, body, errorText: () => Promise.resolve(""), abort: this.abort });
    if (declared > maxBytes) this.fail(declaredTooLarge(what, declared, maxBytes));
    else this.parts = [];
    return true;
  }

  onData(chunk: Buffer): boolean {
    const parts = this.parts;
    if (!parts) {
      this.errorData(chunk);
      return true;
    }
    this.bytes += chunk.length;
    if (this.bytes > this.limit.maxBytes) this.fail(bodyTooLarge(this.limit.what, this.limit.maxBytes));
    else parts.push(chunk);
    return true;
  }

  onComplete(): void {
    const parts = this.parts;
    this.parts = undefined;
    if (parts) this.done?.resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, this.bytes));
    this.settleError();
    this.release();
  }

  onError(err: unknown): void {
    this.release();
    if (!this.answered) this.reject(err);
    else this.done?.reject(err);
    this.parts = undefined;
  }

  private fail(err: Error): void {
    this.parts = undefined;
    this.done?.reject(err);
    this.abort();
  }
}

/** One header's value among undici's raw headers (name, value, name, value…; `name` in lower case), undefined when absent. */
function rawHeader(raw: Buffer[] | null, name: string): string | undefined {
  if (!raw) return undefined;
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const n = raw[i]!;
    if (n.length === name.length && n.toString("latin1").toLowerCase() === name) return raw[i + 1]!.toString("latin1");
  }
  return undefined;
}
