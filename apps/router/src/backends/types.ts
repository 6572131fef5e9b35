// The Backend interface: anything that can answer an OpenAI-shaped request —
// self-hosted workers, OpenRouter, Anthropic. Whatever the upstream speaks,
// a backend hands the relay OpenAI-shaped bodies and SSE payloads (with an
// OpenAI `usage` block), so billing and relaying are one code path.
import type { AbortLike } from "../abort.ts";
import type { SseBatch } from "../relay/sse.ts";
import type { ProviderKey } from "./registry.ts";
import type { Usage } from "./usage.ts";
import { takeBodyText, withFields } from "../body-text.ts";

export type InferencePath = "/v1/chat/completions" | "/v1/completions" | "/v1/embeddings" | "/v1/hidden_states";

export interface BackendRequest {
  path: InferencePath;
  /** The validated OpenAI request body, forwarded as is. */
  body: Record<string, unknown>;
  /**
   * This attempt's own fields, set over the body's (the output limit a
   * budget hold assumed, a worker's prefix name and cache scope): each
   * backend sends them as part of its upstream body (upstreamBody, or
   * upstreamJson for the bytes). Apart from the body so an attempt costs no
   * copy of it.
   */
  fields?: Record<string, unknown>;
  stream: boolean;
  /** Pass the upstream body through as bytes (hidden states), not parsed. */
  raw?: { accept: string };
  /** A lease holder's request: workers get it as x-switchyard-fencing-token and refuse older ones. */
  fencingToken?: number;
  /** The leased worker the token belongs to (a shard of a split model's pipeline may be it, not the head). */
  fencingWorker?: string;
  /** The client's `anthropic-beta` names Anthropic is sent (backends/anthropic/betas.ts); other backends ignore them. */
  anthropicBetas?: readonly string[];
}

/**
 * A prompt to count, not run (POST /v1/messages/count_tokens): the chat
 * body (its messages, tools and tool_choice; no output limit), and a lease
 * holder's fencing as a run of it would carry.
 */
export type CountRequest = Pick<BackendRequest, "body" | "fencingToken" | "fencingWorker" | "anthropicBetas">;

/** What a backend is told about the request it is sent: only its id (x-request-id upstream). */
export interface AttemptCall {
  requestId: string;
  /** W3C traceparent of this attempt's span, while tracing: workers get it (and name their engine job by its span id). */
  traceparent?: string;
}

/** What aborts a backend call: an attempt's Abort, or any AbortSignal (tests, tools) — abort.ts's AbortLike. */
export type UpstreamSignal = AbortLike;

/** Why an attempt failed; `retryable` failures may move to the next candidate. */
export class UpstreamFailure extends Error {
  override name = "UpstreamFailure";
  constructor(
    readonly kind: "timeout" | "connect" | "bad_status" | "protocol" | "aborted" | "client_error",
    message: string,
    readonly retryable: boolean,
    readonly status?: number,
    /** The upstream's own OpenAI-shaped error, for client errors passed through. */
    readonly upstreamError?: { message?: string; param?: string | null; code?: string | null },
    /** A paid provider said it is busy (busyOf): what the client is told when no candidate is left. */
    readonly busy?: UpstreamBusy,
  ) {
    super(message);
  }
}

/**
 * A provider's "not now": its rate limit on this account (429), or its own
 * overload (Anthropic's 529, a 503). When the chain runs out on one, the
 * client is told so — 429 or 503 (Anthropic's 529 on /v1/messages) with the
 * provider's Retry-After — instead of a 502 that says the upstream is broken:
 * SDKs back off on those, and honour the wait.
 */
export interface UpstreamBusy {
  reason: "rate_limited" | "overloaded";
  /** Seconds, as the provider's Retry-After said (a whole number), else none. */
  retryAfterS?: number;
}

/** The busy hint for a paid provider's status (and its Retry-After header), or none. */
export function busyOf(status: number | undefined, retryAfter?: string | string[]): UpstreamBusy | undefined {
  const reason = status === 429 ? "rate_limited" : status === 503 || status === 529 ? "overloaded" : undefined;
  if (!reason) return undefined;
  const header = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
  // An HTTP-date Retry-After is rare from these providers and would need this box's clock to agree with theirs: dropped.
  const seconds = header !== undefined && /^\d{1,6}$/.test(header.trim()) ? Number(header.trim()) : undefined;
  return seconds === undefined ? { reason } : { reason, retryAfterS: seconds };
}

export interface UpstreamResponse {
  /** Whole body as text (non-streaming requests). */
  text(): Promise<string>;
  /**
   * The same body as the bytes that came (instead of text(), never both):
   * an upstream whose answer reaches the client as it is (a worker's).
   * Optional: the paid adapters check or translate their text first.
   */
  bytes?(): Promise<Buffer>;
  /** The body as bytes plus the headers worth relaying (raw requests), and its usage where the upstream said it. */
  raw(): { headers: Record<string, string>; body: AsyncIterable<Uint8Array>; usage?: Usage };
  /**
   * SSE payloads one by one (streaming requests), OpenAI chunk JSON and the
   * final "[DONE]". Comments/keep-alives are not yielded (they are not
   * progress). A failure mid-stream throws UpstreamFailure.
   */
  events(): AsyncGenerator<string>;
  /**
   * The same events batch by batch, one per upstream chunk, with the bytes of
   * those that can reach the client as they are (relay/sse.ts
   * parseSseBatches). Optional: the relay falls back to `events()`, each
   * payload sent as text (a translated upstream has no bytes to pass).
   */
  batches?(): AsyncIterator<SseBatch>;
  /** Abort the upstream request and free its connection. */
  abort(): void;
}

/**
 * What a request may carry beyond plain text chat that only some backends
 * can honour: a route whose request needs one runs only on backends that
 * declare it (routes/v1/messages: an image block on a text-only worker is
 * the client's 400, not silently dropped).
 */
export type RequestFeature = "image_input";

/** Self-hosted workers, or one of the registered providers (backends/registry.ts). */
export type BackendKind = "worker" | ProviderKey;

export interface Backend {
  readonly id: string;
  readonly kind: BackendKind;
  /** Paid backends are held against the tenant's daily budget before the call. */
  readonly paid: boolean;
  /** The model name the upstream knows (the client's name may be an alias). */
  readonly model: string;
  /** The features it carries to its upstream (absent: plain text chat only). */
  readonly features?: ReadonlySet<RequestFeature>;
  /** Whether this backend can answer this path at all (Anthropic has no embeddings). */
  supports(path: InferencePath): boolean;
  /** The worker's registry id (self-hosted backends). */
  readonly workerId?: string;
  /** A split model's pipeline: every worker it may use, head first. */
  readonly pipelineWorkers?: readonly string[];
  /**
   * A split model's pipeline, for this request: leave out the workers `skip`
   * names (replicas leased by someone else), `prefer` first in its stage;
   * false when it cannot run without them (its head, or a stage's every replica).
   */
  narrow?(skip: (workerId: string) => boolean, prefer?: string): boolean;
  /** Its name in x-switchyard-route, when it has a better one than its score's (a pipeline's chain, as narrowed). */
  describe?(): string;
  /**
   * Send the request; resolves once the upstream answered with 2xx headers,
   * rejects with UpstreamFailure otherwise. `signal` aborts the call.
   */
  open(req: BackendRequest, call: AttemptCall, signal: UpstreamSignal): Promise<UpstreamResponse>;
  /**
   * The exact number of prompt tokens this chat request would take here, as
   * the upstream's own tokenizer counts it (a worker's engine through the
   * model's chat template, Anthropic's count_tokens), without running it
   * and without charge; rejects with UpstreamFailure like `open`. Absent:
   * the upstream cannot count, and the router estimates (pipeline/count.ts),
   * saying so.
   */
  countTokens?(req: CountRequest, call: AttemptCall, signal: UpstreamSignal): Promise<number>;
}

/**
 * A count an upstream answered, read from its JSON `field`: a non-negative
 * safe integer, or the protocol failure it is (an upstream's answer is
 * untrusted).
 */
export function countFrom(text: string, field: string, label: string): number {
  let n: unknown;
  try {
    n = (JSON.parse(text) as Record<string, unknown> | null)?.[field];
  } catch {
    throw new UpstreamFailure("protocol", `${label} answered a token count with invalid JSON`, true);
  }
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < 0) throw new UpstreamFailure("protocol", `${label} answered a token count without a whole number in '${field}'`, true);
  return n;
}

/** The body an attempt sends upstream: the request's, with the attempt's fields over it. */
export function upstreamBody(req: Pick<BackendRequest, "body" | "fields">): Record<string, unknown> {
  return req.fields ? { ...req.body, ...req.fields } : req.body;
}

/**
 * upstreamBody as JSON text, without the copy: the client's own text when
 * the body is as it sent it (body-text.ts; taken: a second attempt, rare,
 * serializes), else JSON.stringify of the body;
 * the attempt's fields are written after the body's own when the body has
 * none of them (the router deleted any a client sent), which is the same
 * JSON a merged object gives; a body that has one is merged the plain way,
 * so no key is ever repeated.
 */
export function upstreamJson(req: Pick<BackendRequest, "body" | "fields">): string {
  const { body, fields } = req;
  if (fields) for (const k in fields) if (Object.hasOwn(body, k)) return JSON.stringify({ ...body, ...fields });
  const text = takeBodyText(body) ?? JSON.stringify(body);
  return fields ? (withFields(text, fields) ?? JSON.stringify({ ...body, ...fields })) : text;
}
