// The head shard's driver: it answers generations like a whole worker's
// engine (`call` yields Tokens events, then Done) while the model's blocks
// run down a pipeline. Each loop turn is one batched step: every running
// sequence's new rows (a prompt in one frame, or its last token) go through
// this shard's blocks in the local engine, the output rows go to the next
// shard as one binary STEP frame, and the reply — the last shard's samples —
// feeds the next turn. Up to `depth` steps (micro-batches over disjoint
// groups of sequences) are in flight at once, so the shards overlap.
import { create, toBinary, fromBinary } from "@bufbuild/protobuf";
import {
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
  type Loaded,
} from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { EngineError, type EngineClient, type RequestKind } from "../engine/client.ts";
import { DTYPE_F16, DTYPE_F32, encodeStep, FrameKind } from "./frame.ts";
import type { LazyShardLink } from "./link.ts";

/** What runGenerate needs of an engine: a whole worker's EngineClient, or a pipeline head. */
export interface GenerateEngine {
  call(kind: RequestKind, requestId: string): AsyncGenerator<Event>;
  cancel(requestId: string): void;
}

interface Seq {
  id: string;
  prompt: number;
  feed: number[];
  completion: number;
  cancelled: boolean;
  push(ev: Event): void;
  fail(err: Error): void;
}

export class PipelineHead implements GenerateEngine {
  private readonly seqs = new Map<string, Seq>();
  /** Sequences whose step is in flight. */
  private readonly busy = new Set<string>();
  private inFlight = 0;
  /** Steps in flight at most (micro-batches along the pipeline; 1 = one step at a time). */
  private readonly depth: number;
  /** Bytes of frames and of raw rows sent to the next shard (wire overhead), and the most steps seen in flight at once. */
  readonly wire = { frameBytes: 0, rowBytes: 0, maxStepsInFlight: 0 };

  constructor(
    private readonly engine: () => EngineClient | undefined,
    private readonly model: () => Loaded | undefined,
    private readonly next: LazyShardLink,
    private readonly opts: { f16?: boolean; depth?: number; log: (msg: string, fields?: Record<string, unknown>) => void },
  ) {
    this.depth = Math.max(1, opts.depth ?? 2);
  }

  async *call(kind: RequestKind, requestId: string): AsyncGenerator<Event> {
    if (kind.case !== "generate") throw new EngineError(ErrorCode.INVALID_REQUEST, "a pipeline head serves generations only");
    const g: Generate = kind.value;
    const engine = this.engine();
    const loaded = this.model();
    if (!engine?.alive || !loaded) throw new EngineError(ErrorCode.MODEL_NOT_LOADED, "the head shard is not loaded");
    const tok = await engine.once({ case: "tokenize", value: { $typeName: "switchyard.engine.v1.Tokenize", model: loaded.model, input: g.input } });
    if (tok.kind.case !== "tokenIds") throw new EngineError(ErrorCode.INTERNAL, "tokenize gave no ids");
    const ids = tok.kind.value.ids;
    if (ids.length >= loaded.maxSeqLen) {
      throw new EngineError(ErrorCode.CONTEXT_LENGTH, `prompt is ${ids.length} tokens; max_seq_len ${loaded.maxSeqLen} leaves no room to generate`);
    }
    const open = create(ShardOpenSchema, {
      model: loaded.model,
      seqId: requestId,
      capacity: Math.min(ids.length + g.maxTokens, loaded.maxSeqLen),
      maxTokens: g.maxTokens,
      temperature: g.temperature,
      topP: g.topP,
      topK: g.topK,
      ...(g.seed !== undefined ? { seed: g.seed } : {}),
      stop: g.stop,
      logprobs: g.logprobs,
      topLogprobs: g.topLogprobs,
    });
    await engine.once({ case: "shardOpen", value: open });
    try {
      await (await this.next.get()).request(FrameKind.OPEN, toBinary(ShardOpenSchema, open));
    } catch (err) {
      await this.closeLocal(requestId);
      throw new EngineError(ErrorCode.INTERNAL, `opening the sequence down the pipeline: ${(err as Error).message}`);
    }
    const queue: Event[] = [];
    let failure: Error | undefined;
    let wake: (() => void) | undefined;
    this.seqs.set(requestId, {
      id: requestId,
      prompt: ids.length,
      feed: [...ids],
      completion: 0,
      cancelled: false,
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

  cancel(requestId: string): void {
    const s = this.seqs.get(requestId);
    if (s) s.cancelled = true;
  }

  private async closeLocal(seqId: string): Promise<void> {
    const loaded = this.model();
    await this.engine()
      ?.once({ case: "shardClose", value: create(ShardCloseSchema, { model: loaded?.model ?? "", seqId }) })
      .catch(() => {});
  }

  private async closeEverywhere(seqId: string): Promise<void> {
    await this.closeLocal(seqId);
    const body = toBinary(ShardCloseSchema, create(ShardCloseSchema, { model: this.model()?.model ?? "", seqId }));
    await (await this.next.get().catch(() => undefined))?.request(FrameKind.CLOSE, body).catch(() => {});
  }

  private done(s: Seq, reason: FinishReason): void {
    this.seqs.delete(s.id);
    s.push(
      create(EventSchema, {
        requestId: s.id,
        kind: { case: "done", value: create(DoneSchema, { finishReason: reason, usage: create(UsageSchema, { promptTokens: s.prompt, completionTokens: s.completion }) }) },
      }),
    );
  }

  /**
   * Keeps up to `depth` steps in flight, each over its own group of
   * sequences (micro-batches): while one group's rows are on later shards,
   * this shard computes the next group's, so with many streams every shard
   * works at once. A sequence is in at most one step at a time, so its
   * tokens stay in order; a group re-forms from whoever is ready.
   */
  private schedule(): void {
    for (const s of [...this.seqs.values()]) {
      if (s.cancelled && !this.busy.has(s.id)) {
        this.done(s, FinishReason.CANCELLED);
        void this.closeEverywhere(s.id);
      }
    }
    while (this.inFlight < this.depth) {
      const ready = [...this.seqs.values()].filter((s) => !this.busy.has(s.id));
      if (ready.length === 0) return;
      const group = ready.slice(0, Math.ceil(ready.length / (this.depth - this.inFlight)));
      for (const s of group) this.busy.add(s.id);
      this.inFlight++;
      this.wire.maxStepsInFlight = Math.max(this.wire.maxStepsInFlight, this.inFlight);
      void this.step(group)
        .catch((err: unknown) => {
          const e = err instanceof EngineError ? err : new EngineError(ErrorCode.INTERNAL, `pipeline step failed: ${(err as Error).message}`);
          this.opts.log("pipeline step failed", { error: e.message, sequences: group.length });
          for (const s of group) {
            if (!this.seqs.has(s.id)) continue;
            this.seqs.delete(s.id);
            s.fail(e);
            void this.closeEverywhere(s.id);
          }
        })
        .finally(() => {
          for (const s of group) this.busy.delete(s.id);
          this.inFlight--;
          this.schedule();
        });
    }
  }

  private async step(step: Seq[]): Promise<void> {
    const engine = this.engine();
    const loaded = this.model();
    if (!engine?.alive || !loaded) throw new EngineError(ErrorCode.INTERNAL, "the head shard's engine is gone");
    const dtype = this.opts.f16 ? DTYPE_F16 : DTYPE_F32;
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
    const reply = await (await this.next.get()).request(FrameKind.STEP, frame, dtype);
    if (reply.kind !== FrameKind.SAMPLES) throw new EngineError(ErrorCode.INTERNAL, `the pipeline answered a step with frame kind ${reply.kind}`);
    const out = fromBinary(ShardOutputSchema, reply.body);
    if (out.samples.length !== step.length) throw new EngineError(ErrorCode.INTERNAL, `${out.samples.length} samples for ${step.length} sequences`);
    for (const [i, smp] of out.samples.entries()) {
      const s = step[i]!;
      if (smp.seqId !== s.id) throw new EngineError(ErrorCode.INTERNAL, `sample for ${smp.seqId} where ${s.id} was expected`);
      const t = smp.tokens ?? create(TokensSchema);
      s.completion += t.ids.length;
      if (t.ids.length > 0 || t.text !== "") s.push(create(EventSchema, { requestId: s.id, kind: { case: "tokens", value: t } }));
      if (smp.finishReason !== FinishReason.UNSPECIFIED) {
        this.done(s, smp.finishReason);
        await this.closeEverywhere(s.id);
      } else {
        s.feed = [...t.ids];
      }
    }
  }
}
