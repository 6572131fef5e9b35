// Server-sent events: parse an upstream byte stream into event payloads as
// the WHATWG spec reads them (lines end with CRLF, LF or CR; data lines join
// with "\n"; comments, `event:`/`id:`/`retry:` and unknown fields are
// dropped: OpenAI-style streams use data only), and format payloads for the
// client. The upstream is untrusted: no line and no event is buffered past
// `maxEventBytes`.
import { UpstreamTooLarge } from "../backends/transport.ts";

export interface SseOptions {
  /** Longest line, and longest data of one event, in bytes (router.maxUpstreamEventBytes). */
  maxEventBytes: number;
  /** Names the upstream in the error ("worker w1"). */
  label?: string;
}

const LF = 0x0a;
const CR = 0x0d;
const COLON = 0x3a;
const SPACE = 0x20;
const DEFAULT_MAX_EVENT_BYTES = 1024 * 1024;

const encoder = new TextEncoder();

/** The chunk as a Buffer without copying (undici's chunks already are): ranges decode without a view each. */
function asBuffer(chunk: Uint8Array | string): Buffer {
  if (typeof chunk === "string") return Buffer.from(chunk, "utf8");
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength);
}

/**
 * One upstream event: its data, and where its bytes lie in the batch's chunk
 * when they can go to the client as they are (`start` < 0 when they cannot).
 * Such an event was one data line, so its data holds no CR or LF.
 */
export interface SseEvent {
  data: string;
  start: number;
  end: number;
}

/** The events one upstream chunk completed, in order; `chunk` holds the bytes of those that pass as they are. */
export interface SseBatch {
  chunk: Buffer;
  events: SseEvent[];
}

const NO_BYTES = Buffer.alloc(0);

/** Events with no upstream bytes behind them (made by the router, or from a backend that only yields payloads): all go out as text. */
export function textBatch(payloads: readonly string[]): SseBatch {
  return { chunk: NO_BYTES, events: payloads.map((data) => ({ data, start: -1, end: -1 })) };
}

/**
 * Yields each event's data (events without a data line are not events).
 * An event still open when the stream ends is discarded, as the spec says.
 * Throws UpstreamTooLarge when a line or an event's data exceeds the limit.
 */
export async function* parseSse(chunks: AsyncIterable<Uint8Array | string>, opts: Partial<SseOptions> = {}): AsyncGenerator<string> {
  for await (const batch of parseSseBatches(chunks, opts)) for (const ev of batch.events) yield ev.data;
}

/**
 * The parser behind parseSse, one batch per upstream chunk that completed at
 * least one event. An event's bytes pass as they are only when they are
 * exactly what the router would write for it — one `data: ` line and the
 * blank line, both ending in LF, all inside this chunk (no BOM): the client's
 * parser then reads from them the very event the router read. Any other
 * shape (CR or CRLF endings, several data lines, a comment or field inside
 * the event, an event split across chunks) goes out re-written as text.
 * Comments and fields before an event's data line are dropped, as before.
 */
export async function* parseSseBatches(chunks: AsyncIterable<Uint8Array | string>, opts: Partial<SseOptions> = {}): AsyncGenerator<SseBatch> {
  const splitter = new SseSplitter(opts);
  for await (const raw of chunks) {
    const batch = splitter.feed(raw);
    if (batch) yield batch;
  }
}

/**
 * parseSseBatches' parser, fed one chunk at a time: the events each chunk
 * completes, with the state between chunks (a line or an event carried
 * over) kept here. Throws UpstreamTooLarge as parseSseBatches does.
 */
export class SseSplitter {
  private readonly max: number;
  private readonly who: string;
  // Pieces of a line that began in an earlier chunk (copies: chunks are not ours to keep).
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  private data = "";
  private dataBytes = 0;
  private hasData = false;
  // A CR ended the last chunk: an LF starting the next belongs to it.
  private skipLf = false;
  private atStart = true;
  // Whether the open event's bytes are still in the canonical shape.
  private canonical = true;

  constructor(opts: Partial<SseOptions> = {}) {
    this.max = opts.maxEventBytes ?? DEFAULT_MAX_EVENT_BYTES;
    this.who = opts.label ?? "upstream";
  }

  private tooLarge(what: string): UpstreamTooLarge {
    return new UpstreamTooLarge(`${this.who} sent an SSE ${what} over the limit of ${this.max} bytes`, this.max);
  }

  /** The events this chunk completed (undefined: none). */
  feed(raw: Uint8Array | string): SseBatch | undefined {
    const max = this.max;
    let { pending, pendingBytes, data, dataBytes, hasData, skipLf, atStart, canonical } = this;
    // Where the open event's bytes start in this chunk.
    let evStart = 0;
    const chunk = asBuffer(raw);
    const n = chunk.length;
    let events: SseEvent[] | undefined;
    let pos = 0;
    if (skipLf && n > 0) {
      if (chunk[0] === LF) pos = 1;
      skipLf = false;
    }
    // An event open across the chunk boundary has bytes in an earlier chunk
    // (a line carried over is marked by its own assembly below).
    if (hasData) canonical = false;
    evStart = pos;
    // Next LF and CR at or after pos, found once each (-1: none left in this chunk; -2: not looked for yet).
    let lf = -2;
    let cr = -2;
    while (pos < n) {
      if (lf !== -1 && lf < pos) lf = chunk.indexOf(LF, pos);
      if (cr !== -1 && cr < pos) cr = chunk.indexOf(CR, pos);
      const eol = lf === -1 ? cr : cr === -1 ? lf : lf < cr ? lf : cr;
      if (eol === -1) {
        pendingBytes += n - pos;
        if (pendingBytes > max) throw this.tooLarge("line");
        pending.push(Buffer.from(chunk.subarray(pos)));
        break;
      }
      // The line is buf[start, end); `next` is where the following one starts.
      let buf = chunk;
      let start = pos;
      let end = eol;
      let next = eol + 1;
      // Only a plain LF ending keeps the event's bytes passable.
      let plain = chunk[eol] === LF;
      if (!plain) {
        if (next < n) {
          if (chunk[next] === LF) next++;
        } else skipLf = true;
      }
      if (pendingBytes > 0) {
        if (pendingBytes + (eol - pos) > max) throw this.tooLarge("line");
        pending.push(chunk.subarray(pos, eol));
        buf = Buffer.concat(pending);
        start = 0;
        end = buf.length;
        pending = [];
        pendingBytes = 0;
        plain = false;
      } else if (eol - pos > max) throw this.tooLarge("line");
      pos = next;
      if (atStart) {
        atStart = false;
        if (end - start >= 3 && buf[start] === 0xef && buf[start + 1] === 0xbb && buf[start + 2] === 0xbf) {
          start += 3;
          plain = false;
        }
      }

      // One line: blank dispatches, ":" is a comment, otherwise "field[: value]".
      if (start === end) {
        if (hasData) {
          (events ??= []).push(canonical && plain ? { data, start: evStart, end: next } : { data, start: -1, end: -1 });
          data = "";
          dataBytes = 0;
          hasData = false;
        }
        evStart = next;
        canonical = true;
        continue;
      }
      // Only `data` matters: the name is exactly those four bytes, then a colon or the end.
      const isData = buf[start] !== COLON && end - start >= 4 && buf[start] === 0x64 && buf[start + 1] === 0x61 && buf[start + 2] === 0x74 && buf[start + 3] === 0x61;
      if (!isData) {
        // Dropped: before the data line the event's bytes start after it; inside, they cannot pass.
        if (hasData) canonical = false;
        else {
          evStart = next;
          canonical = true;
        }
        continue;
      }
      let from = start + 4;
      if (from < end) {
        if (buf[from] !== COLON) {
          if (hasData) canonical = false;
          else {
            evStart = next;
            canonical = true;
          }
          continue;
        }
        from++;
        if (from < end && buf[from] === SPACE) from++;
        else plain = false;
      } else plain = false;
      if (hasData || !plain) canonical = false;
      dataBytes += end - from + (hasData ? 1 : 0);
      if (dataBytes > max) throw this.tooLarge("event");
      // A BOM inside a value is kept (Buffer decoding never strips one).
      const value = from < end ? buf.toString("utf8", from, end) : "";
      data = hasData ? `${data}\n${value}` : value;
      hasData = true;
    }
    this.pending = pending;
    this.pendingBytes = pendingBytes;
    this.data = data;
    this.dataBytes = dataBytes;
    this.hasData = hasData;
    this.skipLf = skipLf;
    this.atStart = atStart;
    this.canonical = canonical;
    return events ? { chunk, events } : undefined;
  }
}

/** The relay's reader of an upstream's batches: next() for the next one, return() when it stops reading. */
export interface SseBatchReader extends AsyncIterableIterator<SseBatch> {
  return(): Promise<IteratorResult<SseBatch>>;
}

/** Batches parsed ahead of the relay at most, before the body is paused. */
const MAX_QUEUED_BATCHES = 16;

/**
 * What feeds an SseBatchQueue: it holds off while chunk() says false (the
 * queue is full: the upstream's socket applies backpressure), and is told
 * to go on, or to stop for good.
 */
export interface BatchSource {
  /** Room again after chunk() said false. */
  resume(): void;
  /** The reader let go before the end: drop the rest. */
  stop(): void;
  /** Called once, when the queue has ended or failed (listeners to take off). */
  finished?(): void;
}

export interface SseQueueOptions extends Partial<SseOptions> {
  /**
   * What a failure (the body's, a line over the limit) becomes before
   * next() rejects with it: the caller's own error kinds, mapped once
   * where the failure happens rather than by a catch around every next().
   */
  mapError?: (err: unknown) => unknown;
}

/**
 * An upstream body's SSE batches, pushed in chunk by chunk (chunk(), end(),
 * fail()) and read by the relay (next()), with nothing per chunk but the
 * batch: a for-await over a stream would cost an iterator step (a read, an
 * end-of-stream watch, a promise) and a generator's resumption on every
 * chunk — for a token stream, every token. Batches wait here while the
 * relay writes, at most a few: past them the source is paused.
 */
export class SseBatchQueue implements SseBatchReader {
  private readonly splitter: SseSplitter;
  private readonly mapError: ((err: unknown) => unknown) | undefined;
  private readonly queued: SseBatch[] = [];
  private ended = false;
  private failure: unknown = undefined;
  private paused = false;
  private waiter: { resolve: (r: IteratorResult<SseBatch>) => void; reject: (err: unknown) => void } | undefined;

  constructor(
    private readonly source: BatchSource,
    opts: SseQueueOptions = {},
  ) {
    this.splitter = new SseSplitter(opts);
    this.mapError = opts.mapError;
  }

  /** A chunk of the body; false when the source should pause (the queue is full, or it failed on this chunk). */
  chunk(chunk: Buffer): boolean {
    if (this.ended || this.failure !== undefined) return false;
    let batch: SseBatch | undefined;
    try {
      batch = this.splitter.feed(chunk);
    } catch (err) {
      this.fail(err);
      this.source.stop();
      return false;
    }
    if (!batch) return true;
    this.queued.push(batch);
    this.settle();
    if (this.queued.length < MAX_QUEUED_BATCHES) return true;
    this.paused = true;
    return false;
  }

  /** The body ended (whatever was queued is still read first). */
  end(): void {
    if (this.ended || this.failure !== undefined) return;
    this.ended = true;
    this.source.finished?.();
    this.settle();
  }

  /** The body failed: next() rejects with it (mapped) once the queue is read. */
  fail(err: unknown): void {
    if (this.failure !== undefined || this.ended) return;
    this.failure = this.mapError ? this.mapError(err) : err;
    this.source.finished?.();
    this.settle();
  }

  get done(): boolean {
    return this.ended || this.failure !== undefined;
  }

  private settle(): void {
    const w = this.waiter;
    if (!w) return;
    if (this.queued.length > 0) {
      this.waiter = undefined;
      w.resolve({ value: this.queued.shift()!, done: false });
    } else if (this.failure !== undefined) {
      this.waiter = undefined;
      w.reject(this.failure);
    } else if (this.ended) {
      this.waiter = undefined;
      w.resolve({ value: undefined, done: true });
    }
  }

  next(): Promise<IteratorResult<SseBatch>> {
    if (this.queued.length > 0) {
      const value = this.queued.shift()!;
      if (this.paused && this.queued.length < MAX_QUEUED_BATCHES && !this.done) {
        this.paused = false;
        this.source.resume();
      }
      return Promise.resolve({ value, done: false });
    }
    if (this.failure !== undefined) return Promise.reject(this.failure);
    if (this.ended) return Promise.resolve({ value: undefined, done: true });
    if (this.paused) {
      this.paused = false;
      this.source.resume();
    }
    return new Promise<IteratorResult<SseBatch>>((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
  }

  /** The relay stopped reading: the source is let go (stopped) unless it ended. */
  return(): Promise<IteratorResult<SseBatch>> {
    if (!this.done) {
      this.fail(new Error("stopped reading"));
      this.source.stop();
    }
    this.queued.length = 0;
    return Promise.resolve({ value: undefined, done: true });
  }

  [Symbol.asyncIterator](): this {
    return this;
  }
}

/** One event for the client as text; `payload` must hold no line break (the relay sends JSON it serialised or validated as one line). */
export function sseText(payload: string): string {
  return `data: ${payload}\n\n`;
}

/** One event for the client as bytes. */
export function sseEvent(payload: string): Uint8Array {
  return encoder.encode(sseText(payload));
}

export const SSE_DONE = "[DONE]";
