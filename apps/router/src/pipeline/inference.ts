// One inference request's way through the router, built in one place: admit
// (a place on the model's worker pool) → resolve (the chain's live
// candidates, then leases) → hold (the budget tab) → attempt (dispatch with
// failover) → settle. Each stage owns what it must give back: the pool place
// is released once, whichever way the request ends; the tab settles once.
import type { Context } from "hono";
import { PREFIX_NAME_FIELD } from "@switchyard/state";
import type { PoolPlace } from "../admission/gate.ts";
import type { KeyOwner } from "../auth/key-store.ts";
import { CONTEXT_1M_BETA, forwardedBetas } from "../backends/anthropic/betas.ts";
import type { Backend, InferencePath } from "../backends/types.ts";
import { normalizeMaxOutput, promptBound, type PromptBound } from "../billing/estimate.ts";
import { bodyEdited, setBodyField } from "../body-text.ts";
import { narrowAllowedTools } from "./allowed-tools.ts";
import { bodyFacts, type RequestTab } from "../billing/guard.ts";
import type { AppDeps, AppEnv } from "../deps.ts";
import { ApiError } from "../errors.ts";
import { routeWithLeases, type LeaseRouting } from "../leases/service.ts";
import { clientRequestId, clientSignal } from "../middleware.ts";
import type { RelayContext } from "../relay/context.ts";
import { dispatch } from "../relay/dispatch.ts";
import type { RateTicket } from "../ratelimit/limiter.ts";
import { requestTrace, stage, traced } from "./trace.ts";
import type { Span } from "../observability/tracing.ts";
import type { Resolution } from "../routing/chain.ts";
import { CACHE_SCOPE_FIELD, requestClass, type RequestClass } from "../routing/request-class.ts";
import { withPrefixName } from "../routing/scorer.ts";

/** Where a request may run: the chain's candidates, its class, and the lease routing over them. */
type Routed = { resolution: Resolution; cls: RequestClass; leased: LeaseRouting };

/** The validated body of an inference route: OpenAI-shaped, with a model. */
export type InferenceBody = { model: string; stream?: boolean | null | undefined } & Record<string, unknown>;

/** How a route runs its request through the pipeline, when not the plain way. */
export interface InferenceOptions {
  /** Pass the upstream body through as bytes (hidden states). */
  raw?: { accept: string };
  /** The body to run instead of the route's validated one: a translated route's OpenAI chat body (routes/v1/responses, routes/v1/messages). */
  body?: InferenceBody;
  /**
   * Answer with a Response the caller reads and rewrites (a translated
   * route), never by writing straight to the Node socket.
   */
  detached?: boolean;
  /**
   * Narrows the chain's live candidates to those that can honour this
   * request (in order); may throw the client's ApiError when none can.
   */
  narrow?: (backends: Backend[]) => Backend[];
}

/** The 503 router_overloaded for a request over router.maxInFlight (itself counted), or undefined when there is room. */
export function overloaded(deps: AppDeps): ApiError | undefined {
  const max = deps.config.router.maxInFlight;
  if (max === 0 || !deps.inFlight) return undefined;
  const now = deps.inFlight();
  if (now <= max) return undefined;
  return new ApiError("router_overloaded", `this router is answering ${now - 1} requests, its router.maxInFlight (${max}): retry shortly`, null, { "retry-after": String(deps.config.router.retryAfterS) });
}

/** An inference route's request (chat, completions, embeddings, hidden states), the body already validated by the route's middleware. */
export function handleInference(c: Context<AppEnv>, deps: AppDeps, path: InferencePath, opts: InferenceOptions = {}): Promise<Response> {
  return new InferencePipeline(c, deps, path, opts.body ?? (c.get("body") as InferenceBody), opts).run();
}

export class InferencePipeline {
  private readonly tenant: KeyOwner;
  private place: PoolPlace | undefined;
  private rate: RateTicket | undefined;
  private readonly trace: Span | undefined;
  /** The prompt's bound, once worked out (bound()). */
  private boundOnce: PromptBound | undefined;
  /** The client's `anthropic-beta` names that go on to Anthropic (most requests: none). */
  private readonly betas: readonly string[] | undefined;

  constructor(
    private readonly c: Context<AppEnv>,
    private readonly deps: AppDeps,
    private readonly path: InferencePath,
    private readonly body: InferenceBody,
    private readonly opts: InferenceOptions = {},
  ) {
    this.tenant = c.get("tenant");
    this.trace = requestTrace(c);
    this.betas = forwardedBetas(c.req.header("anthropic-beta"));
  }

  // Each stage answers at once when it has nothing to wait for (no rate
  // limits, room on the pool, no leases): a promise is awaited only when one
  // came back. Every request passes all of them, and an async frame per
  // stage was a promise, a microtask turn and garbage each (issue 14).
  async run(): Promise<Response> {
    this.shed();
    // One output limit, before the budget hold and before any upstream sees the body.
    normalizeMaxOutput(this.path, this.body);
    narrowAllowedTools(this.path, this.body);
    const limited = this.limit();
    if (limited) await limited;
    try {
      const admitted = stage(this.trace, "admission", () => this.admit());
      if (admitted) await admitted;
    } catch (err) {
      this.rate?.settle(undefined);
      throw err;
    }
    try {
      const routed = stage(this.trace, "routing", () => this.resolve());
      const { resolution, cls, leased } = routed instanceof Promise ? await routed : routed;
      const stripUsage = this.askForUsage();
      const tab = this.hold();
      const result = await this.attempt(leased, resolution, cls, tab, stripUsage);
      // A stream's or raw bytes' duration is observed at their last byte (relay/stream.ts, raw.ts), not here.
      if (this.body.stream === true || this.opts.raw) this.c.set("streaming", true);
      return result.response;
    } catch (err) {
      this.place?.release();
      this.rate?.settle(undefined);
      if (err instanceof ApiError && err.code === "no_healthy_backend" && !err.headers["retry-after"]) {
        // Keep a more precise Retry-After when the thrower knew one (e.g. when the leases end).
        throw new ApiError(err.code, err.message, null, { ...err.headers, "retry-after": this.retryAfter() });
      }
      throw err;
    }
  }

  /**
   * Over router.maxInFlight (this request counted): a fast 503, before any
   * work is spent on it, so a client or balancer retries elsewhere instead
   * of waiting behind every request this process already holds.
   */
  private shed(): void {
    const refusal = overloaded(this.deps);
    if (refusal) throw refusal;
  }

  /**
   * The prompt's token bound with its images' and audio's share
   * (promptBound): one walk of the body per request, however many need it —
   * the rate limit (only a tenant with limits asks) and the request class,
   * whose bound the budget tab keeps. A walk inflates PDFs and reads
   * images' headers: twice would be twice that. Asked first after the body's
   * last edit that could change it (normalizeMaxOutput and narrowAllowedTools
   * in run(), which can drop tools); what resolve() drops after it (the
   * prefix-name and cache-scope fields) the walk never reads.
   */
  private bound(): PromptBound {
    return (this.boundOnce ??= promptBound(this.path, this.body));
  }

  /** Rate limits (ratelimit/): the tenant's and the key's windows in one store call, none without limits; 429 when over. */
  private limit(): Promise<void> | undefined {
    const taken = this.deps.rateLimiter?.take(this.tenant, this.c.get("requestId"), () => this.bound().promptTokens);
    if (taken instanceof Promise) return taken.then((t) => this.limited(t));
    this.limited(taken);
    return undefined;
  }

  private limited(ticket: RateTicket | undefined): void {
    this.rate = ticket;
    // On every answer: the relay's own responses (routingContext) and the errors Hono builds.
    if (ticket) for (const [k, v] of Object.entries(ticket.headers)) this.c.header(k, v);
  }

  /** Admission: room for the tenant's band on the model's worker pool, or a wait in its fair queue (403/429/503/504 otherwise). */
  private admit(): Promise<void> | undefined {
    const place = this.deps.admission?.admit({
      model: this.body.model,
      tenantName: this.tenant.tenantName,
      priority: this.c.req.header("x-switchyard-priority"),
      leased: this.c.req.header("x-switchyard-lease") !== undefined,
      signal: clientSignal(this.c),
      outgoing: this.c.env?.outgoing,
    });
    if (!(place instanceof Promise)) {
      this.place = place;
      return undefined;
    }
    return place.then((p) => {
      this.place = p;
    });
  }

  /**
   * The chain's live candidates for the model, in order (404 model_not_found,
   * 503 no_healthy_backend), then leases: a holder's request runs only on its
   * leased worker, carrying the fencing token; others skip leased workers.
   */
  private resolve(): Routed | Promise<Routed> {
    const { body } = this;
    // Prefix names are per tenant and the router's alone: a client's own switchyard_prefix never reaches a worker.
    // Likewise the engine prefix-cache scope: a client can't pick another tenant's.
    if (Object.hasOwn(body, PREFIX_NAME_FIELD) || Object.hasOwn(body, CACHE_SCOPE_FIELD)) {
      bodyEdited(body);
      delete body[PREFIX_NAME_FIELD];
      delete body[CACHE_SCOPE_FIELD];
    }
    const cls = requestClass(this.path, body, String(this.tenant.tenantId), this.bound(), this.betas?.includes(CONTEXT_1M_BETA) === true);
    let resolution = this.deps.chain.resolve(body.model, this.tenant.tenantName, cls);
    if (!resolution.known) {
      throw new ApiError("model_not_found", `model '${body.model}' is not served by any live worker or configured provider`, "model");
    }
    if (resolution.backends.length === 0) {
      throw new ApiError("no_healthy_backend", `no worker for model '${body.model}' is ready (warming, draining or busy)`, null, { "retry-after": this.retryAfter() });
    }
    if (this.opts.narrow) {
      // The route's own limits (a translated request's features): the rest of the chain stays in order, scores beside their backends.
      const all = resolution.backends;
      const kept = new Set(this.opts.narrow(all));
      resolution = { ...resolution, backends: all.filter((b) => kept.has(b)), scores: resolution.scores.filter((_, i) => kept.has(all[i]!)) };
    }
    const leased = routeWithLeases(this.deps.leases, resolution.backends, {
      leaseId: this.c.req.header("x-switchyard-lease"),
      tenantId: this.tenant.tenantId,
      model: body.model,
      signal: clientSignal(this.c),
    });
    const routed = resolution;
    return leased instanceof Promise ? leased.then((l) => ({ resolution: routed, cls, leased: l })) : { resolution, cls, leased };
  }

  /**
   * Streams always ask the upstream for usage (the ledger needs it); the
   * usage chunk reaches the client only if it asked too. True when it didn't.
   */
  private askForUsage(): boolean {
    const { body } = this;
    if (body.stream !== true || this.path === "/v1/embeddings") return false;
    const so = (body.stream_options ?? {}) as { include_usage?: boolean };
    if (so.include_usage === true) return false;
    setBodyField(body, "stream_options", { ...so, include_usage: true });
    return true;
  }

  /** The request's budget tab: paid attempts are held against the tenant's day through it, and it settles the ledger row. */
  private hold(): RequestTab {
    const startedAt = this.c.get("startedAt");
    return this.deps.guard.open({
      requestId: this.c.get("requestId"),
      tenant: this.tenant,
      path: this.path,
      facts: bodyFacts(this.path, this.body, this.bound(), this.betas),
      model: this.body.model,
      arrivedAtMs: Date.now() - (performance.now() - startedAt),
      startedAtPerf: startedAt,
    });
  }

  /** Dispatch with failover; each attempt is admitted by the pool place and the tab, and the end settles both. */
  private attempt(leased: LeaseRouting, resolution: Resolution, cls: RequestClass, tab: RequestTab, stripUsage: boolean) {
    const { c, deps, body, betas } = this;
    const { raw, detached } = this.opts;
    // The relay's callbacks take what they need as locals, not `this`: a
    // stream's relay outlives the handler, and through `this` it would keep
    // the whole request alive — the Hono context with its closures, the
    // request's wrappers — for the stream's life, copied by every scavenge
    // that finds the stream young (issue 14).
    const { place, rate } = this;
    return dispatch(
      leased.backends,
      {
        path: this.path,
        body,
        stream: body.stream === true,
        ...(raw ? { raw } : {}),
        ...(leased.fencingToken !== undefined ? { fencingToken: leased.fencingToken, ...(leased.fencingWorker ? { fencingWorker: leased.fencingWorker } : {}) } : {}),
        ...(betas ? { anthropicBetas: betas } : {}),
      },
      traced(this.trace, {
        requestId: c.get("requestId"),
        deadlines: deps.config.deadlines,
        signal: clientSignal(c),
        ...(deps.shutdown ? { shutdown: deps.shutdown } : {}),
        startedAt: c.get("startedAt"),
        log: c.get("log"),
        metrics: deps.metrics,
        maxAttempts: deps.config.router.maxAttempts,
        route: c.get("route"),
        ...(detached ? {} : { outgoing: c.env?.outgoing }),
        stripUsage,
        workers: deps.directory,
        ...this.routingContext(resolution),
        admit: (b) => {
          place?.attempt(b);
          const verdict = tab.admit(b);
          return verdict instanceof Promise ? verdict.then((a) => withPrefixName(a, b, cls)) : withPrefixName(verdict, b, cls);
        },
        release: (b, accepted, status) => tab.release(b, accepted, status),
        settle: (o) => {
          place?.release();
          rate?.settle(o.usage, o.firstTokenAt !== undefined || (o.chunks ?? 0) > 0);
          tab.settle(o);
        },
      }),
    );
  }

  private retryAfter(): string {
    return String(this.deps.config.router.retryAfterS);
  }

  /**
   * Routing feedback for dispatch, the decision explained (x-switchyard-route
   * when the client sends `x-switchyard-debug: route` or config asks; a debug
   * log line), and stream resume when the request or config opts in.
   */
  private routingContext(resolution: Resolution): Pick<RelayContext, "observe" | "headers" | "resume"> {
    const { c, deps } = this;
    const { scorer, resume } = deps.config.routing;
    const header = scorer.debugHeader || /(^|[\s,])route([\s,]|$)/.test(c.req.header("x-switchyard-debug") ?? "");
    const out: Pick<RelayContext, "observe" | "headers" | "resume"> = { observe: resolution.observe };
    if (header || deps.config.log.level === "debug") {
      const explained = resolution.explain();
      c.get("log").debug("route", { model: this.body.model, candidates: explained });
      if (header) out.headers = { "x-switchyard-route": explained };
    }
    // The relay builds its own responses: the client's correlation id rides along.
    const clientId = clientRequestId(c);
    if (clientId) out.headers = { ...out.headers, "x-client-request-id": clientId };
    if (this.rate) out.headers = { ...out.headers, ...this.rate.headers };
    if (resume.enabled || c.req.header("x-switchyard-resume") === "true") out.resume = { maxResumes: resume.maxResumes };
    return out;
  }
}
