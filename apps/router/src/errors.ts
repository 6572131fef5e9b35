// One error hierarchy, one serializer. Every error leaves the router as
// {"error":{"message","type","param","code"}} with the request id; the HTTP
// status comes from the exhaustive table below, never from a handler.
export const errorCodes = {
  invalid_json: { status: 400, type: "invalid_request_error" },
  invalid_request: { status: 400, type: "invalid_request_error" },
  missing_api_key: { status: 401, type: "authentication_error" },
  invalid_api_key: { status: 401, type: "authentication_error" },
  revoked_api_key: { status: 401, type: "authentication_error" },
  budget_exceeded: { status: 402, type: "insufficient_quota" },
  permission_denied: { status: 403, type: "permission_error" },
  not_found: { status: 404, type: "invalid_request_error" },
  model_not_found: { status: 404, type: "invalid_request_error" },
  method_not_allowed: { status: 405, type: "invalid_request_error" },
  payload_too_large: { status: 413, type: "invalid_request_error" },
  unsupported_media_type: { status: 415, type: "invalid_request_error" },
  upstream_invalid_request: { status: 400, type: "invalid_request_error" },
  /** The upstream's own 404 (Anthropic: a model it does not know), 413 and 422, kept as they were: SDKs raise by status. */
  upstream_not_found: { status: 404, type: "invalid_request_error" },
  upstream_request_too_large: { status: 413, type: "invalid_request_error" },
  upstream_unprocessable: { status: 422, type: "invalid_request_error" },
  internal_error: { status: 500, type: "server_error" },
  bad_upstream: { status: 502, type: "upstream_error" },
  /** A worker or provider answered more than router.maxUpstream*Bytes allow. */
  upstream_response_too_large: { status: 502, type: "upstream_error" },
  /** The last paid provider tried was rate-limiting this deployment's account (its 429): back off, its Retry-After passed on. */
  upstream_rate_limited: { status: 429, type: "rate_limit_error" },
  /** The last paid provider tried was overloaded (Anthropic's 529, a 503): /v1/messages answers it as 529 overloaded_error. */
  upstream_overloaded: { status: 503, type: "service_unavailable" },
  no_healthy_backend: { status: 503, type: "service_unavailable" },
  /** The router was stopped (SIGTERM) and router.drainMs passed before this request ended. */
  router_shutting_down: { status: 503, type: "service_unavailable" },
  /** This router process answers router.maxInFlight requests already: retry shortly, or on another router. */
  router_overloaded: { status: 503, type: "service_unavailable" },
  upstream_timeout: { status: 504, type: "timeout_error" },
  // Leases (docs/LEASES.md).
  lease_not_found: { status: 404, type: "invalid_request_error" },
  worker_not_found: { status: 404, type: "invalid_request_error" },
  lease_expired: { status: 409, type: "conflict_error" },
  lease_conflict: { status: 409, type: "conflict_error" },
  /** The tenant holds leases.maxPerTenant live leases already: it releases one first. */
  lease_limit_reached: { status: 409, type: "conflict_error" },
  stale_fencing_token: { status: 409, type: "conflict_error" },
  lease_store_unavailable: { status: 503, type: "service_unavailable" },
  /** Stored /v1/responses answers could not be read or written (Redis unreachable). */
  response_store_unavailable: { status: 503, type: "service_unavailable" },
  // Admission (apps/router/src/admission/).
  priority_not_allowed: { status: 403, type: "permission_error" },
  queue_full: { status: 503, type: "service_unavailable" },
  /** This tenant alone has admission.maxQueuedPerTenant requests waiting: its own excess, not the service's. */
  tenant_queue_full: { status: 429, type: "rate_limit_error" },
  queue_timeout: { status: 504, type: "timeout_error" },
  /** Over the tenant's or the key's requests or tokens per window (`switchyard limits`, docs/LIMITS.md). */
  rate_limit_exceeded: { status: 429, type: "rate_limit_error" },
  /** The client left while queued; nobody reads this answer (nginx's 499). */
  request_cancelled: { status: 499, type: "invalid_request_error" },
} as const satisfies Record<string, { status: number; type: string }>;

export type ErrorCode = keyof typeof errorCodes;

export class ApiError extends Error {
  override name = "ApiError";
  readonly status: number;
  readonly type: string;
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly param: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.status = errorCodes[code].status;
    this.type = errorCodes[code].type;
  }
}

export interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string; request_id?: string };
}

export function errorBody(err: ApiError, requestId?: string): ErrorBody {
  return {
    error: { message: err.message, type: err.type, param: err.param, code: err.code, ...(requestId ? { request_id: requestId } : {}) },
  };
}

/** Anything thrown becomes an ApiError; unknown errors are internal and their details stay in logs. */
export function toApiError(err: unknown): ApiError {
  if (err instanceof ApiError) return err;
  return new ApiError("internal_error", "internal error");
}
