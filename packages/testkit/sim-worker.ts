// Sim worker: a test fixture (not a backend) that speaks the worker HTTP API
// and heartbeats like a real worker, with configurable timing and faults.
// Used by router tests, the router benchmark and the backend contract suite
// (which drives it with the shared Scenario, like the provider fakes).
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { RegistryStore, WorkerRecord, WorkerState } from "@switchyard/state";
import type { Scenario } from "./scenario.ts";
import { FENCING_SIGNATURE_HEADER } from "@switchyard/state";
import { FENCING_HEADER, FencingGuard, WORKER_LISTEN_BACKLOG } from "@switchyard/agent";

export interface SimBehavior {
  /** Delay before response headers. */
  headersDelayMs: number;
  /** Delay between headers and the first token event. */
  ttftMs: number;
  /** Delay between token events. */
  interTokenMs: number;
  /** Tokens per completion. */
  tokens: number;
  /** Answer with this status (and an OpenAI error body) instead of serving. */
  failStatus?: number;
  /** Destroy the socket before sending headers. */
  resetBeforeHeaders?: boolean;
  /** Destroy the socket after this many SSE events. */
  dropAfterEvents?: number;
  /** End the response cleanly (no [DONE]) after this many events. */
  truncateAfterEvents?: number;
  /** Stop sending (but keep the connection) after this many events; 0 = before the first. */
  stallAfterEvents?: number;
  /** Never send headers. */
  stallBeforeHeaders?: boolean;
  /** Message of the `failStatus` error body (default "sim failure <status>"). */
  failMessage?: string;
  /** The completion, cut into `tokens` pieces (default "tok0 tok1 …"). */
  text?: string;
  /** Prompt tokens reported in usage (default 7). */
  promptTokens?: number;
  /** Report no usage, even when stream_options.include_usage asks for it. */
  omitUsage?: boolean;
  /** A non-streamed answer whose every "\u0001" in the JSON text is sent as the byte 0xff: bytes that are not UTF-8 (a broken upstream). */
  notUtf8?: boolean;
  /** ": keep-alive" comments before the first event (default 1). */
  keepAlives?: number;
  /**
   * An engine failure after this many tokens: streamed, the worker's own
   * error event and the end of the response (no [DONE]); not streamed, a 503
   * `engine_error` — what a real worker does (workers/agent/src/server/generate.ts).
   */
  errorAfterTokens?: number;
  /** Message of that engine failure. */
  errorMessage?: string;
  /**
   * Token delays grow with concurrency, as a GPU's batch steps do:
   * × (1 + loadSlowdown × (in flight − 1) / capacity), read at every token.
   */
  loadSlowdown?: number;
}

export interface SimWorkerOptions {
  id: string;
  models?: string[];
  registry?: RegistryStore;
  heartbeatMs?: number;
  ttlMs?: number;
  state?: WorkerState;
  capacity?: number;
  /**
   * A saturated GPU: at most this many sequences decode at once, the rest
   * wait first in, first out (queueDepth in heartbeats; inFlight still counts
   * every request held, as the agent does); per-token time stays fixed.
   * Capacity defaults to it. Unset: every request decodes at once.
   */
  slots?: number;
  token?: string;
  /** The routers' public fencing key: then only router-signed fencing tokens count, as on an invited worker. */
  fencingKey?: string;
  behavior?: Partial<SimBehavior>;
  /** Shapes every request that has no `sim` override and no queued scenario. */
  defaultScenario?: Scenario;
  host?: string;
  port?: number;
}

const defaults: SimBehavior = { headersDelayMs: 0, ttftMs: 0, interTokenMs: 0, tokens: 5 };

/**
 * The knobs a shared Scenario stands for; a scenario starts from the
 * zero-delay defaults. Cache and cost fields are ignored: a worker reports
 * neither (workers/agent/src/server/generate.ts).
 */
export function behaviorFor(s: Scenario): Partial<SimBehavior> {
  switch (s.kind) {
    case "ok":
      return {
        text: s.text,
        tokens: s.completionTokens ?? (s.text === undefined ? defaults.tokens : wordCount(s.text)),
        promptTokens: s.promptTokens,
        interTokenMs: s.interTokenMs ?? 0,
        keepAlives: s.keepAlives,
      };
    case "status":
      return { failStatus: s.status, failMessage: s.message };
    case "midstream_error":
      return { tokens: Math.max(defaults.tokens, s.afterTokens), errorAfterTokens: s.afterTokens, errorMessage: s.message };
    case "no_usage":
      return { text: s.text, tokens: s.completionTokens ?? (s.text === undefined ? defaults.tokens : wordCount(s.text)), omitUsage: true };
    case "slow":
      return { interTokenMs: s.interTokenMs, tokens: s.completionTokens };
    case "stall":
      return { ttftMs: s.stallMs };
  }
}

const wordCount = (text: string) => Math.max(1, (text.match(/\S+\s*|\s+/g) ?? []).length);

/** Piece `i` of the completion: `text` cut evenly into `tokens` pieces, or "tok<i> ". */
function pieceOf(b: SimBehavior, i: number): string {
  if (b.text === undefined) return `tok${i} `;
  const n = Math.max(1, b.tokens);
  return b.text.slice(Math.floor((i * b.text.length) / n), Math.floor(((i + 1) * b.text.length) / n));
}

function usageOf(b: SimBehavior): { prompt_tokens: number; completion_tokens: number; total_tokens: number } {
  const prompt = b.promptTokens ?? 7;
  return { prompt_tokens: prompt, completion_tokens: b.tokens, total_tokens: prompt + b.tokens };
}

/** The worker's own mid-stream error event, as workers/agent/src/server/errors.ts writes it. */
function engineErrorEvent(message: string): string {
  return JSON.stringify({ error: { message, type: "server_error", param: null, code: "engine_error" } });
}

const sleep = (ms: number) => (ms > 0 ? new Promise<void>((r) => setTimeout(r, ms)) : Promise.resolve());

/**
 * How many pieces of this completion the request already holds at its end
 * (chat: a final assistant message to continue; completions: the prompt).
 */
function continuedPieces(b: SimBehavior, body: Record<string, unknown>, chat: boolean): number {
  let input: string;
  if (chat) {
    const messages = Array.isArray(body.messages) ? (body.messages as Array<{ role?: string; content?: unknown }>) : [];
    const last = messages.at(-1);
    if (last?.role !== "assistant" || typeof last.content !== "string") return 0;
    input = last.content;
  } else {
    const p = Array.isArray(body.prompt) ? body.prompt[0] : body.prompt;
    if (typeof p !== "string") return 0;
    input = p;
  }
  const prefixes: string[] = [];
  let acc = "";
  for (let i = 0; i < b.tokens; i++) prefixes.push((acc += pieceOf(b, i)));
  for (let k = prefixes.length; k > 0; k--) if (input.endsWith(prefixes[k - 1]!)) return k;
  return 0;
}

export class SimWorker {
  readonly id: string;
  readonly models: string[];
  behavior: SimBehavior;
  /** Shapes requests with no `sim` override when nothing is enqueued; none: `behavior` does. */
  defaultScenario: Scenario | undefined;
  state: WorkerState;
  inFlight = 0;
  /** Requests served, by path. */
  readonly served = new Map<string, number>();
  /** The W3C traceparent of every request served that carried one (the router's attempt span). */
  readonly traceparents: string[] = [];
  /** Requests whose client (the router) went away before the response ended. */
  aborted = 0;
  lastRequestHeaders: IncomingMessage["headers"] | undefined;
  /** The last request's body (continuations: what the router replayed). */
  lastBody: Record<string, unknown> | undefined;
  /** The last request's body as the bytes it came in (decoded as UTF-8). */
  lastBodyText: string | undefined;
  /** Lease fencing, as the real worker does it (workers/agent/src/server/fencing.ts). */
  readonly fencing: FencingGuard;
  /** Every request that carried a fencing token, in arrival order, and whether it was accepted. */
  readonly fenceLog: Array<{ token: number; accepted: boolean; at: number }> = [];
  private server: Server | undefined;
  private beat: NodeJS.Timeout | undefined;
  private startedAt = Date.now();
  url = "";
  private readonly abortWaiters = new Set<() => void>();
  private readonly queue: Scenario[] = [];
  /** With `slots`: sequences decoding now, and turns waiting for a slot in arrival order. */
  decoding = 0;
  private readonly slotQueue = new Set<() => void>();

  constructor(private readonly opts: SimWorkerOptions) {
    this.id = opts.id;
    this.fencing = new FencingGuard(undefined, opts.fencingKey ? { workerId: opts.id, publicKey: opts.fencingKey } : undefined);
    this.models = opts.models ?? ["sim-model"];
    this.behavior = { ...defaults, ...opts.behavior };
    this.state = opts.state ?? "ready";
    this.defaultScenario = opts.defaultScenario;
  }

  /** Scenarios for the next requests, one each, first in first out (auth failures and `sim` overrides consume none). */
  enqueue(...scenarios: Scenario[]): this {
    this.queue.push(...scenarios);
    return this;
  }

  async start(): Promise<this> {
    this.server = createServer((req, res) => void this.handle(req, res));
    this.server.keepAliveTimeout = 60_000;
    // The real worker's accept queue, not Node's 511.
    await new Promise<void>((resolve) => this.server!.listen({ port: this.opts.port ?? 0, host: this.opts.host ?? "127.0.0.1", backlog: WORKER_LISTEN_BACKLOG }, resolve));
    const addr = this.server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${addr.port}`;
    if (this.opts.registry) {
      await this.heartbeat();
      this.beat = setInterval(() => void this.heartbeat(), this.opts.heartbeatMs ?? 1000);
    }
    return this;
  }

  record(): WorkerRecord {
    return {
      id: this.id,
      url: this.url,
      models: this.models,
      state: this.state,
      inFlight: this.inFlight,
      queueDepth: this.slotQueue.size,
      capacity: this.opts.capacity ?? this.opts.slots ?? 64,
      device: "sim",
      layerRanges: [],
      prefixes: [],
      version: "sim",
      startedAt: this.startedAt,
      updatedAt: Date.now(),
      ttlMs: this.ttlMs,
    };
  }

  private get ttlMs(): number {
    return this.opts.ttlMs ?? 3000;
  }

  async heartbeat(): Promise<void> {
    await this.opts.registry?.publish(this.record(), this.ttlMs).catch(() => {});
  }

  /** Stop heartbeating without deregistering: the record expires by TTL. */
  stopHeartbeats(): void {
    if (this.beat) clearInterval(this.beat);
    this.beat = undefined;
  }

  /** Resolves when the next request is aborted by its client. */
  nextAbort(): Promise<void> {
    return new Promise((resolve) => this.abortWaiters.add(resolve));
  }

  async stop(opts: { deregister?: boolean } = {}): Promise<void> {
    this.stopHeartbeats();
    if (opts.deregister !== false) await this.opts.registry?.remove(this.id).catch(() => {});
    if (this.server) {
      this.server.closeAllConnections();
      await new Promise<void>((r) => this.server!.close(() => r()));
    }
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    this.lastRequestHeaders = req.headers;
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (this.opts.token && req.headers.authorization !== `Bearer ${this.opts.token}`) {
      return this.error(res, 401, "invalid worker token");
    }
    const fenceHeader = req.headers[FENCING_HEADER] as string | undefined;
    const verdict = this.fencing.admit(fenceHeader, req.headers[FENCING_SIGNATURE_HEADER] as string | undefined);
    if (fenceHeader !== undefined) this.fenceLog.push({ token: Number(fenceHeader), accepted: verdict.ok, at: Date.now() });
    if (!verdict.ok) return this.error(res, verdict.status, verdict.message, verdict.code);
    let body: Record<string, unknown>;
    const bodyText = Buffer.concat(chunks).toString("utf8");
    try {
      body = JSON.parse(bodyText);
    } catch {
      return this.error(res, 400, "invalid JSON");
    }
    const path = req.url ?? "";
    this.lastBody = body;
    this.lastBodyText = bodyText;
    this.served.set(path, (this.served.get(path) ?? 0) + 1);
    const traceparent = req.headers.traceparent;
    if (typeof traceparent === "string") this.traceparents.push(traceparent);
    // As a real worker (workers/agent/src/server/request.ts): only the models
    // it advertises, by their own names (a router's alias never reaches it).
    if (typeof body.model !== "string" || !body.model) return this.error(res, 400, "model: required", "invalid_request");
    if (!this.models.includes(body.model)) return this.error(res, 404, `model '${body.model}' is not loaded on this worker`, "model_not_found");
    this.inFlight++;
    let closed = false;
    res.on("close", () => {
      closed = true;
      this.inFlight--;
      if (!res.writableFinished) {
        this.aborted++;
        for (const w of this.abortWaiters) w();
        this.abortWaiters.clear();
      }
    });
    // Benchmarks may shape one request through `sim` in the body; otherwise
    // a queued (or default) scenario decides it, and failing that `behavior`.
    const override = typeof body.sim === "object" && body.sim !== null ? (body.sim as Partial<SimBehavior>) : undefined;
    const scenario = override ? undefined : (this.queue.shift() ?? this.defaultScenario);
    const b = override ? { ...this.behavior, ...override } : scenario ? { ...defaults, ...behaviorFor(scenario) } : this.behavior;
    if (b.stallBeforeHeaders) return; // hold the request open, send nothing
    await sleep(b.headersDelayMs);
    if (closed) return;
    if (b.resetBeforeHeaders) {
      req.socket.destroy();
      return;
    }
    if (b.failStatus) return this.error(res, b.failStatus, b.failMessage ?? `sim failure ${b.failStatus}`);
    const model = body.model;
    if (path === "/v1/embeddings") return this.embeddings(res, body, model);
    // A prompt counted (the real worker's engine Tokenize): the prompt tokens a chat answer of it reports.
    if (path === "/v1/tokenize") return this.json(res, { count: b.promptTokens ?? 7, max_model_len: 4096 });
    const chat = path === "/v1/chat/completions";
    if (body.stream === true) return this.stream(res, body, model, chat, () => closed, b);
    // Not streamed, an engine failure is a status before any byte.
    if (b.errorAfterTokens !== undefined) return this.error(res, 503, b.errorMessage ?? "engine error", "engine_error");
    if (!(await this.takeSlot(res))) return;
    await sleep(b.ttftMs + b.interTokenMs * Math.max(0, b.tokens - 1));
    if (closed) return;
    const text = Array.from({ length: b.tokens }, (_, i) => pieceOf(b, i)).join("");
    const usage = b.omitUsage ? undefined : usageOf(b);
    const id = `cmpl-${this.id}-${Date.now()}`;
    const created = Math.floor(Date.now() / 1000);
    const payload = chat
      ? { id, object: "chat.completion", created, model, choices: [{ index: 0, message: { role: "assistant", content: text }, finish_reason: "stop", logprobs: null }], usage }
      : { id, object: "text_completion", created, model, choices: [{ index: 0, text, finish_reason: "stop", logprobs: null }], usage };
    res.writeHead(200, { "content-type": "application/json" });
    const json = JSON.stringify(payload);
    res.end(b.notUtf8 ? Buffer.from(json.replaceAll("\\u0001", "\u0001"), "utf8").map((c) => (c === 1 ? 0xff : c)) : json);
  }

  private async stream(res: ServerResponse, body: Record<string, unknown>, model: string, chat: boolean, closed: () => boolean, b: SimBehavior) {
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
    res.flushHeaders();
    const id = `cmpl-${this.id}-${Date.now()}`;
    const created = Math.floor(Date.now() / 1000);
    const includeUsage = (body.stream_options as { include_usage?: boolean } | undefined)?.include_usage === true && !b.omitUsage;
    const events: string[] = [];
    const failAt = b.errorAfterTokens;
    // A continuation (the router resuming a broken stream) carries the answer
    // so far: go on from there, as a deterministic model would.
    const skip = continuedPieces(b, body, chat);
    for (let i = skip; i < (failAt === undefined ? b.tokens : Math.min(failAt, b.tokens)); i++) {
      const text = pieceOf(b, i);
      events.push(
        JSON.stringify(
          chat
            ? { id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta: i === skip ? { role: "assistant", content: text } : { content: text }, finish_reason: null, logprobs: null }] }
            : { id, object: "text_completion", created, model, choices: [{ index: 0, text, finish_reason: null, logprobs: null }] },
        ),
      );
    }
    if (failAt !== undefined) {
      // The engine failed: the worker's one error event, then the end.
      events.push(engineErrorEvent(b.errorMessage ?? "engine error"));
    } else {
      events.push(
        JSON.stringify(
          chat
            ? { id, object: "chat.completion.chunk", created, model, choices: [{ index: 0, delta: {}, finish_reason: "stop", logprobs: null }] }
            : { id, object: "text_completion", created, model, choices: [{ index: 0, text: "", finish_reason: "stop", logprobs: null }] },
        ),
      );
      if (includeUsage) {
        const u = usageOf(b);
        const usage = skip === 0 ? u : { prompt_tokens: u.prompt_tokens + skip, completion_tokens: u.completion_tokens - skip, total_tokens: u.total_tokens };
        events.push(JSON.stringify({ id, object: chat ? "chat.completion.chunk" : "text_completion", created, model, choices: [], usage }));
      }
      events.push("[DONE]");
    }
    const faulty = b.dropAfterEvents !== undefined || b.truncateAfterEvents !== undefined || b.stallAfterEvents !== undefined;
    // A keep-alive comment first, as real upstreams send: it is not progress.
    for (let k = 0; k < (b.keepAlives ?? 1); k++) res.write(": keep-alive\n\n");
    // Headers are out at once (as a real worker's are); decoding waits for a slot.
    if (!(await this.takeSlot(res))) return;
    for (let i = 0; i < events.length; i++) {
      if (b.stallAfterEvents !== undefined && i === b.stallAfterEvents) return; // hang
      if (b.dropAfterEvents !== undefined && i === b.dropAfterEvents) {
        res.socket?.destroy();
        return;
      }
      if (b.truncateAfterEvents !== undefined && i === b.truncateAfterEvents) {
        res.end();
        return;
      }
      // Tokens are paced; the finish, usage and [DONE] events follow the last
      // token at once, as real servers send them.
      const slow = b.loadSlowdown ? 1 + (b.loadSlowdown * Math.max(0, this.inFlight - 1)) / (this.opts.capacity ?? 64) : 1;
      if (i < b.tokens - skip) await sleep((i === 0 ? b.ttftMs : b.interTokenMs) * slow);
      if (closed()) return;
      const line = `data: ${events[i]}\n\n`;
      // With a fault pending, wait until each event is on the wire so the
      // fault happens after exactly N delivered events.
      if (faulty) await new Promise<void>((r) => res.write(line, () => r()));
      else res.write(line);
    }
    res.end();
  }

  /** Requests waiting for a decode slot (`slots` only). */
  get queueDepth(): number {
    return this.slotQueue.size;
  }

  /**
   * With `slots`: waits its turn for a decode slot, held until the response
   * closes (ended or abandoned). False when the client left while waiting.
   */
  private takeSlot(res: ServerResponse): Promise<boolean> {
    const slots = this.opts.slots;
    if (slots === undefined) return Promise.resolve(true);
    if (res.destroyed) return Promise.resolve(false);
    const hold = () => {
      this.decoding++;
      res.once("close", () => {
        this.decoding--;
        this.nextTurn();
      });
    };
    if (this.decoding < slots && this.slotQueue.size === 0) {
      hold();
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      const turn = () => {
        res.off("close", leave);
        hold();
        resolve(true);
      };
      const leave = () => {
        this.slotQueue.delete(turn);
        resolve(false);
      };
      this.slotQueue.add(turn);
      res.once("close", leave);
    });
  }

  private nextTurn(): void {
    while (this.decoding < (this.opts.slots ?? Infinity) && this.slotQueue.size > 0) {
      const turn = this.slotQueue.values().next().value as () => void;
      this.slotQueue.delete(turn);
      turn();
    }
  }

  private embeddings(res: ServerResponse, body: Record<string, unknown>, model: string) {
    const inputs = Array.isArray(body.input) ? (body.input as string[]) : [String(body.input)];
    const data = inputs.map((text, index) => {
      // Deterministic pseudo-embedding from the text's bytes, L2-normalised.
      const v = Array.from({ length: 8 }, (_, j) => Math.sin(j + [...text].reduce((a, ch) => a + ch.charCodeAt(0), 0)));
      const n = Math.hypot(...v);
      return { object: "embedding", index, embedding: v.map((x) => x / n) };
    });
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ object: "list", data, model, usage: { prompt_tokens: inputs.length * 3, total_tokens: inputs.length * 3 } }));
  }

  private json(res: ServerResponse, payload: unknown) {
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify(payload));
  }

  private error(res: ServerResponse, status: number, message: string, code: string | null = null) {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: { message, type: status >= 500 ? "server_error" : "invalid_request_error", param: null, code } }));
  }
}
