// Relaying a stream: every upstream event is checked before it is relayed
// (`[DONE]` or a JSON object, sent as one `data:` line the router
// validated), the pump writes event by event with backpressure, and after the
// first byte a failure ends the stream with exactly one SSE error event —
// unless the request opted in to resume, then the stream continues on
// another free worker (openContinuation).
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import { ApiError, errorBody } from "../errors.ts";
import type { Backend, InferencePath, UpstreamResponse } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { type Usage, usageFrom } from "../backends/usage.ts";
import { endFailedAttempt, failureToApiError, outcomeOf, startAttempt, toFailure, type Attempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";
import type { StreamResume } from "./resume.ts";
import { SSE_DONE, sseText } from "./sse.ts";

const encoder = new TextEncoder();


/** One upstream SSE payload, checked: `obj` is the JSON object it holds (none for `[DONE]`), `line` what the client gets. */
export interface CheckedEvent {
  line: string;
  obj?: Record<string, unknown>;
}

export const DONE_EVENT: CheckedEvent = { line: SSE_DONE };
export const lineBreak = /[\r\n]/;

/**
 * An upstream's event is untrusted: anything but `[DONE]` or a JSON object
 * is a protocol failure of that upstream. Data spread over several lines (or
 * JSON with line breaks between tokens) is serialised again as one line, so
 * the client's parser can only ever see the event the router saw.
 */
export function checkEvent(backend: Backend, payload: string): CheckedEvent {
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
  return { line: lineBreak.test(payload) ? JSON.stringify(obj) : payload, obj: obj as Record<string, unknown> };
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
  events: AsyncGenerator<string>;
  up: Pick<UpstreamResponse, "abort">;
  a: Attempt;
  /** Attempt start → its first event. */
  ttftMs: number;
  /** Continuations' payloads are rewritten to look like the first upstream's. */
  rewrite?: (payload: string) => string;
  /** A paid attempt's progress report (BudgetVerdict.progress): the usage seen goes beside its intent. */
  progress?: (p: { generationId?: string; usage?: Usage }) => void;
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
    const payloads = cont.payloads;
    const events = (async function* () {
      yield* payloads.slice(1);
    })();
    return { leg: { backend: failed, events, up: { abort: () => {} }, a: startAttempt(ctx), ttftMs: 0 }, first: checkEvent(failed, payloads[0]!) };
  }
  for (const backend of candidates) {
    if (ctx.signal.aborted) return undefined;
    if (tried.has(backend) || backend.paid || !backend.supports(path)) continue;
    tried.add(backend);
    const a = startAttempt(ctx, backend);
    a.timer.arm("headers", deadlines.headersMs);
    let up: UpstreamResponse | undefined;
    try {
      up = await backend.open(cont.req, ctx, a.controller.signal);
      const { events, first } = await firstEvent(backend, up, a, deadlines.firstTokenMs);
      metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
      ctx.log.info("stream resumed", { from: failed.id, on: backend.id, produced: state.produced, resume: state.resumes });
      return { leg: { backend, events, up, a, ttftMs: performance.now() - a.startedAt, rewrite: (p) => state.rewrite(p) }, first };
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
export async function firstEvent(backend: Backend, up: UpstreamResponse, a: Attempt, firstTokenMs: number): Promise<{ events: AsyncGenerator<string>; first: CheckedEvent }> {
  a.timer.arm("first_token", firstTokenMs);
  const events = up.events();
  const next = await events.next();
  if (next.done) throw new UpstreamFailure("protocol", `${backend.id} closed the stream before any event`, true);
  const first = checkEvent(backend, next.value);
  const err = upstreamErrorEvent(first);
  if (err) throw new UpstreamFailure("bad_status", `${backend.id} failed before the first token: ${err.message ?? "error event"}`, true);
  return { events, first };
}

export function relayStream(first: Leg, firstEv: CheckedEvent, ctx: RelayContext, firstTokenAt: number, resume?: ResumeRun): Response {
  const { deadlines, metrics } = ctx;
  const backend = first.backend;
  let leg = first;
  let sawDone = false;
  let finished = false;
  let usage: Usage | undefined;
  let chunks = 0;
  const finish = (status: "ok" | "error" | "client_cancelled" | "timeout", failure?: UpstreamFailure) => {
    if (finished) return;
    finished = true;
    leg.a.cleanup();
    leg.a.report(failure ? outcomeOf(failure) : status === "ok" ? "ok" : status === "client_cancelled" ? "neutral" : "failed", { ttftMs: leg.ttftMs, ...(failure ? { failure } : {}) });
    metrics.duration.observe({ route: ctx.route }, (performance.now() - ctx.startedAt) / 1000);
    ctx.settle?.({ backend: leg.backend, status, usage, firstTokenAt, chunks });
  };
  /** Accounts one checked event (from the parse checkEvent did); false when it must not reach the client. */
  const account = (ev: CheckedEvent): boolean => {
    const parsed = ev.obj;
    if (!parsed) {
      sawDone = true;
      return true;
    }
    chunks++;
    if (parsed.usage) {
      const u = usageFrom(parsed, ev.line);
      if (u) {
        usage = u;
        leg.progress?.({ usage: u });
        metrics.tokens.inc({ kind: "prompt" }, u.prompt);
        metrics.tokens.inc({ kind: "completion" }, u.completion);
        // We asked for usage on the client's behalf: keep its stream as it expects.
        if (ctx.stripUsage && Array.isArray(parsed.choices) && parsed.choices.length === 0) return false;
      }
    }
    resume?.state.track(ev.line);
    return true;
  };
  /** A continuation's event, made to look like the first upstream's (only legs that rewrite pay a second parse). */
  const rewritten = (ev: CheckedEvent): CheckedEvent => {
    if (!leg.rewrite || !ev.obj) return ev;
    const line = leg.rewrite(ev.line);
    return line === ev.line ? ev : { line, obj: JSON.parse(line) as Record<string, unknown> };
  };
  const errorEvent = (err: ApiError) => sseText(JSON.stringify(errorBody(err, ctx.requestId)));
  /** Client went away: abort the upstream so the worker frees the slot. */
  const clientGone = () => {
    leg.a.controller.abort(new UpstreamFailure("aborted", "client went away", false));
    finish("client_cancelled");
    leg.up.abort();
  };
  /**
   * The current upstream broke mid-way: for requests that opted in, continue
   * on another worker. True when the relay goes on (from the new leg).
   */
  const resumeAfter = async (failure: UpstreamFailure, write: (text: string) => void | Promise<void>): Promise<boolean> => {
    if (!resume || !failure.retryable || ctx.signal.aborted || finished) return false;
    const broken = leg;
    broken.a.cleanup();
    broken.up.abort();
    broken.a.report(outcomeOf(failure), { ttftMs: broken.ttftMs, failure });
    ctx.log.warn("stream broke mid-way; resuming", { backend: broken.backend.id, kind: failure.kind, error: failure.message, produced: resume.state.produced });
    const next = await resume.open(broken.backend);
    if (next && finished) {
      // The client left while the continuation opened.
      next.leg.a.cleanup();
      next.leg.up.abort();
      next.leg.a.report("neutral");
    }
    if (!next || finished) {
      metrics.streamResumes.inc({ outcome: "failed" });
      return false;
    }
    metrics.streamResumes.inc({ outcome: "resumed" });
    leg = next.leg;
    const ev = rewritten(next.first);
    if (account(ev)) await write(sseText(ev.line));
    leg.a.timer.arm("idle", deadlines.idleMs);
    return true;
  };
  account(firstEv);
  leg.a.timer.arm("idle", deadlines.idleMs);

  // Relays events until the upstream ends or fails. `write` resolves when the
  // client can take more (backpressure); after the first byte a failure ends
  // the stream with exactly one error event (unless it resumes elsewhere).
  const pump = async (write: (text: string) => void | Promise<void>, close: () => void) => {
    try {
      await write(sseText(firstEv.line));
      for (;;) {
        let next: IteratorResult<string>;
        let ev: CheckedEvent = DONE_EVENT;
        try {
          next = await leg.events.next();
          if (!next.done && !sawDone) ev = checkEvent(leg.backend, next.value);
        } catch (err) {
          if (resume && (await resumeAfter(toFailure(err, leg.a), write))) continue;
          throw err;
        }
        if (next.done) {
          if (!sawDone && resume && (await resumeAfter(new UpstreamFailure("protocol", `${leg.backend.id} ended the stream without [DONE]`, true), write))) continue;
          finish(sawDone ? "ok" : "error");
          if (!sawDone) {
            metrics.errors.inc({ code: "bad_upstream" });
            await write(errorEvent(new ApiError("bad_upstream", `${leg.backend.id} ended the stream without [DONE]`)));
          }
          return close();
        }
        leg.a.timer.refresh();
        // After [DONE] keep reading, relaying nothing: the upstream ends right
        // away and its connection goes back to the pool fully read.
        if (sawDone) continue;
        const upstreamErr = upstreamErrorEvent(ev);
        if (upstreamErr) {
          if (resume && (await resumeAfter(new UpstreamFailure("bad_status", `${leg.backend.id}: ${upstreamErr.message ?? "stream failed"}`, true), write))) continue;
          // The worker already ended the stream with its error event: relay
          // it in our shape as the one error event, and stop.
          finish("error");
          leg.up.abort();
          metrics.errors.inc({ code: "bad_upstream" });
          await write(errorEvent(new ApiError("bad_upstream", `${leg.backend.id}: ${upstreamErr.message ?? "stream failed"}`)));
          return close();
        }
        const out = rewritten(ev);
        if (account(out)) await write(sseText(out.line));
      }
    } catch (err) {
      const failure = toFailure(err, leg.a);
      finish(failure.kind === "aborted" ? "client_cancelled" : failure.kind === "timeout" ? "timeout" : "error", failure);
      leg.up.abort();
      // The client is gone: nobody is left to read an error event.
      if (failure.kind === "aborted") return close();
      const apiErr = failureToApiError(failure);
      metrics.errors.inc({ code: apiErr.code });
      ctx.log.warn("stream failed after first byte", { backend: leg.backend.id, kind: failure.kind, error: failure.message });
      try {
        await write(errorEvent(apiErr));
      } catch {
        // client gone meanwhile
      }
      close();
    }
  };

  const headers = {
    "content-type": "text/event-stream; charset=utf-8",
    "cache-control": "no-cache",
    connection: "keep-alive",
    "x-request-id": ctx.requestId,
    "x-switchyard-backend": backend.id,
    ...ctx.headers,
  };
  const out = ctx.outgoing;
  if (out) {
    // On Node, write straight to the socket: one write per event, as text
    // (encoded once, by the socket's own write), no WHATWG stream machinery
    // in between (the relay's hot loop).
    out.writeHead(200, headers);
    out.flushHeaders();
    out.once("close", () => {
      if (!out.writableFinished) clientGone();
    });
    const write = (text: string): void | Promise<void> => {
      if (out.destroyed) throw new UpstreamFailure("aborted", "client went away", false);
      if (out.write(text)) return;
      return new Promise<void>((resolve) => {
        const done = () => {
          out.off("drain", done);
          out.off("close", done);
          resolve();
        };
        out.once("drain", done);
        out.once("close", done);
      });
    };
    void pump(write, () => out.end());
    return RESPONSE_ALREADY_SENT;
  }
  const stream = new ReadableStream<Uint8Array>({
    start(controller) {
      void pump(
        (text) => controller.enqueue(encoder.encode(text)),
        () => {
          try {
            controller.close();
          } catch {
            // cancelled meanwhile
          }
        },
      );
    },
    cancel: clientGone,
  });
  return new Response(stream, { status: 200, headers });
}
