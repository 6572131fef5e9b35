// A prompt's token count (POST /v1/messages/count_tokens,
// POST /v1/responses/input_tokens), found where a run of the same request
// would go but never run, held or billed: shed → rate limit (one request, no
// tokens) → resolve (the tenant's chain, the route's features, leases) →
// count on the first candidate that answers, failing over as a run does. Exact where the backend counts with its own tokenizer
// (Backend.countTokens); otherwise the router's estimate, flagged as one.
import type { Context } from "hono";
import { Abort, onAbort } from "../abort.ts";
import { forwardedBetas } from "../backends/anthropic/betas.ts";
import { refusedField } from "../backends/fields.ts";
import { type Backend, type CountRequest, UpstreamFailure } from "../backends/types.ts";
import { imageUrlTokens } from "../billing/media.ts";
import type { AppDeps, AppEnv } from "../deps.ts";
import { ApiError } from "../errors.ts";
import { routeWithLeases } from "../leases/service.ts";
import { clientSignal } from "../middleware.ts";
import { failureToApiError } from "../relay/attempt.ts";
import { narrowAllowedTools } from "./allowed-tools.ts";
import { overloaded, type InferenceBody } from "./inference.ts";

/** The answer's header saying how the count was made: `exact` or `estimate`. */
export const TOKEN_COUNT_HEADER = "switchyard-token-count";

/** A prompt's count, and where it came from. */
export interface PromptCount {
  tokens: number;
  /** Counted by the backend's own tokenizer; false: estimateTokens', which may be above or below it. */
  exact: boolean;
  /** The candidate that answered (the one a run would have tried first, unless it failed). */
  backend: Backend;
}

/** A count's answer headers, on both count routes: whether it is exact, and which backend counted. */
export function countHeaders(count: PromptCount): Record<string, string> {
  return { [TOKEN_COUNT_HEADER]: count.exact ? "exact" : "estimate", "x-switchyard-backend": count.backend.id };
}

export async function countPrompt(c: Context<AppEnv>, deps: AppDeps, body: InferenceBody, opts: { narrow?: (backends: Backend[]) => Backend[] } = {}): Promise<PromptCount> {
  const refusal = overloaded(deps);
  if (refusal) throw refusal;
  // The prompt a run would send: an allowed_tools choice leaves the other tools out of it.
  narrowAllowedTools("/v1/chat/completions", body);
  const tenant = c.get("tenant");
  // A count is a request against the tenant's and key's requests per window
  // (it costs a worker's or Anthropic's time), and no tokens: it runs no model.
  const taken = deps.rateLimiter?.take(tenant, c.get("requestId"), () => 0);
  const ticket = taken instanceof Promise ? await taken : taken;
  if (ticket) for (const [k, v] of Object.entries(ticket.headers)) c.header(k, v);
  // A lookup, not a routing decision: no request class, so the scorer counts no worker as taken by it.
  const resolution = deps.chain.resolve(body.model, tenant.tenantName);
  const retryAfter = String(deps.config.router.retryAfterS);
  if (!resolution.known) throw new ApiError("model_not_found", `model '${body.model}' is not served by any live worker or configured provider`, "model");
  if (resolution.backends.length === 0) throw new ApiError("no_healthy_backend", `no worker for model '${body.model}' is ready (warming, draining or busy)`, null, { "retry-after": retryAfter });
  const candidates = opts.narrow ? opts.narrow(resolution.backends) : resolution.backends;
  // Leases as for a run: a holder counts on its leased worker, with its fencing token; others around leased workers.
  const routed = routeWithLeases(deps.leases, candidates, { leaseId: c.req.header("x-switchyard-lease"), tenantId: tenant.tenantId, model: body.model, signal: clientSignal(c) });
  const leased = routed instanceof Promise ? await routed : routed;
  const betas = forwardedBetas(c.req.header("anthropic-beta"));
  const req: CountRequest = {
    body,
    ...(leased.fencingToken !== undefined ? { fencingToken: leased.fencingToken, ...(leased.fencingWorker ? { fencingWorker: leased.fencingWorker } : {}) } : {}),
    ...(betas ? { anthropicBetas: betas } : {}),
  };
  let last: UpstreamFailure | undefined;
  // As dispatch passes over a backend that refuses a field the body asks for (reasoning_effort on a worker), so does a count; none left is that 400.
  let refused: { param: string; message: string } | undefined;
  let attempts = 0;
  for (const backend of leased.backends) {
    if (attempts >= deps.config.router.maxAttempts) break;
    if (!backend.supports("/v1/chat/completions")) continue;
    const refusal = refusedField(backend.kind, "/v1/chat/completions", body);
    if (refusal) {
      refused ??= refusal;
      continue;
    }
    if (!backend.countTokens) return { tokens: estimateTokens(body), exact: false, backend };
    attempts++;
    try {
      return { tokens: await countOn(c, deps, backend, req), exact: true, backend };
    } catch (err) {
      const failure = err instanceof UpstreamFailure ? err : new UpstreamFailure("protocol", String((err as Error)?.message ?? err), true);
      c.get("log").warn("token count attempt failed", { backend: backend.id, attempt: attempts, kind: failure.kind, status: failure.status, error: failure.message });
      if (!failure.retryable) throw failureToApiError(failure);
      last = failure;
    }
  }
  if (last) throw failureToApiError(last);
  if (refused) throw new ApiError("invalid_request", refused.message, refused.param);
  throw new ApiError("no_healthy_backend", `no backend serving model '${body.model}' can count its tokens`, null, { "retry-after": retryAfter });
}

/** One backend's count, within deadlines.headersMs, aborted when the client leaves. */
async function countOn(c: Context<AppEnv>, deps: AppDeps, backend: Backend, req: CountRequest): Promise<number> {
  const abort = new Abort();
  const ms = deps.config.deadlines.headersMs;
  const timer = setTimeout(() => abort.abort(new UpstreamFailure("timeout", `${backend.id} did not count the prompt within ${ms} ms (deadlines.headersMs)`, true)), ms);
  const off = onAbort(clientSignal(c), () => abort.abort(new UpstreamFailure("aborted", "client went away", false)));
  try {
    return await backend.countTokens!(req, { requestId: c.get("requestId") }, abort);
  } catch (err) {
    throw abort.reason instanceof UpstreamFailure ? abort.reason : err;
  } finally {
    clearTimeout(timer);
    off();
  }
}

/** ASCII characters per token: English prose and code run about 4 in the GPT, Llama and Claude tokenizers. */
const ASCII_CHARS_PER_TOKEN = 4;
/** Role markers and separators per message (ChatML's take 4 to 5), and the assistant turn a template opens for the answer. */
const MESSAGE_FRAMING = 4;
const REPLY_PRIMING = 3;

/** A text's estimate: its ASCII characters by ASCII_CHARS_PER_TOKEN, and a token for every other character (CJK, emoji, accents). */
function textTokens(s: string): number {
  let ascii = 0;
  let other = 0;
  for (let i = 0; i < s.length; i++) {
    const code = s.charCodeAt(i);
    if (code < 0x80) ascii++;
    // A surrogate pair is one character: counted at its high half.
    else if (code < 0xdc00 || code > 0xdfff) other++;
  }
  return Math.ceil(ascii / ASCII_CHARS_PER_TOKEN) + other;
}

function contentTokens(content: unknown): number {
  if (typeof content === "string") return textTokens(content);
  if (!Array.isArray(content)) return content == null ? 0 : textTokens(JSON.stringify(content));
  let n = 0;
  for (const part of content as Array<Record<string, unknown> | null>) {
    if (part?.type === "text" && typeof part.text === "string") n += textTokens(part.text);
    else if (part?.type === "image_url") {
      const img = part.image_url;
      // The providers' own formulas, by the image's size where its header says it (billing/media.ts).
      n += imageUrlTokens(typeof img === "object" && img !== null ? (img as { url?: unknown }).url : img);
    } else n += textTokens(JSON.stringify(part ?? ""));
  }
  return n;
}

/**
 * The router's estimate of a chat body's prompt tokens, for a backend that
 * cannot count (OpenRouter has no count endpoint, and no free way to ask the
 * model's own tokenizer): a heuristic, not a bound — a prompt's real count
 * may be above or below it, most for text unlike English prose or code.
 * Clients size context and file reads by the count, so a bound several
 * times too high (billing/estimate.ts's, which budget holds need) would
 * mislead them more than this; either way the answer says it is an estimate.
 */
export function estimateTokens(body: Record<string, unknown>): number {
  let n = REPLY_PRIMING;
  for (const m of Array.isArray(body.messages) ? (body.messages as Array<Record<string, unknown> | null>) : []) {
    n += MESSAGE_FRAMING + contentTokens(m?.content);
    if (Array.isArray(m?.tool_calls)) {
      for (const call of m.tool_calls as Array<{ function?: { name?: unknown; arguments?: unknown } } | null>) {
        const fn = call?.function;
        n += MESSAGE_FRAMING + textTokens(typeof fn?.name === "string" ? fn.name : "") + textTokens(typeof fn?.arguments === "string" ? fn.arguments : JSON.stringify(fn?.arguments ?? {}));
      }
    }
  }
  if (Array.isArray(body.tools) && body.tools.length > 0) n += textTokens(JSON.stringify(body.tools));
  return n;
}
