// How any HTTP backend's transport errors become UpstreamFailures: an abort
// keeps the reason the relay gave it (deadline, client gone), connection
// errors may fail over, anything else is a protocol failure. `label` names
// the upstream in messages ("worker w1", "openrouter").
import { errors as undiciErrors } from "undici";
import { UpstreamFailure } from "./types.ts";

const connectCodes = new Set(["ECONNREFUSED", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_SOCKET"]);

export function transportFailure(err: unknown, signal: AbortSignal, label: string): UpstreamFailure {
  if (err instanceof UpstreamFailure) return err;
  if (signal.aborted) {
    const reason = signal.reason as unknown;
    if (reason instanceof UpstreamFailure) return reason;
    return new UpstreamFailure("aborted", "request aborted", false);
  }
  if (err instanceof undiciErrors.ConnectTimeoutError) return new UpstreamFailure("timeout", `${label}: connect deadline exceeded`, true);
  const code = (err as { code?: string } | null)?.code;
  if (code && connectCodes.has(code)) return new UpstreamFailure("connect", `${label} connection failed (${code})`, true);
  return new UpstreamFailure("protocol", `${label} request failed: ${(err as Error)?.message ?? String(err)}`, true);
}

/**
 * An upstream answer over one of the limits: a failure of that upstream
 * (it counts against a worker's health), 502 upstream_response_too_large to
 * the client before the first byte, one SSE error event after it.
 */
export class UpstreamTooLarge extends UpstreamFailure {
  override name = "UpstreamTooLarge";
  constructor(
    message: string,
    readonly limitBytes: number,
  ) {
    super("protocol", message, true);
  }
}

/** A non-2xx answer's body as text for the error message; "" when it cannot be read (the status alone decides then). */
export async function errorBodyText(body: { text(): Promise<string> }): Promise<string> {
  try {
    return await body.text();
  } catch {
    return "";
  }
}
