// Keeps one engine process alive: spawn, load models, warm up, and restart
// with backoff when it dies. When the accelerator fails (at start or at run
// time) it falls back to the CPU binary and reports `degraded`.
import { create } from "@bufbuild/protobuf";
import { DType, ErrorCode, ModelKind, ShardCloseSchema, ShardOpenSchema, ShardStepSchema, type Loaded } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import type { ResolvedModel } from "../models/fetch.ts";
import { EngineClient, EngineError } from "./client.ts";

/** Blocks [start, end) of a split model (a shard); absent: the whole model. */
export interface LayerRange {
  start: number;
  end: number;
}

export type EngineState = "warming" | "ready" | "degraded";

export interface SupervisorOptions {
  cpuBinary: string;
  /** A GPU build, when the device asked for is not the CPU. */
  gpuBinary?: string;
  device: "auto" | "cpu" | "cuda" | "metal";
  models: ResolvedModel[];
  maxBatch: number;
  maxSeqLen: number;
  /** Load only these blocks of the llama model(s): this worker is one shard of a split model. */
  layers?: LayerRange;
  threads?: number;
  log: (msg: string, fields?: Record<string, unknown>) => void;
  /** An engine owing an answer this long (ms) with no frame sent is killed and restarted; 0: never. */
  stallMs?: number;
  /** Backoff bounds for restarts. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

export class EngineSupervisor {
  client: EngineClient | undefined;
  state: EngineState = "warming";
  device = "unknown";
  readonly loaded = new Map<string, Loaded>();
  restarts = 0;
  private onCpuFallback = false;
  private stopping = false;
  private backoff: number;
  private readonly listeners = new Set<(s: EngineState) => void>();
  private readyWaiters: { resolve: () => void; reject: (err: Error) => void }[] = [];
  /** A load the engine refused for good (a layer range outside the model): no restart helps. */
  fatal: Error | undefined;

  constructor(private readonly opts: SupervisorOptions) {
    this.backoff = opts.minBackoffMs ?? 250;
  }

  onState(fn: (s: EngineState) => void): void {
    this.listeners.add(fn);
  }

  private setState(s: EngineState): void {
    this.state = s;
    for (const fn of this.listeners) fn(s);
    if (s !== "warming") {
      for (const w of this.readyWaiters.splice(0)) w.resolve();
    }
  }

  /** Resolves once an engine is loaded and warm. */
  whenReady(): Promise<void> {
    if (this.fatal) return Promise.reject(this.fatal);
    return this.state === "warming" ? new Promise((resolve, reject) => this.readyWaiters.push({ resolve, reject })) : Promise.resolve();
  }

  private binaryAndDevice(): { binary: string; device: string } {
    if (this.onCpuFallback || this.opts.device === "cpu" || !this.opts.gpuBinary) return { binary: this.opts.cpuBinary, device: "cpu" };
    return { binary: this.opts.gpuBinary, device: this.opts.device };
  }

  async start(): Promise<void> {
    for (;;) {
      if (this.stopping) return;
      try {
        await this.launch();
        return;
      } catch (err) {
        this.opts.log("engine failed to start", { error: (err as Error).message });
        if (err instanceof EngineError && err.code === ErrorCode.LOAD_FAILED && /layer range/.test(err.message)) {
          // Bad input, not a crash: restarting would refuse it again.
          this.fatal = new Error(`--layers ${this.opts.layers?.start}-${this.opts.layers?.end}: ${err.message}`);
          for (const w of this.readyWaiters.splice(0)) w.reject(this.fatal);
          await this.client?.shutdown();
          return;
        }
        if (!this.onCpuFallback && this.binaryAndDevice().device !== "cpu") {
          this.opts.log("falling back to the CPU engine");
          this.onCpuFallback = true;
          continue;
        }
        await this.sleepBackoff();
      }
    }
  }

  private async sleepBackoff(): Promise<void> {
    const ms = this.backoff;
    this.backoff = Math.min(this.backoff * 2, this.opts.maxBackoffMs ?? 30_000);
    await new Promise((r) => setTimeout(r, ms));
  }

  private async launch(): Promise<void> {
    const { binary, device } = this.binaryAndDevice();
    this.setState("warming");
    const client = new EngineClient({ binary, device, threads: this.opts.threads, onLog: (l) => this.opts.log("engine", { line: l }) });
    this.client = client;
    const ready = await client.ready;
    this.device = ready.device;
    this.loaded.clear();
    for (const m of this.opts.models) {
      const ev = await client.once({
        case: "loadModel",
        value: {
          $typeName: "switchyard.engine.v1.LoadModel",
          model: m.name,
          kind: m.kind,
          path: m.path,
          maxSeqLen: this.opts.maxSeqLen,
          maxBatch: this.opts.maxBatch,
          layerStart: m.kind === ModelKind.LLAMA_GGUF ? (this.opts.layers?.start ?? 0) : 0,
          layerEnd: m.kind === ModelKind.LLAMA_GGUF ? (this.opts.layers?.end ?? 0) : 0,
        },
      });
      if (ev.kind.case !== "loaded") throw new Error(`unexpected answer to load ${m.name}: ${ev.kind.case}`);
      this.loaded.set(m.name, ev.kind.value);
      this.opts.log("model loaded", { model: m.name, ms: Number(ev.kind.value.loadMs), bytes: Number(ev.kind.value.weightBytes) });
    }
    await this.warmup(client);
    // Watched from here on: loading and the first pass (a GPU compiling its
    // kernels) may take long and are not a stall.
    const stallMs = this.opts.stallMs ?? 60_000;
    if (stallMs > 0) client.watch(stallMs, (silentMs) => this.opts.log("engine stalled", { silent_ms: Math.round(silentMs), pid: client.pid, killing: true }));
    const started = Date.now();
    void client.exited.then(({ code, signal, stderrTail }) => {
      if (this.stopping || this.client !== client) return;
      const deviceError = /CUDA|Metal|device/i.test(stderrTail) && device !== "cpu";
      this.opts.log("engine died", { code, signal, restarting: true, ...(client.stallReason ? { stalled: true } : {}) });
      this.restarts++;
      if (Date.now() - started > 60_000) this.backoff = this.opts.minBackoffMs ?? 250;
      if (deviceError || code === 3) this.onCpuFallback = true;
      this.setState("warming");
      void this.sleepBackoff().then(() => {
        if (!this.stopping) void this.start();
      });
    });
    this.setState(this.onCpuFallback ? "degraded" : "ready");
  }

  /** One tiny pass through every model so the first real request is not the slow one. */
  private async warmup(client: EngineClient): Promise<void> {
    for (const m of this.opts.models) {
      const loaded = this.loaded.get(m.name);
      if (m.kind === ModelKind.LLAMA_GGUF && loaded && isShard(loaded)) {
        await warmShard(client, loaded);
      } else if (m.kind === ModelKind.LLAMA_GGUF) {
        for await (const _ of client.call({
          case: "generate",
          value: {
            $typeName: "switchyard.engine.v1.Generate",
            model: m.name,
            input: { case: "prompt", value: "Hello" },
            maxTokens: 2,
            temperature: 0,
            topP: 0,
            topK: 0,
            stop: [],
            logprobs: false,
            topLogprobs: 0,
            cacheSalt: "",
            n: 1,
            logitBias: {},
            frequencyPenalty: 0,
            presencePenalty: 0,
            repetitionPenalty: 0,
            minP: 0,
            echoPrompt: false,
            suffix: "",
          },
        }));
      } else {
        await client.once({ case: "embed", value: { $typeName: "switchyard.engine.v1.Embed", model: m.name, inputs: ["warm up"], tokenInputs: [] } });
      }
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await this.client?.shutdown();
  }
}

/** Whether a loaded llama model is one shard of a split model (not every block). */
export function isShard(l: Loaded): boolean {
  return l.kind === ModelKind.LLAMA_GGUF && (l.layerStart !== 0 || l.layerEnd !== l.nLayers);
}

/** A shard's warm-up: one row through its blocks (a token on the first shard, zeros on the others). */
async function warmShard(client: EngineClient, l: Loaded): Promise<void> {
  const seqId = "warmup";
  await client.once({ case: "shardOpen", value: create(ShardOpenSchema, { model: l.model, seqId, capacity: 4, maxTokens: 1 }) });
  try {
    const first = l.layerStart === 0;
    await client.once({
      case: "shardStep",
      value: create(ShardStepSchema, {
        model: l.model,
        seqs: [{ seqId, rows: 1, tokenIds: first ? [1] : [] }],
        ...(first ? {} : { activations: { dtype: DType.DTYPE_F32, shape: [1n, BigInt(l.hiddenSize)], data: new Uint8Array(4 * l.hiddenSize) } }),
      }),
    });
  } finally {
    await client.once({ case: "shardClose", value: create(ShardCloseSchema, { model: l.model, seqId }) });
  }
}
