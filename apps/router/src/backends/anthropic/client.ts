// Anthropic's Messages API as a Backend: OpenAI chat in, OpenAI chat out.
// request.ts, response.ts and stream.ts reshape the bodies; this file owns
// the connection, headers and how Anthropic's failures map onto
// UpstreamFailure.
import { Pool } from "../undici.ts";
import { parseSse } from "../../relay/sse.ts";
import { defaultUpstreamLimits, COUNT_ANSWER_MAX_BYTES, errorBodyText, readBodyText, transportFailure, type UpstreamLimits } from "../transport.ts";
import { type Backend, type BackendRequest, busyOf, type CountRequest, countFrom, type InferencePath, type RequestFeature, UpstreamFailure, upstreamBody, type UpstreamResponse, type UpstreamSignal, type AttemptCall } from "../types.ts";
import { reasoningExcluded, toCountTokensRequest, toMessagesRequest } from "./request.ts";
import { fromMessagesResponse } from "./response.ts";
import { MessagesStreamTranslator } from "./stream.ts";
import { AnthropicStreamError, type MessagesResponse, UntranslatableRequest } from "./wire.ts";

export interface AnthropicOptions {
  /** https://api.anthropic.com (a path prefix is kept, for gateways in front of it). */
  baseUrl: string;
  apiKey: string;
  /** The `anthropic-version` header, e.g. "2023-06-01". */
  version: string;
  /** Anthropic requires max_tokens; used when the client sent none. */
  defaultMaxTokens: number;
  connectTimeoutMs: number;
  /** What is read from Anthropic at most (bodies, SSE lines and events). */
  limits?: Partial<UpstreamLimits>;
}

/** One keep-alive pool to Anthropic's origin, shared by every Anthropic model. */
export class AnthropicConnections {
  readonly pool: Pool;
  /** Path prefix of baseUrl, without a trailing slash. */
  readonly basePath: string;
  readonly limits: Readonly<UpstreamLimits>;

  constructor(readonly options: AnthropicOptions) {
    this.limits = { ...defaultUpstreamLimits, ...options.limits };
    const u = new URL(options.baseUrl);
    this.basePath = u.pathname.replace(/\/$/, "");
    this.pool = new Pool(u.origin, {
      connectTimeout: options.connectTimeoutMs,
      // The relay's own timers enforce header/idle deadlines with clear reasons.
      headersTimeout: 0,
      bodyTimeout: 0,
      keepAliveTimeout: 30_000,
    });
  }

  async close(): Promise<void> {
    await this.pool.destroy().catch(() => {});
  }
}

/** Anthropic's error types, as HTTP statuses (for `event: error` inside a 200 stream). */
const errorTypeStatus: Record<string, number> = {
  invalid_request_error: 400,
  authentication_error: 401,
  permission_error: 403,
  not_found_error: 404,
  request_too_large: 413,
  rate_limit_error: 429,
  api_error: 500,
  overloaded_error: 529,
};

/**
 * 400/404/413 mean the request itself is wrong: another backend would refuse
 * it too, so it goes back to the client. Auth, rate limits and overload are
 * this account's trouble: another backend may still answer.
 */
function isClientError(status: number): boolean {
  return status >= 400 && status < 500 && status !== 401 && status !== 403 && status !== 408 && status !== 429;
}

function streamFailure(err: AnthropicStreamError): UpstreamFailure {
  const status = Object.hasOwn(errorTypeStatus, err.errorType) ? errorTypeStatus[err.errorType]! : 500;
  const client = isClientError(status);
  const message = `anthropic: ${err.message}`;
  return client
    ? new UpstreamFailure("client_error", message, false, status, { message: err.message, param: null })
    : new UpstreamFailure("bad_status", message, true, status, undefined, busyOf(status));
}

function classify(err: unknown, signal: UpstreamSignal): UpstreamFailure {
  if (err instanceof AnthropicStreamError) return streamFailure(err);
  if (err instanceof SyntaxError && !signal.aborted) return new UpstreamFailure("protocol", `anthropic sent invalid JSON: ${err.message}`, true);
  return transportFailure(err, signal, "anthropic");
}

/** The failure for a non-2xx answer, from Anthropic's `{"type":"error","error":{type,message}}` body. */
function statusFailure(status: number, text: string, retryAfter?: string | string[]): UpstreamFailure {
  let error: { type?: string; message?: string } | undefined;
  try {
    error = (JSON.parse(text) as { error?: { type?: string; message?: string } }).error;
  } catch {
    error = undefined;
  }
  const detail = error?.message ? `: ${error.type ? `${error.type}: ` : ""}${error.message}` : "";
  const message = `anthropic answered ${status}${detail}`;
  if (isClientError(status)) {
    return new UpstreamFailure("client_error", message, false, status, { message: error?.message ?? message, param: null });
  }
  return new UpstreamFailure("bad_status", message, true, status, undefined, busyOf(status, retryAfter));
}

export class AnthropicBackend implements Backend {
  readonly kind = "anthropic" as const;
  readonly paid = true;
  /** Image parts reach Claude as image blocks (request.ts). */
  readonly features: ReadonlySet<RequestFeature> = new Set(["image_input"]);
  readonly id: string;

  constructor(
    readonly model: string,
    private readonly connections: AnthropicConnections,
  ) {
    this.id = `anthropic:${model}`;
  }

  supports(path: InferencePath): boolean {
    return path === "/v1/chat/completions";
  }

  /** The headers of every call to Anthropic: its key and API version, the request's id, and the client's betas that survive the translation. */
  private headers(call: AttemptCall, accept: string, betas: readonly string[] | undefined): Record<string, string> {
    const { options } = this.connections;
    const headers: Record<string, string> = { "x-api-key": options.apiKey, "anthropic-version": options.version, "content-type": "application/json", accept, "x-request-id": call.requestId };
    if (betas) headers["anthropic-beta"] = betas.join(",");
    return headers;
  }

  /** The chat body as Anthropic's, or the client's 400 for what it cannot express. */
  private translated<T>(translate: () => T): T {
    try {
      return translate();
    } catch (err) {
      if (!(err instanceof UntranslatableRequest)) throw err;
      throw new UpstreamFailure("client_error", `anthropic: ${err.message}`, false, 400, { message: err.message, param: err.param });
    }
  }

  /**
   * Anthropic's own count (POST /v1/messages/count_tokens, free of charge)
   * of the Messages request a run would send, failures mapped as for a run's.
   */
  async countTokens(req: CountRequest, call: AttemptCall, signal: UpstreamSignal): Promise<number> {
    const { basePath, pool } = this.connections;
    const body = this.translated(() => toCountTokensRequest(upstreamBody(req), this.model, { maxTokens: this.connections.options.defaultMaxTokens }));
    let res;
    try {
      res = await pool.request({ path: `${basePath}/v1/messages/count_tokens`, method: "POST", headers: this.headers(call, "application/json", req.anthropicBetas), body: JSON.stringify(body), signal });
    } catch (err) {
      throw classify(err, signal);
    }
    if (res.statusCode < 200 || res.statusCode >= 300) throw statusFailure(res.statusCode, await errorBodyText(res.body), res.headers["retry-after"]);
    let text: string;
    try {
      text = await readBodyText(res.body, COUNT_ANSWER_MAX_BYTES, "anthropic's token count", res.headers["content-length"]);
    } catch (err) {
      throw classify(err, signal);
    }
    return countFrom(text, "input_tokens", "anthropic");
  }

  async open(req: BackendRequest, call: AttemptCall, signal: UpstreamSignal): Promise<UpstreamResponse> {
    if (!this.supports(req.path) || req.raw) {
      // Routing should never send these here; another candidate may serve them.
      throw new UpstreamFailure("protocol", `anthropic does not serve ${req.path}${req.raw ? " as raw bytes" : ""}`, true);
    }
    const { options, basePath, pool, limits } = this.connections;
    const sent = upstreamBody(req);
    const body = this.translated(() => toMessagesRequest(sent, this.model, { maxTokens: options.defaultMaxTokens }));
    let res;
    try {
      res = await pool.request({
        path: `${basePath}/v1/messages`,
        method: "POST",
        headers: this.headers(call, req.stream ? "text/event-stream" : "application/json", req.anthropicBetas),
        body: JSON.stringify(body),
        signal,
      });
    } catch (err) {
      throw classify(err, signal);
    }
    if (res.statusCode < 200 || res.statusCode >= 300) {
      const text = await errorBodyText(res.body);
      throw statusFailure(res.statusCode, text, res.headers["retry-after"]);
    }
    const resBody = res.body;
    const includeUsage = (sent.stream_options as { include_usage?: unknown } | null | undefined)?.include_usage === true;
    // Thinking still runs (and is billed); the client asked not to see it.
    const excludeReasoning = reasoningExcluded(sent);
    return {
      text: async () => {
        let text: string;
        try {
          text = await readBodyText(resBody, limits.maxBodyBytes, "anthropic's answer", res.headers["content-length"]);
        } catch (err) {
          throw classify(err, signal);
        }
        let msg: MessagesResponse;
        try {
          msg = JSON.parse(text) as MessagesResponse;
        } catch {
          throw new UpstreamFailure("protocol", "anthropic answered with invalid JSON", true);
        }
        if (!Array.isArray(msg?.content)) throw new UpstreamFailure("protocol", "anthropic answered without message content", true);
        return JSON.stringify(fromMessagesResponse(msg, { excludeReasoning }));
      },
      raw: () => {
        throw new UpstreamFailure("protocol", "anthropic bodies are always translated, never relayed raw", false);
      },
      events: async function* () {
        const translator = new MessagesStreamTranslator({ includeUsage, excludeReasoning });
        try {
          for await (const payload of parseSse(resBody, { maxEventBytes: limits.maxEventBytes, label: "anthropic" })) yield* translator.feed(payload);
        } catch (err) {
          throw classify(err, signal);
        }
      },
      abort: () => {
        resBody.destroy();
      },
    };
  }
}
