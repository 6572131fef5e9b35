// Memory planning before a model loads: the engine reads the GGUF's header
// (`switchyard-engine plan`) and reports the bytes its weights take on the
// CPU kernels and the KV bytes per token — for a shard, of its blocks only; the agent adds the KV of
// maxBatch sequences of maxSeqLen positions and refuses models that do not
// fit the memory budget, with an error that says why, instead of being
// killed by the OOM killer halfway through loading.
import { execFile } from "node:child_process";
import { readFileSync } from "node:fs";
import os from "node:os";
import { promisify } from "node:util";

const run = promisify(execFile);

export interface ModelPlan {
  weightBytes: number;
  kvBytesPerToken: number;
  overheadBytes: number;
  trainCtx: number;
}

/** The plan of the whole model, or of blocks [start, end) as a shard loads them. */
export async function planModel(binary: string, file: string, layers?: { start: number; end: number }): Promise<ModelPlan> {
  const range = layers ? ["--layers", `${layers.start}-${layers.end}`] : [];
  const { stdout } = await run(binary, ["plan", "--model", file, ...range, "--json"], { maxBuffer: 1 << 20 }).catch((err: Error & { stderr?: string }) => {
    // The engine's own words (a bad range, an unreadable file), not execFile's command line.
    const why = err.stderr?.trim().replace(/^plan: /, "");
    throw new Error(why ? `${layers ? `--layers ${layers.start}-${layers.end}: ` : ""}${why}` : err.message);
  });
  const p = (JSON.parse(stdout) as { plan: { weight_bytes: number; kv_bytes_per_token: number; overhead_bytes: number; train_ctx: number } }).plan;
  return { weightBytes: p.weight_bytes, kvBytesPerToken: p.kv_bytes_per_token, overheadBytes: p.overhead_bytes, trainCtx: p.train_ctx };
}

/** The host's memory, or the cgroup's limit where one is set and lower. */
export function defaultMemoryBudget(): number {
  let budget = os.totalmem();
  try {
    const max = readFileSync("/sys/fs/cgroup/memory.max", "utf8").trim();
    if (max !== "max" && Number(max) > 0) budget = Math.min(budget, Number(max));
  } catch {
    // No cgroup v2 limit readable: the host's memory it is.
  }
  return budget;
}

const mib = (b: number) => `${(b / 1048576).toFixed(0)} MiB`;

/**
 * Throws unless every model fits together: weights + overhead + KV for
 * maxBatch sequences of min(maxSeqLen, trained context) positions each.
 */
export function checkFits(plans: { name: string; plan: ModelPlan }[], opts: { maxBatch: number; maxSeqLen: number; budget: number }): void {
  let total = 0;
  const parts: string[] = [];
  for (const { name, plan } of plans) {
    const ctx = Math.min(opts.maxSeqLen, plan.trainCtx);
    const kv = plan.kvBytesPerToken * opts.maxBatch * ctx;
    const need = plan.weightBytes + plan.overheadBytes + kv;
    total += need;
    parts.push(`${name}: weights ${mib(plan.weightBytes)} + KV ${mib(kv)} (${opts.maxBatch} sequences × ${ctx} positions × ${plan.kvBytesPerToken} B) + ${mib(plan.overheadBytes)} overhead`);
  }
  if (total > opts.budget) {
    throw new Error(
      `the models need ${mib(total)} but the memory budget is ${mib(opts.budget)} (${parts.join("; ")}); ` +
        "lower --max-batch or --max-seq-len, serve fewer or smaller models, or raise --memory-budget-mb",
    );
  }
}
