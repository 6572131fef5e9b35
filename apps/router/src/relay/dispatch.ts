// Dispatch one request over an ordered list of candidate backends: the
// failover loop. Failover happens only while nothing has reached the client:
// a stream's response is not started until its first upstream event arrived.
// One attempt's timers and error mapping are attempt.ts; relaying the answer
// is whole.ts (one JSON body), stream.ts (SSE, resume) and raw.ts (bytes).
import { ApiError } from "../errors.ts";
import type { Backend, BackendRequest, UpstreamResponse } from "../backends/types.ts";
import { UpstreamFailure } from "../backends/types.ts";
import { refusedField } from "../backends/fields.ts";
import { endFailedAttempt, failureToApiError, startAttempt } from "./attempt.ts";
import type { RelayContext } from "./context.ts";
import { relayRaw } from "./raw.ts";
import { resumable, StreamResume } from "./resume.ts";
import { relayWhole } from "./whole.ts";
import { firstEvent, openContinuation, relayStream, type Leg } from "./stream.ts";

export interface DispatchResult {
  response: Response;
  backendId: string;
  attempts: number;
}

/** Why a paid backend was passed over, in words a client (and its operator) can act on. */
const skipReasons: Record<string, string> = {
  unpriced: "skipped, unpriced: no price is set for it, so its cost cannot be bounded (an operator runs `switchyard prices set`)",
  budget_unavailable: "skipped: the tenant's budget could not be read (Postgres unreachable); retry shortly",
};

export async function dispatch(candidates: Backend[], req: BackendRequest, ctx: RelayContext): Promise<DispatchResult> {
  const { metrics, deadlines } = ctx;
  let last: UpstreamFailure | undefined;
  let lastBackend: Backend | undefined;
  let lastAccepted = false;
  /** A paid attempt its provider accepted was failed over from: the request owes it (RequestTab.release). */
  let owed = false;
  let attempts = 0;
  // `accepted`: the upstream had answered 2xx headers (a paid provider bills the prompt from then on, even for a stream cut before its first token).
  const statusOf = (f: UpstreamFailure) => (f.kind === "timeout" ? "timeout" : f.kind === "aborted" ? "client_cancelled" : "error");
  const settleFailure = (backend: Backend, f: UpstreamFailure, accepted: boolean) => ctx.settle?.({ backend, status: statusOf(f), ...(accepted ? { accepted } : {}) });
  // A request that leaves the loop by a throw of its own (the client gone
  // between attempts, an admission that failed) after a paid attempt its
  // provider accepted still owes that attempt: settled first, or the tab
  // keeps its hold and intent and no row is written.
  const settleAbandoned = () => {
    if (owed && lastBackend && last) settleFailure(lastBackend, last, lastAccepted);
  };
  const skipped: Array<{ backend: Backend; reason: string }> = [];
  const tried = new Set<Backend>();
  // The first field a candidate refuses (backends/fields.ts): the request
  // goes to one that can honour it, or is answered 400 naming it.
  let refused: { param: string; message: string } | undefined;
  // Candidates without this route (Anthropic serves chat only): when no
  // candidate has it, the request is the client's mistake (400), not an
  // outage to retry (503).
  let unserved = 0;
  for (const backend of candidates) {
    if (attempts >= ctx.maxAttempts) break;
    if (ctx.signal.aborted) {
      settleAbandoned();
      throw new ApiError("upstream_timeout", "client went away before dispatch");
    }
    if (!backend.supports(req.path)) {
      unserved++;
      continue;
    }
    const refusal = refusedField(backend.kind, req.path, req.body);
    if (refusal) {
      refused ??= refusal;
      continue;
    }
    let attemptReq = req;
    let progress: Leg["progress"];
    if (ctx.admit) {
      const verdict = ctx.admit(backend);
      const admission = verdict instanceof Promise ? await verdict.catch((err: unknown) => (settleAbandoned(), Promise.reject(err))) : verdict;
      if (!admission.ok) {
        skipped.push({ backend, reason: admission.reason });
        continue;
      }
      // The attempt's fields ride beside the body: no copy of it per attempt (backends/types.ts upstreamJson).
      if (admission.patch) attemptReq = { ...req, fields: admission.patch };
      progress = admission.progress;
    }
    attempts++;
    tried.add(backend);
    const a = startAttempt(ctx, backend);
    // A whole answer's headers come only once it is generated: it may take
    // up to answerMs. A worker's is waited for in headersMs steps while the
    // registry lists it (a cut cable stops its heartbeats too, so it fails
    // over within a step); a provider's, the whole answerMs.
    const workerId = backend.workerId;
    const workers = ctx.workers;
    if (req.stream) a.timer.arm("headers", deadlines.headersMs);
    else if (backend.paid || !workerId || !workers) a.timer.arm("answer", deadlines.answerMs);
    else a.timer.armWhile("headers", deadlines.headersMs, deadlines.answerMs, () => workers.listed(workerId));
    let up: UpstreamResponse | undefined;
    try {
      up = await backend.open(attemptReq, ctx, a.controller);
      if (req.raw) {
        const raw = up.raw();
        metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
        return { response: relayRaw(backend, raw, a, ctx), backendId: backend.id, attempts };
      }
      if (!req.stream) return { response: await relayWhole(backend, up, a, ctx), backendId: backend.id, attempts };
      const { batches, held, first } = await firstEvent(backend, up, a, deadlines.firstTokenMs);
      metrics.ttft.observe({ route: ctx.route }, (performance.now() - ctx.startedAt) / 1000);
      metrics.upstreamAttempts.inc({ backend: backend.kind, outcome: "ok" });
      // The first chunk names the generation (a paid attempt's intent keeps it, for a crash).
      if (progress && typeof first.obj?.id === "string") progress({ generationId: first.obj.id });
      const leg: Leg = { backend, batches, held, up, a, ttftMs: performance.now() - a.startedAt, ...(progress ? { progress } : {}) };
      // Opted in: a break mid-way continues on another free candidate.
      // From this attempt's request: a continuation carries its fields too (the tenant's cache scope on whichever worker continues).
      const state = ctx.resume && !backend.paid && resumable(req) ? new StreamResume(attemptReq, ctx.resume.maxResumes) : undefined;
      const resume = state && { state, open: (failed: Backend) => openContinuation(state, candidates, tried, failed, req.path, ctx) };
      return { response: relayStream(leg, first, ctx, performance.now(), resume), backendId: backend.id, attempts };
    } catch (err) {
      const failure = endFailedAttempt(err, a, up, backend, ctx);
      // Accepted: the upstream answered 2xx headers (`up` is set then), and
      // this side cut it afterwards — a deadline, the client gone, a
      // shutdown. The provider was processing the prompt and bills it. One
      // that reported its own failure (an error event before the first
      // token, a stream it closed, OpenRouter's error in a 200 body) bills
      // nothing for it: not accepted. A whole answer's headers come only
      // once it is generated: a paid one cut by this side's deadline before
      // them was being generated, and is billed whole (a refused connection
      // fails as `connect` instead); one whose 2xx body came and could not
      // be read as an answer (not JSON, cut short, over the size limit: a
      // `protocol` failure; or its connection reset mid-body: `connect`)
      // was generated and billed whole all the same.
      const accepted = acceptedBefore(failure.kind, up !== undefined, !req.stream && !req.raw && backend.paid);
      ctx.log.warn("upstream attempt failed", { backend: backend.id, attempt: attempts, kind: failure.kind, status: failure.status, accepted, error: failure.message });
      ctx.release?.(backend, accepted, statusOf(failure));
      if (!failure.retryable) {
        settleFailure(backend, failure, accepted);
        throw failureToApiError(failure);
      }
      last = failure;
      lastBackend = backend;
      lastAccepted = accepted;
      owed ||= accepted && backend.paid;
    }
  }
  if (!last || !lastBackend) {
    // Nothing was tried: say why the paid backends were passed over.
    if (refused) throw new ApiError("invalid_request", refused.message, refused.param);
    if (unserved > 0 && unserved === candidates.length) {
      throw new ApiError("invalid_request", `model ${String(req.body.model)} is not served on ${req.path} (${candidates.map((b) => b.id).join(", ")})`, "model");
    }
    if (skipped.some((s) => s.reason === "budget_exhausted")) {
      throw new ApiError("budget_exceeded", `the tenant's daily budget cannot cover this request on ${skipped.map((s) => s.backend.id).join(", ")}`, null, { "x-should-retry": "false" });
    }
    const why = skipped.length > 0 ? ` (${skipped.map((s) => `${s.backend.id}: ${skipReasons[s.reason] ?? s.reason}`).join("; ")})` : "";
    throw new ApiError("no_healthy_backend", `no healthy backend serves model ${String(req.body.model)}${why}`);
  }
  settleFailure(lastBackend, last, lastAccepted);
  throw failureToApiError(last);
}

/**
 * Whether an attempt that failed with `kind` had been accepted by its
 * provider, which then bills it (the comment at its call says why, case by
 * case). `headers`: its 2xx headers came; `wholePaid`: a paid answer not
 * streamed, generated whole before its headers.
 */
function acceptedBefore(kind: UpstreamFailure["kind"], headers: boolean, wholePaid: boolean): boolean {
  if (!headers) return wholePaid && kind === "timeout";
  return kind === "timeout" || kind === "aborted" || (wholePaid && (kind === "protocol" || kind === "connect"));
}
