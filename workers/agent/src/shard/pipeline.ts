// The head shard's driver: it answers generations like a whole worker's
// engine (`call` yields Tokens events, then Done) while the model's blocks
// run down a pipeline. Each loop turn is one batched step: every running
// sequence's new rows (a prompt in one frame, or its last token) go through
// this shard's blocks in the local engine, the output rows go to the next
// shard as one binary STEP frame, and the reply — the last shard's samples —
// feeds the next turn. Up to `depth` steps (micro-batches over disjoint
// groups of sequences) are in flight at once, so the shards overlap.
//
// The shards after this one come from a static `--next`, or per request from
// a router's route (registry/shard-route.ts): per stage the live replicas.
// When a replica is lost mid-stream (its connection closes, or a shard down
// the line reports it LOST), each of its sequences is rebuilt on a path
// around it: closed everywhere, reopened with the tokens it generated so far,
// and re-prefilled with prompt + those tokens, so its stream continues with
// the very next token — no error event, nothing repeated or missing.
// Every sequence over the connection the loss was found on is rebuilt (the
// loss is theirs too), each under a fresh id: the healthy shards before the
// lost one may still hold the old one until the retired connection closes.
import { randomBytes } from "node:crypto";
import { create, toBinary, fromBinary } from "@bufbuild/protobuf";
import {
  ChoiceDoneSchema,
  DoneSchema,
  ErrorCode,
  EventSchema,
  FinishReason,
  ShardCloseSchema,
  ShardOpenSchema,
  ShardOutputSchema,
  TokensSchema,
  UsageSchema,
  type Event,
  type Generate,
  type HiddenStates,
  type HiddenStatesResult,
  type Loaded,
  type ShardFence,
  type ShardOpen,
} from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { EngineError, type EngineClient, type RequestKind } from "../engine/client.ts";
import type { ShardRoute } from "@switchyard/state";
import { DTYPE_F16, DTYPE_F32, encodeStep, FrameKind } from "./frame.ts";
import { ShardLostError, ShardRefusedError, ShardRetiredError, type LazyShardLink, type ShardLink } from "./link.ts";
import { staticPath, type PipelinePath, type ShardPaths } from "./paths.ts";
import { pipelineHiddenStates } from "./hidden.ts";

/** What runGenerate needs of an engine: a whole worker's EngineClient, or a pipeline head. */
export interface GenerateEngine {
  call(kind: RequestKind, requestId: string): AsyncGenerator<Event>;
  cancel(requestId: string): void;
  /** Hidden states where the model's layers are spread over several shards (a pipeline head); a whole worker asks its engine. */
  hiddenStates?(req: HiddenStates): Promise<HiddenStatesResult>;
}

/** Times one sequence may be rebuilt around lost shards (each loss is one). */
const MAX_REBUILDS = 4;

interface Seq {
  /**
   * The sequence's id on the pipeline (every shard's engine and every STEP
   * frame): 64 random bits, 11 bytes, instead of the request id — each
   * decode row carries it, so it is the frame's per-row overhead. A rebuild
   * gets a new one.
   */
  id: string;
  /** The generation's request id (its events carry it). */
  requestId: string;
  promptIds: number[];
  /** Tokens generated so far (what a rebuilt pipeline re-prefills after the prompt). */
  generated: number[];
  feed: number[];
  completion: number;
  cancelled: boolean;
  open: ShardOpen;
  path: PipelinePath;
  /**
   * The connection it was opened on: its steps go over this one only (the
   * path's connection, once replaced, is one where it was never opened).
   */
  link: ShardLink;
  /**
   * A shard on the path of `link` (its connection then) was found lost, by
   * any sequence over it: rebuilt before its next step — unless it is on
   * another connection by then (a rebuild already under way moved it).
   */
  lost?: { at: number; worker: string; link: ShardLink };
  /** Routed sequences: the route, and the replicas this sequence lost. */
  route?: ShardRoute;
  avoid: Set<string>;
  rebuilds: number;
  /** When it last became ready for a step (the longest waiting go first). */
  readyAt: number;
  push(ev: Event): void;
  fail(err: Error): void;
}

/**
 * The request field a split model's pipeline cannot honour, if the
 * generation asks for one: its shards sample with temperature, top-p, top-k
 * and a seed only (ShardOpen), one choice, from a text or chat prompt.
 */
export function pipelineRefusal(g: Generate): string | undefined {
  if (g.n > 1) return "n";
  if (Object.keys(g.logitBias).length > 0) return "logit_bias";
  if (g.frequencyPenalty !== 0) return "frequency_penalty";
  if (g.presencePenalty !== 0) return "presence_penalty";
  if (g.repetitionPenalty !== 0 && g.repetitionPenalty !== 1) return "repetition_penalty";
  if (g.minP !== 0) return "min_p";
  if (g.echoPrompt) return "echo";
  if (g.suffix !== "") return "suffix";
  if (g.input.case === "promptTokens") return "prompt";
  // The shards sample without a grammar: refused rather than ignored.
  if (g.constraint) return g.constraint.toolChoice ? "tools" : "response_format";
  return undefined;
}

export class PipelineHead implements GenerateEngine {
  private readonly seqs = new Map<string, Seq>();
  /**
   * Requests between their start and their sequence joining `seqs`
   * (tokenizing, opening down the pipeline: up to several connection tries),
   * true once cancelled meanwhile: a cancel then is applied when it joins,
   * not lost while the sequence decodes on to its max_tokens.
   */
  private readonly starting = new Map<string, boolean>();
  /** Sequences whose step is in flight, or that are being rebuilt. */
  private readonly busy = new Set<Seq>();
  private inFlight = 0;
  /** Steps in flight at most, if set (micro-batches along the pipeline; 1 = one step at a time). */
  private readonly fixedDepth: number | undefined;
  /** Bytes of frames and of raw rows sent to the next shard (wire overhead), and the most steps seen in flight at once. */
  readonly wire = { frameBytes: 0, rowBytes: 0, maxStepsInFlight: 0 };
  /** Sequences rebuilt around a lost shard, and the last rebuild's loss → first step sent on the new path (ms). */
  readonly rebuilt = { sequences: 0, lastMs: 0 };

  constructor(
    private readonly engine: () => EngineClient | undefined,
    private readonly model: () => Loaded | undefined,
    /** The static pipeline (`--next`), if any. */
    private readonly next: LazyShardLink | undefined,
    private readonly opts: { f16?: boolean; depth?: number; paths?: ShardPaths; log: (msg: string, fields?: Record<string, unknown>) => void },
  ) {
    this.fixedDepth = opts.depth === undefined ? undefined : Math.max(1, opts.depth);
  }

  /**
   * Steps in flight at most: by default one per shard (estimated from this
   * shard's share of the blocks), so that with enough streams every shard has
   * a micro-batch to work on while the others are elsewhere — 2 for two
   * equal shards, 3 for three.
   */
  get depth(): number {
    if (this.fixedDepth !== undefined) return this.fixedDepth;
    const l = this.model();
    const own = l ? l.layerEnd - l.layerStart : 0;
    return own > 0 ? Math.max(2, Math.min(8, Math.ceil(l!.nLayers / own))) : 2;
  }

  /** Sequences open down the pipeline now (decoding, or being rebuilt). */
  get sequences(): number {
    return this.seqs.size;
  }

  /** Whether generations without a router's route can run (a static `--next`). */
  get hasStaticPath(): boolean {
    return this.next !== undefined;
  }

  /**
   * This head's generations along a router's route; `fence`: a lease on a
   * shard of the route, whose token that shard checks when each sequence
   * opens there (and on a rebuild's reopening).
   */
  routed(route: ShardRoute, fence?: ShardFence): GenerateEngine {
    return {
      call: (kind, requestId) => this.run(kind, requestId, route, fence),
      cancel: (id) => this.cancel(id),
      hiddenStates: (req) => this.hiddenStatesAlong(fence ? { ...req, fence } : req, route),
    };
  }

  call(kind: RequestKind, requestId: string): AsyncGenerator<Event> {
    return this.run(kind, requestId, undefined);
  }

  private async *run(kind: RequestKind, requestId: string, route: ShardRoute | undefined, fence?: ShardFence): AsyncGenerator<Event> {
    this.starting.set(requestId, false);
    try {
      yield* this.runStarted(kind, requestId, route, fence);
    } finally {
      this.starting.delete(requestId);
    }
  }

  private async *runStarted(kind: RequestKind, requestId: string, route: ShardRoute | undefined, fence?: ShardFence): AsyncGenerator<Event> {
    if (kind.case !== "generate") throw new EngineError(ErrorCode.INVALID_REQUEST, "a pipeline head serves generations only");
    const g: Generate = kind.value;
    const refused = pipelineRefusal(g);
    if (refused) throw new EngineError(ErrorCode.INVALID_REQUEST, `${refused}: not available on a split model`);
    if (g.input.case === "promptTokens") throw new EngineError(ErrorCode.INVALID_REQUEST, "prompt: token ids are not available on a split model");
    const engine = this.engine();
    const loaded = this.model();
    if (!engine?.alive || !loaded) throw new EngineError(ErrorCode.MODEL_NOT_LOADED, "the head shard is not loaded");
    if (!route && !this.next) throw new EngineError(ErrorCode.INVALID_REQUEST, "this head shard has no static next shard: a router's route is required");
    const tok = await engine.once({ case: "tokenize", value: { $typeName: "switchyard.engine.v1.Tokenize", model: loaded.model, input: g.input } });
    if (tok.kind.case !== "tokenIds") throw new EngineError(ErrorCode.INTERNAL, "tokenize gave no ids");
    const ids = tok.kind.value.ids;
    if (ids.length >= loaded.maxSeqLen) {
      throw new EngineError(ErrorCode.CONTEXT_LENGTH, `prompt is ${ids.length} tokens; max_seq_len ${loaded.maxSeqLen} leaves no room to generate`);
    }
    const wire = randomBytes(8).toString("base64url");
    const open = create(ShardOpenSchema, {
      model: loaded.model,
      seqId: wire,
      capacity: Math.min(ids.length + g.maxTokens, loaded.maxSeqLen),
      maxTokens: g.maxTokens,
      temperature: g.temperature,
      topP: g.topP,
      topK: g.topK,
      ...(g.seed !== undefined ? { seed: g.seed } : {}),
      stop: g.stop,
      logprobs: g.logprobs,
      topLogprobs: g.topLogprobs,
      ...(fence ? { fence } : {}),
    });
    const avoid = new Set<string>();
    const { path, link } = await this.openAlong(open, route, avoid);
    const queue: Event[] = [];
    let failure: Error | undefined;
    let wake: (() => void) | undefined;
    this.seqs.set(wire, {
      id: wire,
      requestId,
      promptIds: [...ids],
      generated: [],
      feed: [...ids],
      completion: 0,
      cancelled: this.starting.get(requestId) === true,
      open,
      path,
      link,
      ...(route ? { route } : {}),
      avoid,
      rebuilds: 0,
      readyAt: performance.now(),
      push: (ev) => {
        queue.push(ev);
        wake?.();
      },
      fail: (err) => {
        failure = err;
        wake?.();
      },
    });
    this.schedule();
    for (;;) {
      while (queue.length > 0) {
        const ev = queue.shift()!;
        yield ev;
        if (ev.kind.case === "done") return;
      }
      if (failure) throw failure;
      await new Promise<void>((r) => (wake = r));
      wake = undefined;
    }
  }

  /**
   * Opens a sequence here and down a path (the static one, or one through the
   * route avoiding `avoid`, which grows by each replica found lost on the
   * way); the path it is open on, and the connection.
   */
  private async openAlong(open: ShardOpen, route: ShardRoute | undefined, avoid: Set<string>): Promise<{ path: PipelinePath; link: ShardLink }> {
    const engine = this.engine();
    if (!engine?.alive) throw new EngineError(ErrorCode.MODEL_NOT_LOADED, "the head shard's engine is gone");
    await engine.once({ case: "shardOpen", value: open });
    for (let tries = 0; ; tries++) {
      const path = route ? this.opts.paths?.choose(route, avoid) : this.next ? staticPath(this.next) : undefined;
      if (!path) {
        await this.closeLocal(open.seqId);
        const gone = [...avoid].join(", ");
        throw new EngineError(ErrorCode.INTERNAL, `opening the sequence down the pipeline: ${gone ? `shard ${gone} lost and ` : ""}no live replica left for some stage of the route`);
      }
      let link: ShardLink | undefined;
      try {
        link = await path.link();
        await link.request(FrameKind.OPEN, toBinary(ShardOpenSchema, open));
        return { path, link };
      } catch (err) {
        if (route && err instanceof ShardLostError && tries < MAX_REBUILDS && !avoid.has(err.worker)) {
          this.lose(path, link, err.worker, avoid);
          continue;
        }
        // Another sequence's loss retired the connection just as this one opened on it: try a fresh one.
        if (route && err instanceof ShardRetiredError && tries < MAX_REBUILDS) {
          avoid.add(err.lost);
          continue;
        }
        await this.closeLocal(open.seqId);
        // A shard's refusal (a stale fencing token) is the client's answer, as a whole worker's would be.
        if (err instanceof ShardRefusedError) throw err;
        throw new EngineError(ErrorCode.INTERNAL, `opening the sequence down the pipeline: ${(err as Error).message}`);
      }
    }
  }

  /**
   * A replica of `path` is gone: avoided by this sequence, passed over by new
   * ones, and the connection it was found on retired (its shards then free
   * what was opened over it). Every other sequence over that connection lost
   * it too: each is rebuilt around it before its next step — stepping on
   * would reach a dead shard, or a new connection where it was never opened.
   */
  private lose(path: PipelinePath, link: ShardLink | undefined, worker: string, avoid: Set<string>): void {
    avoid.add(worker);
    this.opts.paths?.noteLost(worker);
    this.opts.paths?.retire(path.key, worker, link);
    if (!link) return;
    const at = Date.now();
    for (const o of this.seqs.values()) {
      if (o.link !== link || !o.route) continue;
      o.avoid.add(worker);
      o.lost ??= { at, worker, link };
    }
  }

  cancel(requestId: string): void {
    if (this.starting.has(requestId)) this.starting.set(requestId, true);
    for (const s of this.seqs.values()) if (s.requestId === requestId) s.cancelled = true;
  }

  /** Hidden states along the static pipeline. */
  hiddenStates(req: HiddenStates): Promise<HiddenStatesResult> {
    return this.hiddenStatesAlong(req, undefined);
  }

  /** Each layer from the shard that holds it (shard/hidden.ts), down the static pipeline or a path through the router's route. */
  private async hiddenStatesAlong(req: HiddenStates, route: ShardRoute | undefined): Promise<HiddenStatesResult> {
    const engine = this.engine();
    const loaded = this.model();
    if (!engine?.alive || !loaded) throw new EngineError(ErrorCode.MODEL_NOT_LOADED, "the head shard is not loaded");
    const path = route ? this.opts.paths?.choose(route, new Set()) : this.next ? staticPath(this.next) : undefined;
    if (!path) throw new EngineError(ErrorCode.INTERNAL, route ? "no live replica for some stage of the route" : "this head shard has no static next shard: a router's route is required");
    return pipelineHiddenStates(engine, loaded, req, () => path.link());
  }

  private async closeLocal(seqId: string): Promise<void> {
    const loaded = this.model();
    await this.engine()
      ?.once({ case: "shardClose", value: create(ShardCloseSchema, { model: loaded?.model ?? "", seqId }) })
      .catch(() => {});
  }

  private async closeEverywhere(s: Pick<Seq, "id" | "link">): Promise<void> {
    await this.closeLocal(s.id);
    const body = toBinary(ShardCloseSchema, create(ShardCloseSchema, { model: this.model()?.model ?? "", seqId: s.id }));
    // Over the connection it was opened on, never a new one: a closed one freed it on every shard already.
    await s.link.request(FrameKind.CLOSE, body).catch(() => {});
  }

  /** Its Done, as the engine's for one choice: the ChoiceDone names the stop sequence that ended it ("" for none). */
  private done(s: Seq, reason: FinishReason, stopSequence = ""): void {
    this.seqs.delete(s.id);
    const choice = create(ChoiceDoneSchema, { index: 0, finishReason: reason, completionTokens: s.completion, stopSequence });
    s.push(
      create(EventSchema, {
        requestId: s.requestId,
        kind: { case: "done", value: create(DoneSchema, { finishReason: reason, usage: create(UsageSchema, { promptTokens: s.promptIds.length, completionTokens: s.completion }), choices: [choice] }) },
      }),
    );
  }

  /**
   * A sequence whose pipeline lost a shard: closed on what is left of its
   * old path, reopened here and along a path around the loss with the tokens
   * it generated so far, and fed prompt + those tokens next (the last shard
   * then samples the token that comes after them).
   */
  private async rebuild(s: Seq, lostAt: number): Promise<void> {
    // What is left of the old path frees the sequence when its connection closes (lose() retired it).
    await this.closeLocal(s.id);
    // A fresh id: a healthy shard before the lost one may hold the old one until that connection closes.
    const id = randomBytes(8).toString("base64url");
    const open = create(ShardOpenSchema, { ...s.open, seqId: id, generated: s.generated });
    const { path, link } = await this.openAlong(open, s.route, s.avoid);
    if (this.seqs.get(s.id) !== s) {
      // Ended meanwhile (no path does so today): what was just opened goes
      // too, and its stream is told, never left waiting.
      await this.closeEverywhere({ id, link });
      s.fail(new EngineError(ErrorCode.INTERNAL, "the sequence ended while it was being rebuilt"));
      return;
    }
    this.seqs.delete(s.id);
    this.seqs.set(id, s);
    s.id = id;
    s.path = path;
    s.link = link;
    s.feed = [...s.promptIds, ...s.generated];
    this.rebuilt.sequences++;
    this.rebuilt.lastMs = Date.now() - lostAt;
    this.opts.log("pipeline rebuilt around a lost shard", { seq: s.id, lost: [...s.avoid], via: s.path.hops, tokens: s.generated.length, ms: this.rebuilt.lastMs });
  }

  private failSeq(s: Seq, e: Error): void {
    if (!this.seqs.has(s.id)) return;
    this.seqs.delete(s.id);
    s.fail(e);
    void this.closeEverywhere(s);
  }

  /**
   * Keeps up to `depth` steps in flight, each over its own group of
   * sequences (micro-batches): while one group's rows are on later shards,
   * this shard computes the next group's, so with many streams every shard
   * works at once. A sequence is in at most one step at a time, so its
   * tokens stay in order; a group re-forms from whoever is ready, and holds
   * sequences opened over one connection only (its STEP goes over that one).
   */
  private schedule(): void {
    for (const s of [...this.seqs.values()]) {
      if (this.busy.has(s)) continue;
      if (s.cancelled) {
        this.done(s, FinishReason.CANCELLED);
        void this.closeEverywhere(s);
      } else if (s.lost && s.lost.link !== s.link) s.lost = undefined;
      else if (s.lost) this.startRebuild(s, s.lost);
    }
    while (this.inFlight < this.depth) {
      const ready = [...this.seqs.values()].filter((s) => !this.busy.has(s)).sort((a, b) => a.readyAt - b.readyAt);
      if (ready.length === 0) return;
      const link = ready[0]!.link;
      const onLink = ready.filter((s) => s.link === link);
      // Groups of about equal size: a group re-forms from whoever is ready
      // when its step comes back, so one that started lopsided (streams
      // arriving one by one: 1 + 7, or 6 + 2) would stay so, and a pipeline
      // runs at its largest group's pace. So no group takes more than its
      // share of the connection's sequences; the rest wait for the next slot.
      const all = [...this.seqs.values()].filter((s) => s.link === link).length;
      const share = Math.ceil(all / this.depth);
      const group = onLink.slice(0, Math.min(share, Math.ceil(onLink.length / (this.depth - this.inFlight))));
      for (const s of group) this.busy.add(s);
      this.inFlight++;
      this.wire.maxStepsInFlight = Math.max(this.wire.maxStepsInFlight, this.inFlight);
      let deliver: (() => void) | undefined;
      void this.step(group)
        .then((d) => {
          deliver = d;
        })
        .catch((err: unknown) => {
          const e = err instanceof EngineError ? err : new EngineError(ErrorCode.INTERNAL, `pipeline step failed: ${(err as Error).message}`);
          for (const s of group) {
            if (!this.seqs.has(s.id)) continue;
            if (s.route && err instanceof ShardLostError) {
              // A loss marks every sequence over the connection (this group's too) for a rebuild.
              this.lose(s.path, s.link, err.worker, s.avoid);
              continue;
            }
            if (s.route && err instanceof ShardRetiredError) {
              // Retired by another's loss (marked then, or just after it opened here): rebuilt next, nobody more to blame.
              s.avoid.add(err.lost);
              s.lost ??= { at: Date.now(), worker: err.lost, link: s.link };
              continue;
            }
            this.opts.log("pipeline step failed", { error: e.message, seq: s.id });
            this.failSeq(s, e);
          }
        })
        .finally(() => {
          this.inFlight--;
          const now = performance.now();
          for (const s of group) {
            this.busy.delete(s);
            s.readyAt = now;
          }
          this.schedule();
          // The group's next step is on its way to the engine first; the streams' SSE work after it.
          if (deliver) setImmediate(deliver);
        });
    }
  }

  /** Rebuilds a sequence marked lost (it sits out of the steps meanwhile), or ends it with the loss when it may not be rebuilt again. */
  private startRebuild(s: Seq, lost: { at: number; worker: string }): void {
    s.lost = undefined;
    if (s.rebuilds >= MAX_REBUILDS) {
      this.failSeq(s, new EngineError(ErrorCode.INTERNAL, `shard ${lost.worker} lost, and the sequence was rebuilt ${MAX_REBUILDS} times already`));
      return;
    }
    s.rebuilds++;
    this.busy.add(s);
    void this.rebuild(s, lost.at)
      .catch((re: unknown) => this.failSeq(s, re instanceof EngineError || re instanceof ShardRefusedError ? re : new EngineError(ErrorCode.INTERNAL, (re as Error).message)))
      .finally(() => {
        this.busy.delete(s);
        s.readyAt = performance.now();
        this.schedule();
      });
  }

  /** One step of `step`'s sequences down the pipeline; what it returns hands their new text (and Done) to their streams. */
  private async step(step: Seq[]): Promise<() => void> {
    const engine = this.engine();
    const loaded = this.model();
    if (!engine?.alive || !loaded) throw new EngineError(ErrorCode.INTERNAL, "the head shard's engine is gone");
    const dtype = this.opts.f16 ? DTYPE_F16 : DTYPE_F32;
    const link = step[0]!.link;
    // Its steps go over the connection itself, not through the path: the path is told, or its sweep takes a busy connection for idle.
    step[0]!.path.touch();
    const ev = await engine.once({
      case: "shardStep",
      value: {
        $typeName: "switchyard.engine.v1.ShardStep",
        model: loaded.model,
        seqs: step.map((s) => ({ $typeName: "switchyard.engine.v1.ShardSeqRows", seqId: s.id, rows: s.feed.length, tokenIds: s.feed })),
        outDtype: dtype,
      },
    });
    if (ev.kind.case !== "shardOutput" || !ev.kind.value.activations) throw new EngineError(ErrorCode.INTERNAL, "the head shard gave no activations");
    const rows = ev.kind.value.activations.data;
    const frame = encodeStep(step.map((s) => ({ seqId: s.id, rows: s.feed.length })), loaded.hiddenSize, rows);
    this.wire.rowBytes += rows.length;
    this.wire.frameBytes += frame.length + 12;
    const reply = await link.request(FrameKind.STEP, frame, dtype);
    if (reply.kind !== FrameKind.SAMPLES) throw new EngineError(ErrorCode.INTERNAL, `the pipeline answered a step with frame kind ${reply.kind}`);
    const out = fromBinary(ShardOutputSchema, reply.body);
    if (out.samples.length !== step.length) throw new EngineError(ErrorCode.INTERNAL, `${out.samples.length} samples for ${step.length} sequences`);
    for (const [i, smp] of out.samples.entries()) {
      if (smp.seqId !== step[i]!.id) throw new EngineError(ErrorCode.INTERNAL, `sample for ${smp.seqId} where ${step[i]!.id} was expected`);
    }
    const events: (() => void)[] = [];
    for (const [i, smp] of out.samples.entries()) {
      const s = step[i]!;
      const t = smp.tokens ?? create(TokensSchema);
      s.completion += t.ids.length;
      s.generated.push(...t.ids);
      const ev = t.ids.length > 0 || t.text !== "" ? create(EventSchema, { requestId: s.requestId, kind: { case: "tokens", value: t } }) : undefined;
      if (smp.finishReason !== FinishReason.UNSPECIFIED) {
        // Out of the schedule now; its last text and Done go out with the others'.
        this.seqs.delete(s.id);
        const reason = smp.finishReason;
        const stop = smp.stopSequence;
        events.push(() => {
          if (ev) s.push(ev);
          this.done(s, reason, stop);
        });
        // Not awaited: the group's next step need not wait for this engine to get to the close.
        void this.closeEverywhere(s);
      } else {
        s.feed = [...t.ids];
        if (ev) events.push(() => s.push(ev));
      }
    }
    return () => {
      for (const e of events) e();
    };
  }
}
