// Relaying a stream: every upstream event is checked before it is relayed
// (`[DONE]` or a JSON object, sent as one `data:` line the router
// validated). The events one upstream chunk completed go out in one write,
// with backpressure: an event that passes unchanged as the upstream's own
// bytes (a slice of its chunk, sse.ts parseSseBatches), any other as the
// text the router wrote. Only whole events are ever written, so after the
// first byte a failure ends the stream with exactly one SSE error event —
// unless the request opted in to resume, then the stream continues on
// another free worker (openContinuation).
import type { ServerResponse } from "node:http";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import { ApiError, errorBody } from "../errors.ts";
import type { Backend, InferencePath, UpstreamResponse } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { type Usage, usageFrom } from "../backends/usage.ts";
import { endFailedAttempt, failureToApiError, outcomeOf, startAttempt, toFailure, type Attempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";
import { flattenHead, pieceWriter, type PieceWrite } from "./chunked.ts";
import type { StreamResume } from "./resume.ts";
import { SSE_DONE, type SseBatch, type SseEvent, sseText, textBatch } from "./sse.ts";

const encoder = new TextEncoder();


/** One upstream SSE payload, checked: `obj` is the JSON object it holds (none for `[DONE]`), `line` what the client gets. */
export interface CheckedEvent {
  line: string;
  obj?: Record<string, unknown>;
}

export const DONE_EVENT: CheckedEvent = { line: SSE_DONE };
const lineBreak = /[\r\n]/;

/**
 * An upstream's event is untrusted: anything but `[DONE]` or a JSON object
 * is a protocol failure of that upstream. Data spread over several lines (or
 * JSON with line breaks between tokens) is serialised again as one line, so
 * the client's parser can only ever see the event the router saw.
 */
export function checkEvent(backend: Backend, e: SseEvent): CheckedEvent {
  const payload = e.data;
  if (payload === SSE_DONE) return DONE_EVENT;
  let obj: unknown;
  try {
    obj = JSON.parse(payload);
  } catch {
    obj = undefined;
  }
  if (obj === null || typeof obj !== "object" || Array.isArray(obj)) {
    throw new UpstreamFailure("protocol", `${backend.id} sent an SSE event that is not a JSON object`, true);
  }
  // An event that came as one canonical line (its bytes pass as they are, start ≥ 0) holds no line break: no scan for one.
  return { line: e.start < 0 && lineBreak.test(payload) ? JSON.stringify(obj) : payload, obj: obj as Record<string, unknown> };
}

/** A worker's own `{"error":…}` event, if this is one. */
export function upstreamErrorEvent(ev: CheckedEvent): { message?: string } | undefined {
  const e = ev.obj?.error;
  if (e === undefined || e === null) return undefined;
  const message = (e as { message?: unknown }).message;
  return { message: typeof message === "string" ? message.slice(0, 1_000) : undefined };
}


/** One upstream being relayed; a resumed stream moves to another. */
export interface Leg {
  backend: Backend;
  /** The upstream's events, one batch per upstream chunk, after `held`. */
  batches: AsyncIterator<SseBatch>;
  /**
   * The batch that held the leg's first event (events[0], checked already):
   * the rest go out in the same write. The pump takes it (takeHeld): a leg
   * keeps no batch once it is relayed.
   */
  held: SseBatch | undefined;
  up: Pick<UpstreamResponse, "abort">;
  a: Attempt;
  /** Attempt start → its first event. */
  ttftMs: number;
  /** Continuations' payloads are rewritten to look like the first upstream's. */
  rewrite?: (payload: string) => string;
  /** A paid attempt's progress report (BudgetVerdict.progress): the usage seen goes beside its intent. */
  progress?: (p: { generationId?: string; usage?: Usage }) => void;
}

/**
 * A leg's held batch, handed over once: the leg lets go of it. A stream's
 * relay lives as long as the stream; what it keeps past its use is copied by
 * every scavenge that finds the stream young.
 */
function takeHeld(leg: Leg): SseBatch {
  const held = leg.held!;
  leg.held = undefined;
  return held;
}

export interface ResumeRun {
  state: StreamResume;
  /** Opens a continuation after `failed` broke; undefined when no backend could take it. */
  open(failed: Backend): Promise<{ leg: Leg; first: CheckedEvent } | undefined>;
}

/**
 * A stream broke mid-way: continue it on the next untried free candidate.
 * Each try gets the usual headers and first-token deadlines; one that fails
 * before its first event moves on to the next.
 */
export async function openContinuation(
  state: StreamResume,
  candidates: Backend[],
  tried: Set<Backend>,
  failed: Backend,
  path: InferencePath,
  ctx: RelayContext,
): Promise<{ leg: Leg; first: CheckedEvent } | undefined> {
  const { deadlines, metrics } = ctx;
  if (state.resumes >= state.maxResumes) return undefined;
  const cont = state.continuation();
  if (cont.kind === "impossible") {
    ctx.log.info("stream not resumable", { why: cont.why });
    return undefined;
  }
  if (cont.kind === "finish") {
    // Nothing was left to generate: end the stream as the upstream would have.
    const held = textBatch(cont.payloads);
    const batches = (async function* (): AsyncGenerator<SseBatch> {})();
    return { leg: { backend: failed, batches, held, up: { abort: () => {} }, a: startAttempt(ctx), ttftMs: 0 }, first: checkEvent(failed, held.events[0]!) };
  }
  for (const backend of candidates) {
    if (ctx.signal.aborted) return undefined;
    if (tried.has(backend) || backend.paid || !backend.supports(path)) continue;
    tried.add(backend);
    const a = startAttempt(ctx, backend);
    a.timer.arm("headers", deadlines.headersMs);
    let up: UpstreamResponse | undefined;
    try {
      up = await backend.open(cont.req, ctx, a.controller);
      const { batches, held, first } = await firstEvent(backend, up, a, deadlines.firstTokenMs);
      metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
      ctx.log.info("stream resumed", { from: failed.id, on: backend.id, produced: state.produced, resume: state.resumes });
      return { leg: { backend, batches, held, up, a, ttftMs: performance.now() - a.startedAt, rewrite: (p) => state.rewrite(p) }, first };
    } catch (err) {
      const failure = endFailedAttempt(err, a, up, backend, ctx);
      ctx.log.warn("resume attempt failed", { backend: backend.id, kind: failure.kind, error: failure.message });
      if (!failure.retryable) return undefined;
    }
  }
  return undefined;
}


/**
 * Waits for a stream's first event within the first-token deadline. Nothing
 * has reached the client yet, so an upstream that closes or reports an error
 * before it is a failure the caller may fail over from.
 */
export async function firstEvent(backend: Backend, up: UpstreamResponse, a: Attempt, firstTokenMs: number): Promise<{ batches: AsyncIterator<SseBatch>; held: SseBatch; first: CheckedEvent }> {
  a.timer.arm("first_token", firstTokenMs);
  const batches = up.batches?.() ?? eventByEvent(up.events());
  const next = await batches.next();
  if (next.done) throw new UpstreamFailure("protocol", `${backend.id} closed the stream before any event`, true);
  const held = next.value;
  const first = checkEvent(backend, held.events[0]!);
  const err = upstreamErrorEvent(first);
  if (err) throw new UpstreamFailure("bad_status", `${backend.id} failed before the first token: ${err.message ?? "error event"}`, true);
  return { batches, held, first };
}

/** A backend that yields payloads only (translated upstreams): each is a batch of its own, sent as text. */
async function* eventByEvent(events: AsyncGenerator<string>): AsyncGenerator<SseBatch> {
  for await (const payload of events) yield textBatch([payload]);
}

/**
 * What the relay has to write, gathered until the next write: consecutive
 * slices of one upstream chunk join into one, and the write is one piece
 * (a slice as it is, or one buffer of all the pieces).
 */
export class Coalescer {
  private parts: Array<Uint8Array | string> = [];
  private chunk: Buffer | undefined;
  private start = 0;
  private end = 0;

  /** An event's upstream bytes, chunk[start, end). */
  bytes(chunk: Buffer, start: number, end: number): void {
    if (this.chunk === chunk && this.end === start) {
      this.end = end;
      return;
    }
    this.seal();
    this.chunk = chunk;
    this.start = start;
    this.end = end;
  }

  text(text: string): void {
    this.seal();
    this.parts.push(text);
  }

  /** All that was gathered, as one piece (undefined: nothing), and empty again. */
  take(): Uint8Array | string | undefined {
    // The usual write, a token's: one run of one chunk's bytes and no text.
    // It goes as it is, without an array gathered for it (a new one per write).
    if (this.parts.length === 0) return this.run();
    this.seal();
    const parts = this.parts;
    this.parts = [];
    if (parts.length === 1) return parts[0];
    return Buffer.concat(parts.map((p) => (typeof p === "string" ? Buffer.from(p, "utf8") : p)));
  }

  private seal(): void {
    const run = this.run();
    if (run) this.parts.push(run);
  }

  /** The run of bytes gathered (undefined: none), taken. */
  private run(): Buffer | undefined {
    const chunk = this.chunk;
    if (!chunk) return undefined;
    this.chunk = undefined;
    // The whole chunk (one event per chunk, a worker streaming tokens) goes as it is, without a view made of it.
    return this.start === 0 && this.end === chunk.length ? chunk : chunk.subarray(this.start, this.end);
  }
}

type StreamEnd = "ok" | "error" | "client_cancelled" | "timeout";

/**
 * Relays one stream to its client. A class, not a function of closures: a
 * stream's relay lives as long as the stream, and what it keeps is copied by
 * every scavenge that finds the stream young — its methods are shared by
 * every stream, a dozen closures and their context were a kilobyte each
 * (issue 14).
 */
class StreamRelay {
  private leg: Leg;
  private sawDone = false;
  private finished = false;
  private usage: Usage | undefined;
  private chunks = 0;
  private readonly pending = new Coalescer();
  /** The leg's first event until the pump has written it (then let go). */
  private firstOut: CheckedEvent | undefined;
  /** The batch being relayed (undefined between chunks) and the next event in it. */
  private batch: SseBatch | undefined;
  private i = 0;
  /** Node: the response written to directly, one piece per upstream chunk (chunked.ts). */
  private out: ServerResponse | undefined;
  private put: PieceWrite | undefined;
  private started = false;
  /** Elsewhere: the WHATWG stream's controller. */
  private controller: ReadableStreamDefaultController<Uint8Array> | undefined;

  constructor(
    first: Leg,
    firstEv: CheckedEvent,
    private readonly ctx: RelayContext,
    private readonly firstTokenAt: number,
    private readonly resume: ResumeRun | undefined,
  ) {
    this.leg = first;
    this.account(firstEv);
    first.a.timer.arm("idle", ctx.deadlines.idleMs);
    this.firstOut = firstEv;
  }

  private finish(status: StreamEnd, failure?: UpstreamFailure): void {
    if (this.finished) return;
    this.finished = true;
    const { leg, ctx } = this;
    leg.a.cleanup();
    leg.a.report(failure ? outcomeOf(failure) : status === "ok" ? "ok" : status === "client_cancelled" ? "neutral" : "failed", { ttftMs: leg.ttftMs, ...(failure ? { failure } : {}) });
    ctx.metrics.duration.observe({ route: ctx.route }, (performance.now() - ctx.startedAt) / 1000);
    ctx.settle?.({ backend: leg.backend, status, usage: this.usage, firstTokenAt: this.firstTokenAt, chunks: this.chunks });
  }

  /** Accounts one checked event (from the parse checkEvent did); false when it must not reach the client. */
  private account(ev: CheckedEvent): boolean {
    const parsed = ev.obj;
    if (!parsed) {
      this.sawDone = true;
      return true;
    }
    this.chunks++;
    if (parsed.usage) {
      const u = usageFrom(parsed, ev.line);
      if (u) {
        const { ctx } = this;
        this.usage = u;
        this.leg.progress?.({ usage: u });
        ctx.metrics.tokens.inc({ kind: "prompt" }, u.prompt);
        ctx.metrics.tokens.inc({ kind: "completion" }, u.completion);
        // We asked for usage on the client's behalf: keep its stream as it expects.
        if (ctx.stripUsage && Array.isArray(parsed.choices) && parsed.choices.length === 0) return false;
      }
    }
    this.resume?.state.track(ev.line);
    return true;
  }

  /** A continuation's event, made to look like the first upstream's (only legs that rewrite pay a second parse). */
  private rewritten(ev: CheckedEvent): CheckedEvent {
    const { rewrite } = this.leg;
    if (!rewrite || !ev.obj) return ev;
    const line = rewrite(ev.line);
    return line === ev.line ? ev : { line, obj: JSON.parse(line) as Record<string, unknown> };
  }

  private errorEvent(err: ApiError): string {
    return sseText(JSON.stringify(errorBody(err, this.ctx.requestId)));
  }

  /** An accepted event for the client: its upstream bytes when it passes unchanged (`out` is the checked event itself), else its text. */
  private emit(out: CheckedEvent, checked: CheckedEvent, chunk: Buffer, e: SseEvent): void {
    if (out === checked && e.start >= 0 && out.line === e.data) this.pending.bytes(chunk, e.start, e.end);
    else this.pending.text(sseText(out.line));
  }

  /** Client went away: abort the upstream so the worker frees the slot. */
  clientGone(): void {
    const { leg } = this;
    leg.a.controller.abort(new UpstreamFailure("aborted", "client went away", false));
    this.finish("client_cancelled");
    leg.up.abort();
  }

  /** One piece to the client; a promise when it pushes back (backpressure). */
  private write(piece: Uint8Array | string): void | Promise<void> {
    const out = this.out;
    if (!out) {
      this.controller!.enqueue(typeof piece === "string" ? encoder.encode(piece) : piece);
      return;
    }
    if (out.destroyed) throw new UpstreamFailure("aborted", "client went away", false);
    this.started = true;
    const wrote = this.put!(piece);
    if (wrote !== true) return wrote;
  }

  private close(): void {
    if (this.out) {
      this.out.end();
      return;
    }
    try {
      this.controller!.close();
    } catch {
      // cancelled meanwhile
    }
  }

  /** What was gathered, in one write. */
  private flush(): void | Promise<void> {
    const piece = this.pending.take();
    if (piece !== undefined) return this.write(piece);
  }

  /**
   * The current upstream broke mid-way: for requests that opted in, continue
   * on another worker. True when the relay goes on (from the new leg's
   * `held` batch, whose first event is already gathered). What was gathered
   * from the broken leg goes out first.
   */
  private async resumeAfter(failure: UpstreamFailure): Promise<boolean> {
    const { resume, ctx } = this;
    if (!resume || !failure.retryable || ctx.signal.aborted || this.finished) return false;
    await this.flush();
    const broken = this.leg;
    broken.a.cleanup();
    broken.up.abort();
    broken.a.report(outcomeOf(failure), { ttftMs: broken.ttftMs, failure });
    ctx.log.warn("stream broke mid-way; resuming", { backend: broken.backend.id, kind: failure.kind, error: failure.message, produced: resume.state.produced });
    const next = await resume.open(broken.backend);
    if (next && this.finished) {
      // The client left while the continuation opened.
      next.leg.a.cleanup();
      next.leg.up.abort();
      next.leg.a.report("neutral");
    }
    if (!next || this.finished) {
      ctx.metrics.streamResumes.inc({ outcome: "failed" });
      return false;
    }
    ctx.metrics.streamResumes.inc({ outcome: "resumed" });
    const leg = (this.leg = next.leg);
    const ev = this.rewritten(next.first);
    if (this.account(ev)) this.emit(ev, next.first, leg.held!.chunk, leg.held!.events[0]!);
    leg.a.timer.arm("idle", ctx.deadlines.idleMs);
    return true;
  }

  /** A failure resume can carry: on true the continuation's held batch is next (its first event sent already). */
  private async resumed(failure: UpstreamFailure): Promise<boolean> {
    if (!this.resume || !(await this.resumeAfter(failure))) return false;
    this.batch = takeHeld(this.leg);
    this.i = 1;
    return true;
  }

  /**
   * Relays events until the upstream ends or fails, one write per upstream
   * chunk. `write` resolves when the client can take more (backpressure);
   * after the first byte a failure ends the stream with exactly one error
   * event (unless it resumes elsewhere), after the whole events before it.
   */
  async pump(): Promise<void> {
    const { ctx } = this;
    const { metrics } = ctx;
    // The first event of a leg's held batch is gathered here; the rest of the batch is next.
    const held = takeHeld(this.leg);
    this.batch = held;
    this.i = 1;
    this.emit(this.firstOut!, this.firstOut!, held.chunk, held.events[0]!);
    this.firstOut = undefined;
    try {
      for (;;) {
        const batch = this.batch;
        if (batch === undefined || this.sawDone || this.i >= batch.events.length) {
          // This chunk's events are gathered: one write, then the next chunk
          // (awaited only when the client pushes back: an await of nothing
          // still costs a turn of the microtask queue, on every token).
          const wrote = this.flush();
          if (wrote) await wrote;
          // Relayed: not kept while the next chunk is awaited (every path below sets the next batch or ends).
          this.batch = undefined;
          let next: IteratorResult<SseBatch>;
          try {
            next = await this.leg.batches.next();
          } catch (err) {
            if (await this.resumed(toFailure(err, this.leg.a))) continue;
            throw err;
          }
          if (next.done) {
            if (!this.sawDone && (await this.resumed(new UpstreamFailure("protocol", `${this.leg.backend.id} ended the stream without [DONE]`, true)))) continue;
            this.finish(this.sawDone ? "ok" : "error");
            if (!this.sawDone) {
              metrics.errors.inc({ code: "bad_upstream" });
              this.pending.text(this.errorEvent(new ApiError("bad_upstream", `${this.leg.backend.id} ended the stream without [DONE]`)));
              await this.flush();
            }
            return this.close();
          }
          this.leg.a.timer.refresh();
          this.batch = next.value;
          this.i = 0;
          // After [DONE] keep reading, relaying nothing: the upstream ends right
          // away and its connection goes back to the pool fully read.
          continue;
        }
        const e = batch.events[this.i++]!;
        const leg = this.leg;
        let ev: CheckedEvent;
        try {
          ev = checkEvent(leg.backend, e);
        } catch (err) {
          if (await this.resumed(toFailure(err, leg.a))) continue;
          throw err;
        }
        const upstreamErr = upstreamErrorEvent(ev);
        if (upstreamErr) {
          if (await this.resumed(new UpstreamFailure("bad_status", `${leg.backend.id}: ${upstreamErr.message ?? "stream failed"}`, true))) continue;
          // The worker already ended the stream with its error event: relay
          // it in our shape as the one error event, and stop.
          this.finish("error");
          leg.up.abort();
          metrics.errors.inc({ code: "bad_upstream" });
          this.pending.text(this.errorEvent(new ApiError("bad_upstream", `${leg.backend.id}: ${upstreamErr.message ?? "stream failed"}`)));
          await this.flush();
          return this.close();
        }
        const out = this.rewritten(ev);
        if (this.account(out)) this.emit(out, ev, batch.chunk, e);
      }
    } catch (err) {
      const leg = this.leg;
      const failure = toFailure(err, leg.a);
      this.finish(failure.kind === "aborted" ? "client_cancelled" : failure.kind === "timeout" ? "timeout" : "error", failure);
      leg.up.abort();
      // The client is gone: nobody is left to read an error event.
      if (failure.kind === "aborted") return this.close();
      const apiErr = failureToApiError(failure);
      metrics.errors.inc({ code: apiErr.code });
      ctx.log.warn("stream failed after first byte", { backend: leg.backend.id, kind: failure.kind, error: failure.message });
      // The whole events accepted before the failure, then the one error event.
      this.pending.text(this.errorEvent(apiErr));
      try {
        await this.flush();
      } catch {
        // client gone meanwhile
      }
      this.close();
    }
  }

  /**
   * On Node, write straight to the socket: one write per upstream chunk
   * (its bytes as they are, or text encoded once by the socket's own
   * write), no WHATWG stream machinery in between (the relay's hot loop).
   * The head goes out with the first write (the pump writes the held
   * events before its first await): one packet for head + first token,
   * not a flushHeaders() write of its own ahead of it.
   */
  toNode(out: ServerResponse, headers: Record<string, string>): void {
    out.writeHead(200, headers);
    flattenHead(out);
    out.once("close", () => {
      if (!out.writableFinished) this.clientGone();
    });
    this.out = out;
    // After the first piece (with the head), each piece is one framed chunk in one socket write (chunked.ts).
    this.put = pieceWriter(out);
    void this.pump();
    // Nothing of the held batch was for the client (a stripped usage chunk): the head goes now all the same.
    if (!this.started && !out.destroyed) out.flushHeaders();
  }

  /** Elsewhere: a WHATWG stream the pump enqueues to. */
  toStream(): ReadableStream<Uint8Array> {
    return new ReadableStream<Uint8Array>({
      start: (controller) => {
        this.controller = controller;
        void this.pump();
      },
      cancel: () => this.clientGone(),
    });
  }
}

export function relayStream(first: Leg, firstEv: CheckedEvent, ctx: RelayContext, firstTokenAt: number, resume?: ResumeRun): Response {
  const relay = new StreamRelay(first, firstEv, ctx, firstTokenAt, resume);
  const headers = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    connection: "keep-alive",
    "x-request-id": ctx.requestId,
    "x-switchyard-backend": first.backend.id,
    ...ctx.headers,
  };
  if (ctx.outgoing) {
    relay.toNode(ctx.outgoing, headers);
    return RESPONSE_ALREADY_SENT;
  }
  return new Response(relay.toStream(), { status: 200, headers });
}
