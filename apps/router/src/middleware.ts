// Cross-cutting middleware: request ids + access log + metrics, auth, and
// the body checks (content type, size, the route's schema) every JSON route shares.
import { randomFillSync } from "node:crypto";
import type { ServerResponse } from "node:http";
import type { Context, MiddlewareHandler } from "hono";
import type * as z from "zod";
import { Abort, type AbortLike } from "./abort.ts";
import { acceptsAsIs } from "./accept-as-is.ts";
import { keepBodyText } from "./body-text.ts";
import { ApiError } from "./errors.ts";
import type { KeyOwner } from "./auth/key-store.ts";
import type { AppDeps, AppEnv } from "./deps.ts";
import { markAuth, markBody } from "./openapi/marks.ts";
import { onResponseClose } from "./response-close.ts";
import type { Span } from "./observability/tracing.ts";

const clientIdPattern = /^[A-Za-z0-9._:-]{8,128}$/;

/**
 * The id a client sent for its own correlation (`x-client-request-id`, or
 * `x-request-id` as older clients send it), when it is a sane token. It is
 * logged and echoed back as `x-client-request-id`, never used as a key: two
 * requests may carry the same one.
 */
export function clientRequestId(c: Context<AppEnv>): string | undefined {
  const incoming = c.req.header("x-client-request-id") ?? c.req.header("x-request-id");
  return incoming !== undefined && clientIdPattern.test(incoming) ? incoming : undefined;
}

// Request ids: the millisecond of minting (48 bits), then 80 random bits
// from a pool the CSPRNG fills, refilled when used up — as hex, without
// building a UUID's dashes to strip them again on every request. Ids sort by
// the time they were minted (as UUIDv7's and ULID's do): the ledger's
// primary key (request_id, started_at) then grows at its right edge instead
// of touching a random page of the index per row (issue 14: fewer pages
// dirtied and logged per ledger batch), and an operator can order a log by
// id. 80 random bits still make an id unguessable, and ids are never
// credentials: every lookup by id is scoped to its tenant.
const ID_RANDOM_BYTES = 10;
const idPool = Buffer.alloc(ID_RANDOM_BYTES * 256);
let idOffset = idPool.length;

/** `req_` and 32 hex digits: 12 of the minting millisecond, then 20 random (80 bits). */
export function newRequestId(now = Date.now()): string {
  if (idOffset === idPool.length) {
    randomFillSync(idPool);
    idOffset = 0;
  }
  const id = "req_" + now.toString(16).padStart(12, "0") + idPool.toString("hex", idOffset, idOffset + ID_RANDOM_BYTES);
  idOffset += ID_RANDOM_BYTES;
  return id;
}

/**
 * The request context, in front of every route (route-table.ts) and of the
 * not-found answer: an id, the route's pattern as the metrics label, a
 * child logger, the root span; then, once the rest has answered, the
 * request's metrics and access log line. Not an async function: when the
 * rest answers at once, so does this (issue 14).
 */
export function requestContext(deps: AppDeps, route: string): MiddlewareHandler<AppEnv> {
  return (c, next) => {
    // Every request gets an id the router mints: budget holds, settles, the
    // ledger, leases and upstream calls key on it, so a client repeating an
    // id can never merge two requests (issue 10, item 2).
    const requestId = newRequestId();
    const clientId = clientRequestId(c);
    const startedAt = performance.now();
    c.set("requestId", requestId);
    c.set("startedAt", startedAt);
    // Metrics label by the route's pattern, never the raw path: paths are
    // the client's to choose, and every distinct label is a series kept
    // forever (issue 10, item 9).
    c.set("route", route);
    c.set("log", deps.log.child(clientId ? { request_id: requestId, client_request_id: clientId } : { request_id: requestId }));
    // Set before next(): Hono applies it to responses it builds; touching
    // c.res after next() would materialise a full Response per request.
    // Responses built by the relay carry the id themselves.
    c.header("x-request-id", requestId);
    if (clientId) c.header("x-client-request-id", clientId);
    const span = deps.tracing?.request(`${c.req.method} ${route}`, c.req.header("traceparent"), { "http.request.method": c.req.method, "http.route": route, "switchyard.request_id": requestId });
    if (span) c.set("span", span);
    const done = next() as Promise<void> | void;
    if (done) return done.then(() => requestEnded(deps, c, startedAt, span));
    requestEnded(deps, c, startedAt, span);
    return undefined as unknown as Promise<void>;
  };
}

/** A request's metrics and access log line, once its answer is set (a stream's duration is observed when it ends). */
function requestEnded(deps: AppDeps, c: Context<AppEnv>, startedAt: number, span: Span | undefined): void {
  const status = c.res.status;
  const route = c.get("route");
  if (span) endRequestSpan(c, span, status);
  deps.metrics.requests.inc({ route, status: String(status) });
  const streaming = c.get("streaming") === true;
  if (!streaming) deps.metrics.duration.observe({ route }, (performance.now() - startedAt) / 1000);
  const tenant = c.get("tenant");
  c.get("log").info("request", {
    method: c.req.method,
    path: c.req.path,
    status,
    ms: Math.round((performance.now() - startedAt) * 100) / 100,
    ...(tenant ? { tenant: tenant.tenantName, key: tenant.prefix } : {}),
    ...(streaming ? { streaming: true } : {}),
  });
}

/** The root span ends with the answer: when a stream's last byte is written, not when its headers are. */
function endRequestSpan(c: Context<AppEnv>, span: Span, status: number): void {
  span.set({ "http.response.status_code": status });
  if (status >= 500) span.fail(`status ${status}`);
  const out = c.env?.outgoing;
  if (out && !out.writableFinished) onResponseClose(out, () => span.end());
  else span.end();
}

/**
 * The bearer key → tenant. `apiKeyHeader` also takes the key from that header
 * (Anthropic's clients send `x-api-key`), and `apiKeyQuery` from that query
 * parameter (Google's API takes `?key=`, and its curl examples send it);
 * Authorization wins, then the header.
 */
export function authenticate(deps: AppDeps, opts: { apiKeyHeader?: string; apiKeyQuery?: string } = {}): MiddlewareHandler<AppEnv> {
  // Not an async function: a key the resolver has cached answers at once, and
  // the chain goes on with `return next()` — no promise and no await of its
  // own on every request (issue 14). A throw here is caught by Hono's compose
  // like a rejection; the handler always sets the response, so the Context
  // next() resolves to is never mistaken for one.
  return markAuth((c, next) => {
    const header = c.req.header("authorization");
    let alt = opts.apiKeyHeader && header === undefined ? c.req.header(opts.apiKeyHeader)?.trim() : undefined;
    if (opts.apiKeyQuery && header === undefined && !alt) alt = c.req.query(opts.apiKeyQuery)?.trim();
    if (!header && !alt) {
      throw new ApiError("missing_api_key", `missing API key: send Authorization: Bearer sy_…${opts.apiKeyHeader ? ` or ${opts.apiKeyHeader}: sy_…` : ""}${opts.apiKeyQuery ? ` or ?${opts.apiKeyQuery}=sy_…` : ""}`);
    }
    const m = alt ? [alt, alt] : /^Bearer\s+(\S+)\s*$/i.exec(header!);
    if (!m) throw new ApiError("invalid_api_key", "malformed Authorization header: expected Bearer <key>");
    const resolved = deps.keys.resolve(m[1]!);
    if (resolved instanceof Promise) {
      return resolved.then((owner) => {
        admitKey(c, owner);
        return next();
      });
    }
    admitKey(c, resolved);
    return next();
  });
}

function admitKey(c: Context<AppEnv>, owner: KeyOwner | undefined): void {
  if (!owner) throw new ApiError("invalid_api_key", "invalid API key");
  if (owner.revoked) throw new ApiError("revoked_api_key", `API key ${owner.prefix} has been revoked`);
  c.set("tenant", owner);
}

/**
 * The body checks every JSON route shares: content type, declared size, then
 * the body read within the size limit, parsed and validated against the
 * route's schema (400 invalid_request naming the field). The handler reads
 * the result with `c.get("body")`.
 */
export function jsonBody(deps: AppDeps, schema: z.ZodType): MiddlewareHandler<AppEnv> {
  const limit = deps.config.router.bodyLimitBytes;
  // One middleware, not one per check, and no async frame of its own: the
  // body's read is the one promise it makes. The schema is the route's
  // documented request body too (openapi/spec.ts).
  return markBody<MiddlewareHandler<AppEnv>>((c, next) => {
    const type = c.req.header("content-type") ?? "";
    if (!/^application\/json\s*(;|$)/i.test(type)) {
      throw new ApiError("unsupported_media_type", `expected Content-Type: application/json, got ${type || "none"}`);
    }
    const declared = Number(c.req.header("content-length") ?? NaN);
    if (declared > limit) throw new ApiError("payload_too_large", `request body exceeds the ${limit} byte limit`);
    return readBody(c, limit).then((text) => {
      const parsed = parseJson(text);
      const body = validate(schema, parsed);
      // Unchanged by validation: the client's text can go upstream as it came (body-text.ts).
      if (body === parsed && typeof body === "object" && body !== null) keepBodyText(body, text);
      c.set("body", body);
      return next();
    });
  }, schema);
}

function fieldPath(path: PropertyKey[]): string {
  return path.reduce<string>((acc, p) => (typeof p === "number" ? `${acc}[${p}]` : acc ? `${acc}.${String(p)}` : String(p)), "");
}

/**
 * The body as the schema parsed it, or a 400 invalid_request naming the
 * first bad field. A body zod would hand back unchanged is handed back as
 * it is, without zod's copy of it (accept-as-is.ts; issue 14).
 */
export function validate<S extends z.ZodType>(schema: S, body: unknown): z.infer<S> {
  if (acceptsAsIs(schema)(body)) return body as z.infer<S>;
  const parsed = schema.safeParse(body);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    // A key a strict schema doesn't know is named like any other bad field.
    const param = fieldPath(issue.code === "unrecognized_keys" ? [...issue.path, issue.keys[0]!] : issue.path);
    throw new ApiError("invalid_request", param ? `${param}: ${issue.message}` : issue.message, param || null);
  }
  return parsed.data;
}

const tooLarge = (limit: number) => new ApiError("payload_too_large", `request body exceeds the ${limit} byte limit`);

/**
 * Reads the body, enforcing the size limit while it streams in. On Node it
 * reads the IncomingMessage directly: materialising a WHATWG Request for
 * every call costs more than the rest of the request path.
 */
function readBody(c: Context<AppEnv>, limit: number): Promise<string> {
  const incoming = c.env?.incoming;
  if (incoming) {
    // Events, not `for await`: an async iterator per request costs more than the read itself.
    if (incoming.readableEnded) return Promise.resolve("");
    return new Promise<string>((resolve, reject) => {
      const chunks: Buffer[] = [];
      let size = 0;
      const done = (err?: Error) => {
        incoming.off("data", onData);
        incoming.off("end", onEnd);
        incoming.off("error", onError);
        incoming.off("close", onClose);
        if (err) {
          // Stop reading what is over the limit; the answer still goes out on this connection.
          incoming.pause();
          reject(err);
        } else resolve(chunks.length === 1 ? chunks[0]!.toString("utf8") : Buffer.concat(chunks).toString("utf8"));
      };
      const onData = (chunk: Buffer) => {
        size += chunk.length;
        if (size > limit) return done(tooLarge(limit));
        chunks.push(chunk);
      };
      const onEnd = () => done();
      const onError = (err: Error) => done(err);
      const onClose = () => {
        if (!incoming.readableEnded) done(new Error("request body ended early: the client went away"));
      };
      incoming.on("data", onData);
      incoming.once("end", onEnd);
      incoming.once("error", onError);
      incoming.once("close", onClose);
    });
  }
  return c.req.arrayBuffer().then((buf) => {
    if (buf.byteLength > limit) throw tooLarge(limit);
    return Buffer.from(buf).toString("utf8");
  });
}

/**
 * Deepest nesting of objects and arrays a request body may have. Real bodies
 * (tool schemas, structured-output schemas) stay far below it; a deeper one
 * would parse, then overflow the stack of whatever walks it next (the
 * schema, the cost estimate, JSON.stringify on the way upstream) — a 500
 * instead of the client's 400.
 */
export const MAX_JSON_DEPTH = 128;

/**
 * True when `text` opens more than `max` objects/arrays at once. One pass,
 * nothing allocated: string literals are skipped with indexOf (their
 * brackets don't count), brackets outside them are counted. Malformed JSON
 * gives some answer; JSON.parse refuses it afterwards either way.
 */
export function nestsDeeperThan(text: string, max: number): boolean {
  // Nesting deeper than max needs more than max opening brackets — in
  // strings or not. Most bodies have far fewer, found by indexOf (native)
  // without walking the text a character at a time (issue 14: the walk cost
  // half as much as JSON.parse on a 4 KB conversation).
  if (text.length <= max) return false;
  let opens = 0;
  for (let i = text.indexOf("{"); i >= 0 && opens <= max; i = text.indexOf("{", i + 1)) opens++;
  for (let i = text.indexOf("["); i >= 0 && opens <= max; i = text.indexOf("[", i + 1)) opens++;
  if (opens <= max) return false;
  let depth = 0;
  const n = text.length;
  for (let i = 0; i < n; i++) {
    const ch = text.charCodeAt(i);
    if (ch === 0x22 /* " */) {
      let end = i;
      for (;;) {
        end = text.indexOf('"', end + 1);
        if (end < 0) return false; // unterminated string: not JSON
        let slashes = 0;
        while (text.charCodeAt(end - 1 - slashes) === 0x5c /* \ */) slashes++;
        if ((slashes & 1) === 0) break; // an even run of backslashes escapes itself, not the quote
      }
      i = end;
    } else if (ch === 0x7b /* { */ || ch === 0x5b /* [ */) {
      if (++depth > max) return true;
    } else if (ch === 0x7d /* } */ || ch === 0x5d /* ] */) {
      depth--;
    }
  }
  return false;
}

/** Parses the JSON body's text; invalid JSON, or JSON nested deeper than MAX_JSON_DEPTH, is a 400 invalid_json. */
function parseJson(text: string): unknown {
  if (nestsDeeperThan(text, MAX_JSON_DEPTH)) throw new ApiError("invalid_json", `request body nests objects/arrays deeper than ${MAX_JSON_DEPTH} levels`);
  try {
    return JSON.parse(text);
  } catch {
    throw new ApiError("invalid_json", "request body is not valid JSON");
  }
}

/**
 * Where a response keeps its client signal: one per response, however many
 * parts of the request path ask (admission, relay). A property of the
 * response rather than a WeakMap entry, whose insert (an ephemeron) cost
 * more than the signal itself on every request.
 */
const CLIENT_SIGNAL = Symbol("switchyard.clientSignal");

/** Aborts when the client goes away before the response is finished. */
export function clientSignal(c: Context<AppEnv>): AbortLike {
  const outgoing: (ServerResponse & { [CLIENT_SIGNAL]?: Abort }) | undefined = c.env?.outgoing;
  if (!outgoing) return c.req.raw.signal;
  let signal = outgoing[CLIENT_SIGNAL];
  if (!signal) {
    signal = outgoing[CLIENT_SIGNAL] = new Abort();
    onResponseClose(outgoing, abortIfUnfinished);
  }
  return signal;
}

/** The client went away before its answer was finished: its signal aborts. */
function abortIfUnfinished(res: ServerResponse & { [CLIENT_SIGNAL]?: Abort }): void {
  if (!res.writableFinished) res[CLIENT_SIGNAL]?.abort();
}
