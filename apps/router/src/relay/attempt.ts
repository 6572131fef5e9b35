// One attempt on one backend: its abort controller and phase timer (connect
// and headers, first token, idle, the request's total deadline), how it ends
// (cleanup, the scorer's report, metrics), and how its failure becomes the
// client's error.
import { ApiError } from "../errors.ts";
import type { Backend, UpstreamResponse } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { Abort, onAbort, type AbortLike } from "../abort.ts";
import { UpstreamTooLarge } from "../backends/transport.ts";
import type { AttemptOutcome } from "../routing/health.ts";
import type { RelayContext } from "./context.ts";
import { PhaseTimer } from "./deadlines.ts";
import type { AttemptReporter } from "../routing/scorer.ts";

export interface Attempt {
  /** Aborts this attempt's upstream call (passed to backend.open as its signal). */
  controller: Abort;
  timer: PhaseTimer;
  cleanup(): void;
  /** performance.now() when the attempt started. */
  startedAt: number;
  /** Routing feedback (ctx.observe), once per attempt. */
  report(outcome: AttemptOutcome, extra?: { ttftMs?: number; failure?: UpstreamFailure }): void;
}

/**
 * The router was stopped and router.drainMs passed while this request ran:
 * it ends now — a status before the first byte, one SSE error event after
 * it, never a clean close. Not the backend's fault, not retried here.
 */
export class RouterShuttingDown extends UpstreamFailure {
  constructor() {
    super("timeout", "the router is shutting down: router.drainMs passed before this request ended; retry it", false);
  }
}

/** How an attempt's failure counts for routing: the client's doing and our own total deadline are not the backend's fault. */
export function outcomeOf(f: UpstreamFailure): AttemptOutcome {
  if (f.kind === "aborted" || f.kind === "client_error") return "neutral";
  if (f.kind === "timeout" && !f.retryable) return "neutral";
  return "failed";
}

/** The callbacks waiting on an AbortSignal (the router's shutdown), behind a single listener of its own. */
const waiting = new WeakMap<AbortSignal, Set<() => void>>();

/**
 * Calls `fn` when `signal` aborts; returns the undo. Every attempt waits on
 * the same shutdown signal: one listener on it and a Set here, rather than
 * an EventTarget listener added and removed per attempt (whose removal
 * walks every other attempt's). A client's signal is an Abort, whose own
 * listener list is cheaper than a Set and a WeakMap entry per request.
 */
export function onAbortOf(signal: AbortLike, fn: () => void): () => void {
  if (signal instanceof Abort) return onAbort(signal, fn);
  let set = waiting.get(signal);
  if (!set) {
    const fns = (set = new Set());
    waiting.set(signal, fns);
    onAbort(signal, () => {
      const all = [...fns];
      fns.clear();
      for (const f of all) f();
    });
  }
  const fns = set;
  fns.add(fn);
  return () => fns.delete(fn);
}

/**
 * An attempt under way. A class: an attempt lives as long as its stream, and
 * what it keeps is copied by every scavenge that finds the stream young —
 * methods shared by every attempt, not five closures and their context each
 * (issue 14).
 */
class RunningAttempt implements Attempt {
  readonly controller = new Abort();
  readonly timer: PhaseTimer;
  readonly startedAt = performance.now();
  private readonly offClient: (() => void) | undefined;
  private readonly offShutdown: (() => void) | undefined;

  constructor(
    ctx: RelayContext,
    private readonly reporter: AttemptReporter | undefined,
  ) {
    const { controller } = this;
    // The total deadline spans every attempt, counted from the request's arrival;
    // it is not the backend's fault (not retried), a phase's deadline is.
    this.timer = new PhaseTimer(
      (err) => controller.abort(new UpstreamFailure("timeout", err.message, err.phase !== "total")),
      ctx.startedAt + ctx.deadlines.totalMs,
      ctx.deadlines.totalMs,
    );
    const onClientAbort = () => controller.abort(new UpstreamFailure("aborted", "client went away", false));
    // Through onAbortOf's Set: the client's signal gets one listener for all its attempts, never removed one by one.
    if (ctx.signal.aborted) onClientAbort();
    else this.offClient = onAbortOf(ctx.signal, onClientAbort);
    const onShutdown = () => controller.abort(new RouterShuttingDown());
    if (ctx.shutdown?.aborted) onShutdown();
    else if (ctx.shutdown) this.offShutdown = onAbortOf(ctx.shutdown, onShutdown);
  }

  cleanup(): void {
    this.timer.clear();
    this.offClient?.();
    this.offShutdown?.();
  }

  // The scorer's reporter counts once, whichever path ends the attempt first.
  report(outcome: AttemptOutcome, extra: { ttftMs?: number; failure?: UpstreamFailure } = {}): void {
    this.reporter?.({ outcome, durationMs: performance.now() - this.startedAt, ttftMs: extra.ttftMs, failure: extra.failure?.kind, status: extra.failure?.status });
  }
}

export function startAttempt(ctx: RelayContext, backend?: Backend): Attempt {
  return new RunningAttempt(ctx, backend ? ctx.observe?.(backend) : undefined);
}

/** The reason an attempt was aborted, if it was. */
export function abortReason(a: Attempt): UpstreamFailure | undefined {
  if (!a.controller.aborted) return undefined;
  const r = a.controller.reason;
  if (r instanceof UpstreamFailure) return r;
  return new UpstreamFailure("aborted", "request aborted", false);
}

export function toFailure(err: unknown, a: Attempt): UpstreamFailure {
  return abortReason(a) ?? (err instanceof UpstreamFailure ? err : new UpstreamFailure("protocol", String((err as Error)?.message ?? err), true));
}

export function failureToApiError(f: UpstreamFailure): ApiError {
  // The worker saw a newer lease's token: this lease was superseded.
  if (f.kind === "client_error" && f.status === 409 && f.upstreamError?.code === "stale_fencing_token") {
    return new ApiError("stale_fencing_token", f.upstreamError.message ?? f.message);
  }
  if (f.kind === "client_error") {
    const code = f.status === 404 ? "upstream_not_found" : f.status === 413 ? "upstream_request_too_large" : f.status === 422 ? "upstream_unprocessable" : "upstream_invalid_request";
    return new ApiError(code, f.upstreamError?.message ?? f.message, f.upstreamError?.param ?? null);
  }
  if (f instanceof UpstreamTooLarge) return new ApiError("upstream_response_too_large", f.message);
  if (f instanceof RouterShuttingDown) return new ApiError("router_shutting_down", f.message, null, { "retry-after": "1" });
  if (f.kind === "timeout") return new ApiError("upstream_timeout", f.message);
  if (f.kind === "aborted") return new ApiError("upstream_timeout", f.message);
  if (f.busy) {
    const headers = { "retry-after": String(f.busy.retryAfterS ?? 1) };
    return f.busy.reason === "rate_limited" ? new ApiError("upstream_rate_limited", f.message, null, headers) : new ApiError("upstream_overloaded", f.message, null, headers);
  }
  return new ApiError("bad_upstream", f.message);
}

/** Ends an attempt that failed before its first byte reached the client: timers off, upstream closed, outcome reported and counted. */
export function endFailedAttempt(err: unknown, a: Attempt, up: UpstreamResponse | undefined, backend: Backend, ctx: RelayContext): UpstreamFailure {
  const failure = toFailure(err, a);
  a.cleanup();
  up?.abort();
  a.report(outcomeOf(failure), { failure });
  ctx.metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: failure.kind });
  return failure;
}
