// Talks to a worker's OpenAI-compatible HTTP API. One undici Pool per worker
// origin keeps connections warm; the pool is shared by every request.
import { Pool } from "../undici.ts";
import type { LookupFunction } from "node:net";
import { FENCING_SIGNATURE_HEADER, FENCING_WORKER_HEADER, FencingSigner, workerCallSecret, type WorkerRecord } from "@switchyard/state";
import { sseText, type SseBatch } from "../../relay/sse.ts";
import { dispatchSse, dispatchWhole, type SseAnswer, type WholeAnswer } from "../answer-dispatch.ts";
import {
  boundedBody,
  checkDeclaredLength,
  COUNT_ANSWER_MAX_BYTES,
  defaultUpstreamLimits,
  errorBodyText,
  rawRelayHeaders,
  readBodyText,
  transportFailure,
  type UpstreamLimits,
  upstreamErrorOf,
} from "../transport.ts";
import { type Backend, type BackendRequest, type CountRequest, countFrom, UpstreamFailure, upstreamJson, type UpstreamResponse, type UpstreamSignal, type AttemptCall } from "../types.ts";

export interface WorkerPoolOptions {
  connectTimeoutMs: number;
  /** Connections per worker origin at most: every live stream holds one. */
  maxConnections?: number;
  /** Bearer token presented to every worker. */
  token?: string;
  /** Derive each worker's own secret from its id (invited workers). */
  secretKey?: string;
  /** Resolves worker host names when connecting (the router pins them to the addresses its URL check approved). */
  lookup?: LookupFunction;
  /** What is read from a worker at most (bodies, SSE lines and events). */
  limits?: Partial<UpstreamLimits>;
  /** Told, in seconds, how long undici held each worker call before writing it (answer-dispatch.ts heldMs): the router's /metrics. */
  onHeld?: (seconds: number) => void;
}

/** Keeps one connection pool per worker origin. */
export class WorkerConnections {
  private readonly pools = new Map<string, Pool>();
  readonly limits: Readonly<UpstreamLimits>;
  constructor(private readonly opts: WorkerPoolOptions) {
    this.limits = { ...defaultUpstreamLimits, ...opts.limits };
  }

  /** A worker call's wait in undici before its headers were written, as the answer's head reported it. */
  held(ms: number): void {
    if (ms >= 0) this.opts.onHeld?.(ms / 1000);
  }

  pool(origin: string): Pool {
    let p = this.pools.get(origin);
    if (!p) {
      p = new Pool(origin, {
        connections: this.opts.maxConnections ?? 8192,
        pipelining: 1,
        connectTimeout: this.opts.connectTimeoutMs,
        ...(this.opts.lookup ? { connect: { lookup: this.opts.lookup } } : {}),
        // Our own timers enforce header/idle deadlines with clear reasons.
        headersTimeout: 0,
        bodyTimeout: 0,
        // An idle connection kept 30 s whatever the worker's Keep-Alive hint
        // says (undici takes the hint over keepAliveTimeout): the worker keeps
        // it 65 s, so this side closes first and never sends onto a
        // connection the worker is closing.
        keepAliveTimeout: 30_000,
        keepAliveMaxTimeout: 30_000,
      });
      this.pools.set(origin, p);
    }
    return p;
  }

  private readonly secrets = new Map<string, string>();

  /** The credential for one worker: its derived secret, or the shared token. */
  tokenFor(workerId: string): string | undefined {
    const key = this.opts.secretKey;
    if (!key) return this.opts.token;
    let s = this.secrets.get(workerId);
    if (!s) {
      s = workerCallSecret(key, workerId);
      this.secrets.set(workerId, s);
    }
    return s;
  }

  private signer: FencingSigner | undefined;

  /** The routers' signature over a fencing token for one worker (invited workers accept only signed tokens). */
  fencingSignature(workerId: string, token: number): string | undefined {
    if (!this.opts.secretKey) return undefined;
    return (this.signer ??= new FencingSigner(this.opts.secretKey)).sign(workerId, token);
  }

  /** Drop pools of workers that left the registry. */
  retain(origins: Set<string>): void {
    for (const [origin, pool] of this.pools) {
      if (!origins.has(origin)) {
        this.pools.delete(origin);
        void pool.close().catch(() => {});
      }
    }
  }

  async close(): Promise<void> {
    await Promise.all([...this.pools.values()].map((p) => p.destroy().catch(() => {})));
    this.pools.clear();
  }
}

function classify(err: unknown, signal: UpstreamSignal): UpstreamFailure {
  return transportFailure(err, signal, "worker");
}

/**
 * What an answer offers besides the one reading its request asked for (a
 * stream's events, a whole answer's bytes, hidden states' raw bytes): the
 * relay reads each request's answer one way only, so the others throw.
 */
function readAsOnly(label: string, readAs: string): never {
  throw new Error(`${label}: this answer is read as ${readAs}`);
}

function notReadAs(label: string, readAs: string): () => never {
  return () => readAsOnly(label, readAs);
}

/**
 * A worker's streamed answer, read by the relay as batches (or events, by a
 * translating route). A class, not an object of closures: it lives as long
 * as the stream, and five closures and their context per stream were
 * copied by every scavenge that found the stream young (issue 14).
 */
class StreamedAnswer implements UpstreamResponse {
  constructor(
    private readonly answer: SseAnswer,
    private readonly label: string,
  ) {}

  batches(): AsyncIterator<SseBatch> {
    return this.answer.batches;
  }

  /** Only the events are read from a stream (relay/stream.ts): as batches, or one by one. */
  async *events(): AsyncGenerator<string> {
    const { batches } = this.answer;
    for (;;) {
      const r = await batches.next();
      if (r.done) return;
      for (const e of r.value.events) yield e.data;
    }
  }

  /** The events as the SSE text they make (a stream read whole). */
  async text(): Promise<string> {
    let text = "";
    for await (const data of this.events()) text += sseText(data);
    return text;
  }

  raw(): never {
    return readAsOnly(this.label, "events");
  }

  abort(): void {
    this.answer.abort();
  }
}

/** A worker's whole (JSON) answer: its bytes, gathered within the body limit as they came. */
class WholeBytes implements UpstreamResponse {
  constructor(
    private readonly answer: WholeAnswer,
    private readonly signal: UpstreamSignal,
    private readonly label: string,
  ) {}

  async bytes(): Promise<Buffer> {
    try {
      return await this.answer.body;
    } catch (err) {
      throw classify(err, this.signal);
    }
  }

  async text(): Promise<string> {
    return (await this.bytes()).toString("utf8");
  }

  raw(): never {
    return readAsOnly(this.label, "its bytes");
  }

  events(): never {
    return readAsOnly(this.label, "its bytes");
  }

  abort(): void {
    this.answer.abort();
  }
}

/** Worker URLs parsed, by URL: a backend is made per candidate per request, and a URL parse costs more than the rest of it. */
const urlParts = new Map<string, { origin: string; basePath: string }>();
/** Distinct worker URLs kept at most (they come and go with the registry). */
const URL_PARTS_MAX = 4096;

function workerUrlParts(url: string): { origin: string; basePath: string } {
  let parts = urlParts.get(url);
  if (!parts) {
    const u = new URL(url);
    parts = { origin: u.origin, basePath: u.pathname.replace(/\/$/, "") };
    if (urlParts.size >= URL_PARTS_MAX) urlParts.clear();
    urlParts.set(url, parts);
  }
  return parts;
}

export class WorkerBackend implements Backend {
  readonly kind = "worker" as const;
  /** Self-hosted: recorded on the ledger at cost 0, never held against a budget. */
  readonly paid = false;
  readonly id: string;
  readonly model: string;
  readonly workerId: string;
  private readonly origin: string;
  private readonly basePath: string;

  constructor(
    readonly worker: WorkerRecord,
    private readonly connections: WorkerConnections,
    model = "",
  ) {
    this.model = model;
    this.id = `worker:${worker.id}`;
    this.workerId = worker.id;
    ({ origin: this.origin, basePath: this.basePath } = workerUrlParts(worker.url));
  }

  supports(): boolean {
    return true;
  }

  /** Headers a kind of worker call adds (a pipeline's route to its head shard). */
  protected extraHeaders(): Record<string, string> {
    return {};
  }

  /** A worker call's headers: JSON in, `accept` out, the worker's credential, the request's id, trace and lease fencing. */
  private callHeaders(req: CountRequest, call: AttemptCall, accept: string): Record<string, string> {
    const headers: Record<string, string> = {
      "content-type": "application/json",
      accept,
      "x-request-id": call.requestId,
    };
    const token = this.connections.tokenFor(this.worker.id);
    if (token) headers.authorization = `Bearer ${token}`;
    if (req.fencingToken !== undefined) headers["x-switchyard-fencing-token"] = String(req.fencingToken);
    if (call.traceparent) headers.traceparent = call.traceparent;
    // A lease on a shard after a pipeline's head: the head checks the token for that shard (signed for its id).
    const fenced = req.fencingWorker ?? this.worker.id;
    if (req.fencingToken !== undefined && fenced !== this.worker.id) headers[FENCING_WORKER_HEADER] = fenced;
    const signature = req.fencingToken !== undefined ? this.connections.fencingSignature(fenced, req.fencingToken) : undefined;
    if (signature) headers[FENCING_SIGNATURE_HEADER] = signature;
    Object.assign(headers, this.extraHeaders());
    return headers;
  }

  async open(req: BackendRequest, call: AttemptCall, signal: UpstreamSignal): Promise<UpstreamResponse> {
    const headers = this.callHeaders(req, call, req.raw?.accept ?? (req.stream ? "text/event-stream" : "application/json"));
    const limits = this.connections.limits;
    const label = `worker ${this.worker.id}`;
    // A stream's events as they come, a whole answer's bytes at its end: without a body stream (answer-dispatch.ts).
    if (req.stream && !req.raw) return this.openStream(req, headers, signal, label);
    if (!req.raw) return this.openWhole(req, headers, signal, label);
    // Raw bytes (hidden states): relayed as a stream of their own, read through request()'s body.
    let res;
    try {
      res = await this.connections.pool(this.origin).request({ ...this.post(req, headers), signal });
    } catch (err) {
      throw classify(err, signal);
    }
    if (res.statusCode < 200 || res.statusCode >= 300) throw this.refused(res.statusCode, await errorBodyText(res.body));
    // A worker's answer is untrusted: bounded as it is read, and only the
    // headers the router means to expose pass (transport.ts).
    const body = res.body;
    const what = `${label}'s answer`;
    checkDeclaredLength(body, res.headers["content-length"], limits.maxRawBodyBytes, what);
    const notRaw = notReadAs(label, "raw bytes");
    const relayed = rawRelayHeaders(res.headers);
    // Hidden states: the prompt tokens the worker computed (the checked
    // header), counted toward the tenant's tokens per minute and on its ledger row.
    const tokens = relayed["x-switchyard-tokens"];
    return {
      raw: () => ({
        headers: relayed,
        ...(tokens !== undefined ? { usage: { prompt: Number(tokens), completion: 0, cached: 0, cacheWrite: 0 } } : {}),
        body: (async function* () {
          try {
            yield* boundedBody(body, limits.maxRawBodyBytes, what);
          } catch (err) {
            throw classify(err, signal);
          }
        })(),
      }),
      text: notRaw,
      events: notRaw,
      abort: () => {
        body.destroy();
      },
    };
  }

  /**
   * The prompt's tokens by the worker's engine (POST /v1/tokenize: its model's
   * own tokenizer through its chat template, tools included as a generation
   * renders them), without generating. The same worker call as `open` — the
   * credential, the lease's fencing, a 4xx passed through, anything else
   * another worker may answer — with a small JSON answer, bounded and checked.
   */
  async countTokens(req: CountRequest, call: AttemptCall, signal: UpstreamSignal): Promise<number> {
    const label = `worker ${this.worker.id}`;
    let res;
    try {
      res = await this.connections.pool(this.origin).request({ ...this.post({ ...req, path: "/v1/tokenize" }, this.callHeaders(req, call, "application/json")), signal });
    } catch (err) {
      throw classify(err, signal);
    }
    if (res.statusCode < 200 || res.statusCode >= 300) throw this.refused(res.statusCode, await errorBodyText(res.body));
    let text: string;
    try {
      text = await readBodyText(res.body, COUNT_ANSWER_MAX_BYTES, `${label}'s token count`, res.headers["content-length"]);
    } catch (err) {
      throw classify(err, signal);
    }
    return countFrom(text, "count", label);
  }

  /**
   * The worker call's undici options: the route under the worker's base path,
   * the attempt's body. A client that named an alias (`routing.models`) asked
   * for a model the worker knows by another name: the body names the worker's
   * (a worker refuses a model it has not loaded).
   */
  private post(req: Pick<BackendRequest, "body" | "fields"> & { path: string }, headers: Record<string, string>) {
    const named = this.model === "" || req.body.model === this.model ? req : { body: req.body, fields: { ...req.fields, model: this.model } };
    return { path: this.basePath + req.path, method: "POST" as const, headers, body: upstreamJson(named) };
  }

  /** A streamed request: its answer's events straight from undici's parser into the relay's queue. */
  private async openStream(req: BackendRequest, headers: Record<string, string>, signal: UpstreamSignal, label: string): Promise<UpstreamResponse> {
    const limits = this.connections.limits;
    let answer: SseAnswer;
    try {
      answer = await dispatchSse(
        this.connections.pool(this.origin),
        this.post(req, headers),
        signal,
        // Failures classified where they happen, as the relay's reader expects (SseBatchQueue's mapError).
        { maxEventBytes: limits.maxEventBytes, label, mapError: (err) => classify(err, signal) },
      );
    } catch (err) {
      throw classify(err, signal);
    }
    this.connections.held(answer.heldMs);
    if (answer.statusCode < 200 || answer.statusCode >= 300) throw this.refused(answer.statusCode, await answer.errorText());
    return new StreamedAnswer(answer, label);
  }

  /** A whole (JSON) answer: its bytes gathered within the body limit as they come. */
  private async openWhole(req: BackendRequest, headers: Record<string, string>, signal: UpstreamSignal, label: string): Promise<UpstreamResponse> {
    let answer: WholeAnswer;
    try {
      answer = await dispatchWhole(
        this.connections.pool(this.origin),
        this.post(req, headers),
        signal,
        { maxBytes: this.connections.limits.maxBodyBytes, what: `${label}'s answer` },
      );
    } catch (err) {
      throw classify(err, signal);
    }
    this.connections.held(answer.heldMs);
    if (answer.statusCode < 200 || answer.statusCode >= 300) throw this.refused(answer.statusCode, await answer.errorText());
    return new WholeBytes(answer, signal, label);
  }

  /**
   * A worker's non-2xx answer as the failure it is. 4xx other than
   * overload/timeout means the request itself is wrong: another worker
   * would refuse it too, so pass it through. A 404 is about this worker (a
   * stale registry entry no longer serving the model): another one may serve it.
   */
  private refused(s: number, body: string): UpstreamFailure {
    const upstreamError = upstreamErrorOf(body);
    const clientError = s >= 400 && s < 500 && s !== 404 && s !== 408 && s !== 429 && s !== 401 && s !== 403;
    return new UpstreamFailure(
      clientError ? "client_error" : "bad_status",
      `worker ${this.worker.id} answered ${s}${upstreamError?.message ? `: ${upstreamError.message}` : ""}`,
      !clientError,
      s,
      upstreamError,
    );
  }
}
