// Dispatch one request over an ordered list of candidate backends and relay
// the answer. Failover happens only while nothing has reached the client: a
// stream's response is not started until its first upstream event arrived.
// After that, a failure ends the stream with exactly one SSE error event.
import { ApiError, errorBody } from "../errors.ts";
import type { Backend, BackendRequest, UpstreamResponse } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import type { RelayContext } from "./context.ts";
import { PhaseTimer } from "./deadlines.ts";
import { RESPONSE_ALREADY_SENT } from "@hono/node-server/utils/response";
import { SSE_DONE, sseEvent } from "./sse.ts";
import { type Usage, usageFrom } from "../backends/usage.ts";

export interface DispatchResult {
  response: Response;
  backendId: string;
  attempts: number;
}

interface Attempt {
  controller: AbortController;
  timer: PhaseTimer;
  cleanup(): void;
}

function startAttempt(ctx: RelayContext): Attempt {
  const controller = new AbortController();
  const timer = new PhaseTimer((err) => controller.abort(new UpstreamFailure("timeout", err.message, true)));
  const onClientAbort = () => controller.abort(new UpstreamFailure("aborted", "client went away", false));
  if (ctx.signal.aborted) onClientAbort();
  else ctx.signal.addEventListener("abort", onClientAbort, { once: true });
  // The total deadline spans every attempt, counted from the request's arrival.
  const left = ctx.deadlines.totalMs - (performance.now() - ctx.startedAt);
  const total = setTimeout(
    () => controller.abort(new UpstreamFailure("timeout", `total deadline of ${ctx.deadlines.totalMs} ms exceeded`, false)),
    Math.max(0, left),
  );
  return {
    controller,
    timer,
    cleanup: () => {
      timer.clear();
      clearTimeout(total);
      ctx.signal.removeEventListener("abort", onClientAbort);
    },
  };
}

/** The reason an attempt was aborted, if it was. */
function abortReason(a: Attempt): UpstreamFailure | undefined {
  if (!a.controller.signal.aborted) return undefined;
  const r = a.controller.signal.reason as unknown;
  if (r instanceof UpstreamFailure) return r;
  return new UpstreamFailure("aborted", "request aborted", false);
}

function toFailure(err: unknown, a: Attempt): UpstreamFailure {
  return abortReason(a) ?? (err instanceof UpstreamFailure ? err : new UpstreamFailure("protocol", String((err as Error)?.message ?? err), true));
}

function failureToApiError(f: UpstreamFailure): ApiError {
  if (f.kind === "client_error") {
    return new ApiError("upstream_invalid_request", f.upstreamError?.message ?? f.message, f.upstreamError?.param ?? null);
  }
  if (f.kind === "timeout") return new ApiError("upstream_timeout", f.message);
  if (f.kind === "aborted") return new ApiError("upstream_timeout", f.message);
  return new ApiError("bad_upstream", f.message);
}

/** A worker's own `{"error":…}` event, if this payload is one. */
function upstreamErrorEvent(payload: string): { message?: string; code?: string } | undefined {
  if (!payload.startsWith('{"error"')) return undefined;
  try {
    return (JSON.parse(payload) as { error?: { message?: string; code?: string } }).error ?? {};
  } catch {
    return {};
  }
}

export async function dispatch(candidates: Backend[], req: BackendRequest, ctx: RelayContext): Promise<DispatchResult> {
  const { metrics, deadlines } = ctx;
  let last: UpstreamFailure | undefined;
  let lastBackend: Backend | undefined;
  let attempts = 0;
  const settleFailure = (backend: Backend, f: UpstreamFailure) =>
    ctx.settle?.({ backend, status: f.kind === "timeout" ? "timeout" : f.kind === "aborted" ? "client_cancelled" : "error" });
  const skipped: Array<{ backend: Backend; reason: string }> = [];
  for (const backend of candidates) {
    if (attempts >= ctx.maxAttempts) break;
    if (ctx.signal.aborted) throw new ApiError("upstream_timeout", "client went away before dispatch");
    if (!backend.supports(req.path)) continue;
    let attemptReq = req;
    if (ctx.admit) {
      const admission = await ctx.admit(backend);
      if (!admission.ok) {
        skipped.push({ backend, reason: admission.reason });
        continue;
      }
      if (admission.patch) attemptReq = { ...req, body: { ...req.body, ...admission.patch } };
    }
    attempts++;
    const a = startAttempt(ctx);
    a.timer.arm("headers", deadlines.headersMs);
    let up: UpstreamResponse | undefined;
    try {
      up = await backend.open(attemptReq, ctx, a.controller.signal);
      if (req.raw) {
        const raw = up.raw();
        metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
        ctx.settle?.({ backend, status: "ok" });
        return { response: relayRaw(backend, raw, a, ctx), backendId: backend.id, attempts };
      }
      if (!req.stream) {
        const text = await up.text();
        a.cleanup();
        let body: unknown;
        try {
          body = JSON.parse(text);
        } catch {
          throw new UpstreamFailure("protocol", `${backend.id} answered with invalid JSON`, true);
        }
        metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
        const usage = usageFrom(body, text);
        if (usage) {
          metrics.tokens.inc({ kind: "prompt" }, usage.prompt);
          metrics.tokens.inc({ kind: "completion" }, usage.completion);
        }
        ctx.settle?.({ backend, status: "ok", usage });
        return {
          // The upstream's bytes as they came: parsed only to count tokens.
          response: new Response(text, { headers: { "content-type": "application/json", "x-request-id": ctx.requestId, "x-switchyard-backend": backend.id } }),
          backendId: backend.id,
          attempts,
        };
      }
      a.timer.arm("first_token", deadlines.firstTokenMs);
      const events = up.events();
      const first = await events.next();
      if (first.done) throw new UpstreamFailure("protocol", `${backend.id} closed the stream before any event`, true);
      const firstError = upstreamErrorEvent(first.value);
      if (firstError) throw new UpstreamFailure("bad_status", `${backend.id} failed before the first token: ${firstError.message ?? "error event"}`, true);
      metrics.ttft.observe({ route: ctx.route }, (performance.now() - ctx.startedAt) / 1000);
      metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
      return { response: relayStream(backend, first.value, events, up, a, ctx, performance.now()), backendId: backend.id, attempts };
    } catch (err) {
      const failure = toFailure(err, a);
      a.cleanup();
      up?.abort();
      metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: failure.kind });
      ctx.log.warn("upstream attempt failed", { backend: backend.id, attempt: attempts, kind: failure.kind, status: failure.status, error: failure.message });
      ctx.release?.(backend);
      if (!failure.retryable) {
        settleFailure(backend, failure);
        throw failureToApiError(failure);
      }
      last = failure;
      lastBackend = backend;
    }
  }
  if (!last || !lastBackend) {
    // Nothing was tried: say why the paid backends were passed over.
    if (skipped.some((s) => s.reason === "budget_exhausted")) {
      throw new ApiError("budget_exceeded", `the tenant's daily budget cannot cover this request on ${skipped.map((s) => s.backend.id).join(", ")}`, null, { "x-should-retry": "false" });
    }
    const why = skipped.length > 0 ? ` (${skipped.map((s) => `${s.backend.id}: ${s.reason}`).join("; ")})` : "";
    throw new ApiError("no_healthy_backend", `no healthy backend serves model ${String(req.body.model)}${why}`);
  }
  settleFailure(lastBackend, last);
  throw failureToApiError(last);
}

function relayStream(
  backend: Backend,
  firstPayload: string,
  events: AsyncGenerator<string>,
  up: UpstreamResponse,
  a: Attempt,
  ctx: RelayContext,
  firstTokenAt: number,
): Response {
  const { deadlines, metrics } = ctx;
  let sawDone = false;
  let finished = false;
  let usage: Usage | undefined;
  let chunks = 0;
  const finish = (status: "ok" | "error" | "client_cancelled" | "timeout") => {
    if (finished) return;
    finished = true;
    a.cleanup();
    metrics.duration.observe({ route: ctx.route }, (performance.now() - ctx.startedAt) / 1000);
    ctx.settle?.({ backend, status, usage, firstTokenAt, chunks });
  };
  /** Accounts one payload; false when it must not reach the client. */
  const account = (payload: string): boolean => {
    if (payload === SSE_DONE) {
      sawDone = true;
      return true;
    }
    chunks++;
    // Only the final chunk carries usage; avoid parsing every token event.
    if (payload.includes('"usage"')) {
      try {
        const parsed = JSON.parse(payload) as { choices?: unknown[] };
        const u = usageFrom(parsed, payload);
        if (u) {
          usage = u;
          metrics.tokens.inc({ kind: "prompt" }, u.prompt);
          metrics.tokens.inc({ kind: "completion" }, u.completion);
          // We asked for usage on the client's behalf: keep its stream as it expects.
          if (ctx.stripUsage && Array.isArray(parsed.choices) && parsed.choices.length === 0) return false;
        }
      } catch {
        // not JSON: relayed untouched
      }
    }
    return true;
  };
  const errorEvent = (err: ApiError) => sseEvent(JSON.stringify(errorBody(err, ctx.requestId)));
  /** Client went away: abort the upstream so the worker frees the slot. */
  const clientGone = () => {
    a.controller.abort(new UpstreamFailure("aborted", "client went away", false));
    finish("client_cancelled");
    up.abort();
  };
  account(firstPayload);
  a.timer.arm("idle", deadlines.idleMs);

  // Relays events until the upstream ends or fails. `write` resolves when the
  // client can take more (backpressure); after the first byte a failure ends
  // the stream with exactly one error event.
  const pump = async (write: (bytes: Uint8Array) => void | Promise<void>, close: () => void) => {
    try {
      await write(sseEvent(firstPayload));
      for (;;) {
        const next = await events.next();
        if (next.done) {
          finish(sawDone ? "ok" : "error");
          if (!sawDone) {
            metrics.errors.inc({ code: "bad_upstream" });
            await write(errorEvent(new ApiError("bad_upstream", `${backend.id} ended the stream without [DONE]`)));
          }
          return close();
        }
        a.timer.refresh();
        const upstreamErr = upstreamErrorEvent(next.value);
        if (upstreamErr) {
          // The worker already ended the stream with its error event: relay
          // it in our shape as the one error event, and stop.
          finish("error");
          up.abort();
          metrics.errors.inc({ code: "bad_upstream" });
          await write(errorEvent(new ApiError("bad_upstream", `${backend.id}: ${upstreamErr.message ?? "stream failed"}`)));
          return close();
        }
        // After [DONE] keep reading: the upstream ends right away and its
        // connection goes back to the pool fully read.
        if (account(next.value)) await write(sseEvent(next.value));
      }
    } catch (err) {
      const failure = toFailure(err, a);
      finish(failure.kind === "aborted" ? "client_cancelled" : failure.kind === "timeout" ? "timeout" : "error");
      up.abort();
      // The client is gone: nobody is left to read an error event.
      if (failure.kind === "aborted") return close();
      const apiErr = failureToApiError(failure);
      metrics.errors.inc({ code: apiErr.code });
      ctx.log.warn("stream failed after first byte", { backend: backend.id, kind: failure.kind, error: failure.message });
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
  };
  const out = ctx.outgoing;
  if (out) {
    // On Node, write straight to the socket: one write per event, no WHATWG
    // stream machinery in between (the relay's hot loop).
    out.writeHead(200, headers);
    out.flushHeaders();
    out.once("close", () => {
      if (!out.writableFinished) clientGone();
    });
    const write = (bytes: Uint8Array): void | Promise<void> => {
      if (out.destroyed) throw new UpstreamFailure("aborted", "client went away", false);
      if (out.write(bytes)) return;
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
        (bytes) => controller.enqueue(bytes),
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

/** Bytes through as they come (hidden states); a failure mid-body cuts the connection. */
function relayRaw(backend: Backend, raw: { headers: Record<string, string>; body: AsyncIterable<Uint8Array> }, a: Attempt, ctx: RelayContext): Response {
  const it = raw.body[Symbol.asyncIterator]();
  a.timer.arm("idle", ctx.deadlines.idleMs);
  const stream = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const next = await it.next();
        if (next.done) {
          a.cleanup();
          controller.close();
          return;
        }
        a.timer.refresh();
        controller.enqueue(next.value);
      } catch (err) {
        a.cleanup();
        ctx.log.warn("raw relay failed", { backend: backend.id, error: toFailure(err, a).message });
        controller.error(err);
      }
    },
    cancel() {
      a.controller.abort(new UpstreamFailure("aborted", "client went away", false));
      a.cleanup();
    },
  });
  return new Response(stream, { status: 200, headers: { ...raw.headers, "x-request-id": ctx.requestId, "x-switchyard-backend": backend.id } });
}
