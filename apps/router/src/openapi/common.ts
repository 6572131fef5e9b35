// Answers several routes document alike: what an inference request may end
// with besides its body checks and auth, and the rate-limit headers.
import type { ErrorCode } from "../errors.ts";
import type { ResponseDoc } from "./marks.ts";

/** What the inference pipeline may answer (admission, resolve, leases, budget, rate limits, the relay). */
export const inferenceErrors: ErrorCode[] = [
  "model_not_found",
  "budget_exceeded",
  "priority_not_allowed",
  "rate_limit_exceeded",
  "tenant_queue_full",
  "lease_not_found",
  "lease_expired",
  "stale_fencing_token",
  "lease_store_unavailable",
  "upstream_invalid_request",
  "upstream_not_found",
  "upstream_request_too_large",
  "upstream_unprocessable",
  "bad_upstream",
  "upstream_rate_limited",
  "upstream_overloaded",
  "upstream_response_too_large",
  "no_healthy_backend",
  "queue_full",
  "router_shutting_down",
  "router_overloaded",
  "upstream_timeout",
  "queue_timeout",
];

/** What a token count may answer (pipeline/count.ts): no admission, budget or queue; the rest as a run. */
const notCounted = new Set<ErrorCode>(["budget_exceeded", "priority_not_allowed", "tenant_queue_full", "queue_full", "router_shutting_down", "queue_timeout"]);
export const countErrors: ErrorCode[] = inferenceErrors.filter((c) => !notCounted.has(c));

export const rateLimitHeaders: Record<string, string> = {
  "x-ratelimit-limit-requests": "requests per window (tenants and keys with a limit, docs/LIMITS.md)",
  "x-ratelimit-remaining-requests": "requests left in the window",
  "x-ratelimit-reset-requests": "when the oldest counted request leaves the window",
  "x-ratelimit-limit-tokens": "tokens per window",
  "x-ratelimit-remaining-tokens": "tokens left in the window",
  "x-ratelimit-reset-tokens": "when the oldest counted tokens leave the window",
};

/** A completion answer: JSON, or an SSE stream with `stream: true`. */
export function completionAnswer(json: ResponseDoc["json"], description: string): Record<number, ResponseDoc> {
  return { 200: { description, ...(json ? { json } : {}), sse: true, headers: rateLimitHeaders } };
}

/** A token count's answer headers (POST /v1/messages/count_tokens, POST /v1/responses/input_tokens). */
export const tokenCountHeaders: Record<string, string> = {
  "switchyard-token-count": "`exact`: the backend's own tokenizer counted it; `estimate`: the router's estimate (the backend cannot count), which may be above or below the real count",
  "x-switchyard-backend": "the backend that counted (the one the same request would run on first)",
  ...rateLimitHeaders,
};
