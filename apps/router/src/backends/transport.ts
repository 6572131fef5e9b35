// How any HTTP backend's transport errors become UpstreamFailures: an abort
// keeps the reason the relay gave it (deadline, client gone), connection
// errors may fail over, anything else is a protocol failure. `label` names
// the upstream in messages ("worker w1", "openrouter").
import { Readable } from "node:stream";
import { errors as undiciErrors } from "./undici.ts";
import { UpstreamFailure, type UpstreamSignal } from "./types.ts";

const connectCodes = new Set(["ECONNREFUSED", "ECONNRESET", "EHOSTUNREACH", "ENETUNREACH", "ENOTFOUND", "EAI_AGAIN", "UND_ERR_SOCKET"]);

export function transportFailure(err: unknown, signal: UpstreamSignal, label: string): UpstreamFailure {
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

/** What the router reads from any upstream at most: everything read from one is untrusted (router.maxUpstream*). */
export interface UpstreamLimits {
  /** A whole non-streamed (JSON) body. */
  maxBodyBytes: number;
  /** A body relayed as bytes (hidden states' safetensors): streamed, but not without end. */
  maxRawBodyBytes: number;
  /** One SSE line, and the data of one SSE event. */
  maxEventBytes: number;
}

const MiB = 1024 * 1024;
export const defaultUpstreamLimits: Readonly<UpstreamLimits> = { maxBodyBytes: 32 * MiB, maxRawBodyBytes: 256 * MiB, maxEventBytes: MiB };

/** An error answer is read this far at most: its message is all the router keeps of it. */
export const ERROR_BODY_MAX_BYTES = 64 * 1024;
/** A token count's answer (`{"count": N}`, `{"input_tokens": N}`) is a few dozen bytes: more than this is no count. */
export const COUNT_ANSWER_MAX_BYTES = 64 * 1024;
/** Longest upstream error message passed on (in our message, or to the client for client errors). */
const ERROR_MESSAGE_MAX_CHARS = 1_000;

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

/** An undici response body (or anything alike): read by chunks, destroyed to stop early. */
export interface UpstreamBody extends AsyncIterable<Uint8Array> {
  destroy(err?: Error): unknown;
}

/** A content-length header's value as a number, -1 when it is missing or not one. */
export function declaredLength(contentLength: unknown): number {
  return typeof contentLength === "string" && /^\d{1,16}$/.test(contentLength) ? Number(contentLength) : -1;
}

/** An answer whose content-length is over `max`. */
export const declaredTooLarge = (what: string, declared: number, max: number) => new UpstreamTooLarge(`${what} declared ${declared} bytes, over the limit of ${max}`, max);

/** An answer whose bytes so far are over `max`. */
export const bodyTooLarge = (what: string, max: number) => new UpstreamTooLarge(`${what} is over the limit of ${max} bytes`, max);

/** Refuses an answer whose content-length already says it is over `max` (before a byte of it is read). */
export function checkDeclaredLength(body: UpstreamBody, contentLength: unknown, max: number, what: string): void {
  const declared = declaredLength(contentLength);
  if (declared > max) {
    body.destroy();
    throw declaredTooLarge(what, declared, max);
  }
}

/** A whole body as text, read chunk by chunk: past `max` bytes it is dropped and refused, never buffered further. */
export async function readBodyText(body: UpstreamBody, max: number, what: string, contentLength?: unknown): Promise<string> {
  return (await readBodyBytes(body, max, what, contentLength)).toString("utf8");
}

/** readBodyText's bytes, before decoding: a relay that passes them on writes them as they came instead of encoding the text again. */
export async function readBodyBytes(body: UpstreamBody, max: number, what: string, contentLength?: unknown): Promise<Buffer> {
  checkDeclaredLength(body, contentLength, max, what);
  if (body instanceof Readable) return readNodeBody(body, max, what);
  const parts: Uint8Array[] = [];
  let n = 0;
  for await (const chunk of body) {
    n += chunk.byteLength;
    if (n > max) {
      body.destroy();
      throw bodyTooLarge(what, max);
    }
    parts.push(chunk);
  }
  return Buffer.concat(parts, n);
}

/**
 * readBodyBytes for a Node stream (undici's bodies), by its events: the
 * async iterator a for-await makes costs an end-of-stream watch and a
 * promise per chunk, several times the read itself for the one-chunk JSON
 * answer of most requests. Ending without 'end' (destroyed) is a failure,
 * as it is for the iterator.
 */
function readNodeBody(body: Readable, max: number, what: string): Promise<Buffer> {
  const early = () => body.errored ?? Object.assign(new Error(`${what} ended early`), { code: "ERR_STREAM_PREMATURE_CLOSE" });
  // Its 'close' has been and gone: waiting for it would wait for ever.
  if (body.destroyed) return Promise.reject(early());
  return new Promise((resolve, reject) => {
    const parts: Buffer[] = [];
    let n = 0;
    const off = () => {
      body.off("data", onData);
      body.off("end", onEnd);
      body.off("error", onError);
      body.off("close", onClose);
    };
    const onData = (chunk: Buffer) => {
      n += chunk.byteLength;
      if (n > max) {
        off();
        // undici's body reports its own destruction as an 'error' ("Request aborted"): nobody's to hear it.
        body.once("error", () => {});
        body.destroy();
        reject(bodyTooLarge(what, max));
        return;
      }
      parts.push(chunk);
    };
    const onEnd = () => {
      off();
      resolve(parts.length === 1 ? parts[0]! : Buffer.concat(parts, n));
    };
    const onError = (err: Error) => {
      off();
      reject(err);
    };
    const onClose = () => {
      off();
      reject(early());
    };
    body.on("data", onData);
    body.once("end", onEnd);
    body.once("error", onError);
    body.once("close", onClose);
  });
}

/** A body relayed as bytes, counted as it goes: past `max` bytes it throws UpstreamTooLarge. */
export async function* boundedBody(body: UpstreamBody, max: number, what: string): AsyncGenerator<Uint8Array> {
  let n = 0;
  for await (const chunk of body) {
    n += chunk.byteLength;
    if (n > max) {
      body.destroy();
      throw bodyTooLarge(what, max);
    }
    yield chunk;
  }
}

/** A non-2xx answer's body as text for the error message, its first ERROR_BODY_MAX_BYTES only; "" when it cannot be read (the status alone decides then). */
export async function errorBodyText(body: UpstreamBody, max = ERROR_BODY_MAX_BYTES): Promise<string> {
  const parts: Uint8Array[] = [];
  let n = 0;
  try {
    for await (const chunk of body) {
      const room = max - n;
      if (chunk.byteLength >= room) {
        parts.push(chunk.subarray(0, room));
        n = max;
        break; // leaving the loop destroys the rest
      }
      parts.push(chunk);
      n += chunk.byteLength;
    }
  } catch {
    return "";
  }
  return Buffer.concat(parts, n).toString("utf8");
}

/** An upstream's OpenAI-shaped `{"error":…}` from an error body, its fields checked (strings only, message clipped). */
export function upstreamErrorOf(text: string): UpstreamFailure["upstreamError"] {
  let e: unknown;
  try {
    e = (JSON.parse(text) as { error?: unknown } | null)?.error;
  } catch {
    return undefined;
  }
  if (!e || typeof e !== "object") return undefined;
  const { message, param, code } = e as Record<string, unknown>;
  return {
    message: typeof message === "string" ? message.slice(0, ERROR_MESSAGE_MAX_CHARS) : undefined,
    param: typeof param === "string" ? param.slice(0, 200) : null,
    code: typeof code === "string" ? code.slice(0, 100) : null,
  };
}

/**
 * The headers of a body relayed as bytes (hidden states) that reach the
 * client: an allow-list, each value checked. Whatever else an upstream sets
 * (x-switchyard-route, x-switchyard-fencing-token, cookies…) stays here.
 */
const rawHeaderChecks: Record<string, RegExp> = {
  "content-type": /^application\/(?:octet-stream|json)(?:\s*;[\x20-\x7e]{0,100})?$/i,
  "content-length": /^\d{1,16}$/,
  /** Hidden states: prompt tokens the tensors cover, and the layers they hold (README). */
  "x-switchyard-tokens": /^\d{1,9}$/,
  "x-switchyard-layers": /^\d{1,5}(?:,\d{1,5}){0,1023}$/,
};

export function rawRelayHeaders(headers: Record<string, string | string[] | undefined>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const name in rawHeaderChecks) {
    const v = headers[name];
    if (typeof v === "string" && rawHeaderChecks[name]!.test(v)) out[name] = v;
  }
  if (!out["content-type"]) out["content-type"] = "application/octet-stream";
  return out;
}
