// The OpenRouter backend: OpenRouter already speaks OpenAI's wire protocol, so
// this room only swaps in the upstream model name, turns on usage accounting
// (so the final usage block carries `cost` and the `gen-…` id), and maps
// OpenRouter's error shapes — before the stream, mid-stream and in a 200
// body — onto UpstreamFailure.
import { Pool } from "../undici.ts";
import { parseSse } from "../../relay/sse.ts";
import { boundedBody, defaultUpstreamLimits, errorBodyText, rawRelayHeaders, readBodyText, transportFailure, type UpstreamLimits } from "../transport.ts";
import { type Backend, type BackendRequest, busyOf, type InferencePath, type RequestFeature, UpstreamFailure, upstreamBody, type UpstreamResponse, type UpstreamSignal, type AttemptCall } from "../types.ts";

export interface OpenRouterOptions {
  /** The API root, e.g. https://openrouter.ai/api/v1. */
  baseUrl: string;
  apiKey: string;
  /** Sent as HTTP-Referer: OpenRouter attributes usage to this app. */
  referer?: string;
  /** Sent as X-Title, shown next to the referer on OpenRouter's side. */
  title?: string;
  connectTimeoutMs: number;
  /** What is read from OpenRouter at most (bodies, SSE lines and events). */
  limits?: Partial<UpstreamLimits>;
}

/** One keep-alive pool for OpenRouter's origin, shared by every model's backend. */
export class OpenRouterConnections {
  readonly pool: Pool;
  /** The base URL's path (e.g. /api/v1), prefixed to every endpoint. */
  readonly basePath: string;
  /** Headers sent with every call: the key and the app's attribution. */
  readonly headers: Readonly<Record<string, string>>;
  readonly limits: Readonly<UpstreamLimits>;

  constructor(opts: OpenRouterOptions) {
    this.limits = { ...defaultUpstreamLimits, ...opts.limits };
    const u = new URL(opts.baseUrl);
    this.basePath = u.pathname.replace(/\/+$/, "");
    this.pool = new Pool(u.origin, {
      pipelining: 1,
      connectTimeout: opts.connectTimeoutMs,
      // The relay's own timers enforce header/idle deadlines with clear reasons.
      headersTimeout: 0,
      bodyTimeout: 0,
      keepAliveTimeout: 30_000,
    });
    const headers: Record<string, string> = { authorization: `Bearer ${opts.apiKey}`, "content-type": "application/json" };
    if (opts.referer) headers["http-referer"] = opts.referer;
    if (opts.title) headers["x-title"] = opts.title;
    this.headers = headers;
  }

  async close(): Promise<void> {
    await this.pool.destroy().catch(() => {});
  }
}

/** OpenRouter's endpoint for each router path; hidden states have none. */
const endpoints: Partial<Record<InferencePath, string>> = {
  "/v1/chat/completions": "/chat/completions",
  "/v1/completions": "/completions",
  "/v1/embeddings": "/embeddings",
};

/** OpenRouter's error body: `code` is the HTTP status as a number (or a string mid-stream). */
interface OpenRouterError {
  code?: number | string;
  message?: string;
  metadata?: Record<string, unknown>;
}

function classify(err: unknown, signal: UpstreamSignal): UpstreamFailure {
  return transportFailure(err, signal, "openrouter");
}

/** The `error` member of an OpenRouter payload, if it has one. */
function errorIn(text: string): OpenRouterError | undefined {
  // Cheap test first: token chunks never hold the bare key (quotes inside
  // content are escaped), so only real error payloads get parsed.
  if (!text.includes('"error"')) return undefined;
  try {
    const e = (JSON.parse(text) as { error?: unknown } | null)?.error;
    return e && typeof e === "object" ? (e as OpenRouterError) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * 400/413/422: the request itself is wrong, any backend would refuse it.
 * Everything else (401/403 key or moderation, 402 credits, 408/429, 5xx) is
 * about this account or provider: another backend in the chain may serve.
 */
function isClientError(status: number): boolean {
  return status === 400 || status === 413 || status === 422;
}

export class OpenRouterBackend implements Backend {
  readonly kind = "openrouter" as const;
  /** Billed by OpenRouter: held against the tenant's budget before the call. */
  readonly paid = true;
  /** OpenRouter takes image parts as sent (the model it routes to decides). */
  readonly features: ReadonlySet<RequestFeature> = new Set(["image_input"]);
  readonly id: string;

  constructor(
    /** OpenRouter's model name, e.g. "openai/gpt-4o-mini". */
    readonly model: string,
    private readonly connections: OpenRouterConnections,
  ) {
    this.id = `openrouter:${model}`;
  }

  supports(path: InferencePath): boolean {
    return endpoints[path] !== undefined;
  }

  async open(req: BackendRequest, call: AttemptCall, signal: UpstreamSignal): Promise<UpstreamResponse> {
    const endpoint = endpoints[req.path];
    if (!endpoint) throw new UpstreamFailure("protocol", `openrouter does not serve ${req.path}`, true);
    const sent = upstreamBody(req);
    const clientUsage = sent.usage;
    const body = {
      ...sent,
      model: this.model,
      // Usage accounting: the final usage block then carries `cost` (USD).
      usage: { ...(clientUsage && typeof clientUsage === "object" ? clientUsage : {}), include: true },
    };
    const c = this.connections;
    let res;
    try {
      res = await c.pool.request({
        path: c.basePath + endpoint,
        method: "POST",
        headers: { ...c.headers, accept: req.stream ? "text/event-stream" : "application/json", "x-request-id": call.requestId },
        body: JSON.stringify(body),
        signal,
      });
    } catch (err) {
      throw classify(err, signal);
    }
    const s = res.statusCode;
    if (s < 200 || s >= 300) {
      const text = await errorBodyText(res.body);
      const e = errorIn(text);
      const clientError = isClientError(s);
      throw new UpstreamFailure(
        clientError ? "client_error" : "bad_status",
        `openrouter answered ${s}${e?.message ? `: ${e.message}` : ""}`,
        !clientError,
        s,
        e ? { message: e.message, param: null, code: e.code === undefined ? null : String(e.code) } : undefined,
        busyOf(s, res.headers["retry-after"]),
      );
    }
    const upstream = res.body;
    const limits = c.limits;
    return {
      raw: () => ({
        headers: rawRelayHeaders(res.headers),
        body: (async function* () {
          try {
            yield* boundedBody(upstream, limits.maxRawBodyBytes, "openrouter's answer");
          } catch (err) {
            throw classify(err, signal);
          }
        })(),
      }),
      text: async () => {
        let text: string;
        try {
          text = await readBodyText(upstream, limits.maxBodyBytes, "openrouter's answer", res.headers["content-length"]);
        } catch (err) {
          throw classify(err, signal);
        }
        // Once a provider has started, OpenRouter reports failures with a 200
        // and the error in the body; nothing reached the client yet.
        const e = errorIn(text);
        if (e) {
          const code = typeof e.code === "number" ? e.code : undefined;
          throw new UpstreamFailure("bad_status", `openrouter: ${e.message ?? "error"}`, true, code, undefined, busyOf(code));
        }
        return text;
      },
      events: async function* () {
        try {
          // parseSse drops `: OPENROUTER PROCESSING` keep-alives: they are not progress.
          for await (const payload of parseSse(upstream, { maxEventBytes: limits.maxEventBytes, label: "openrouter" })) {
            // A mid-stream failure is an ordinary chunk with an `error` member.
            // Retryable: if it is the very first event the relay may still fail over.
            const e = payload === "[DONE]" ? undefined : errorIn(payload);
            if (e) {
              const code = typeof e.code === "number" ? e.code : undefined;
              throw new UpstreamFailure("bad_status", `openrouter: ${e.message ?? "stream failed"}`, true, code, undefined, busyOf(code));
            }
            yield payload;
          }
        } catch (err) {
          // Whatever OpenRouter does after its error chunk, this call is over.
          upstream.destroy();
          throw classify(err, signal);
        }
      },
      abort: () => {
        upstream.destroy();
      },
    };
  }
}
