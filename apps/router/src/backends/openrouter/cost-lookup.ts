// What an orphaned OpenRouter attempt cost, asked of OpenRouter itself:
// `GET /api/v1/generation?id=gen-…` answers `{"data":{"id","total_cost",
// "tokens_prompt","tokens_completion","native_tokens_prompt",
// "native_tokens_completion","native_tokens_cached","model","created_at",…}}`
// once the generation is accounted (a 404 before that, or for an id it does
// not know). The cost is read from the answer's decimal digits, never a
// float. Without an answer, the last usage seen (its `cost`) is used; else
// nothing (the finisher charges the hold).
import { usdToMicro } from "@switchyard/db";
import type { CrashCost, CrashCostInput, CrashCostLookup } from "../../billing/orphans.ts";
import { errorBodyText, readBodyText } from "../transport.ts";
import type { OpenRouterConnections } from "./client.ts";

/** Generation answers are small; anything bigger is not one. */
const MAX_ANSWER_BYTES = 256 * 1024;
const totalCostPattern = /"total_cost"\s*:\s*"?([0-9][0-9.]*(?:[eE][-+]?\d+)?)/;
const generationIdPattern = /^gen-[A-Za-z0-9_-]{1,190}$/;
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

export interface OpenRouterCostLookupOptions {
  /** Tries on a 429/5xx or a transport failure (a 404 is an answer: not known). Default 3. */
  tries?: number;
  /** First backoff between tries, doubled each time (default 200 ms). */
  backoffMs?: number;
}

interface GenerationData {
  id?: unknown;
  total_cost?: unknown;
  tokens_prompt?: unknown;
  tokens_completion?: unknown;
  native_tokens_prompt?: unknown;
  native_tokens_completion?: unknown;
  native_tokens_cached?: unknown;
}

const count = (...vs: unknown[]): number => {
  for (const v of vs) if (typeof v === "number" && Number.isSafeInteger(v) && v >= 0) return v;
  return 0;
};

export class OpenRouterCostLookup implements CrashCostLookup {
  constructor(
    private readonly connections: OpenRouterConnections,
    private readonly opts: OpenRouterCostLookupOptions = {},
  ) {}

  async cost(input: CrashCostInput): Promise<CrashCost | undefined> {
    if (input.generationId && generationIdPattern.test(input.generationId)) {
      const found = await this.generation(input.generationId, input.signal);
      if (found) return found;
    }
    // The final usage chunk had arrived (with OpenRouter's own cost) before the router died.
    if (input.usage?.providerCostMicro !== undefined) {
      return { micro: input.usage.providerCostMicro, source: "usage_on_crash", usage: input.usage, ...(input.generationId ? { generationId: input.generationId } : {}) };
    }
    return undefined;
  }

  /** The generation's cost as OpenRouter accounts it; undefined when it does not know it (or cannot be reached). */
  async generation(id: string, signal: AbortSignal): Promise<CrashCost | undefined> {
    const c = this.connections;
    const tries = this.opts.tries ?? 3;
    let backoff = this.opts.backoffMs ?? 200;
    for (let attempt = 1; attempt <= tries && !signal.aborted; attempt++) {
      let status: number;
      let text: string;
      try {
        const res = await c.pool.request({
          path: `${c.basePath}/generation?id=${encodeURIComponent(id)}`,
          method: "GET",
          headers: { authorization: c.headers.authorization!, accept: "application/json" },
          signal,
        });
        status = res.statusCode;
        text = status === 200 ? await readBodyText(res.body, MAX_ANSWER_BYTES, "openrouter's generation answer", res.headers["content-length"]) : await errorBodyText(res.body);
      } catch {
        status = 0; // transport failure: try again
        text = "";
      }
      if (status === 200) return parseGeneration(id, text);
      // 404: OpenRouter has no such generation (or not yet): nothing to wait for here.
      if (status === 404 || (status >= 400 && status < 500 && status !== 408 && status !== 429)) return undefined;
      if (attempt < tries) {
        await sleep(backoff);
        backoff *= 2;
      }
    }
    return undefined;
  }
}

/** The cost and token counts of a generation answer; undefined when it is not one for `id`. */
export function parseGeneration(id: string, text: string): CrashCost | undefined {
  let data: GenerationData | undefined;
  try {
    data = (JSON.parse(text) as { data?: GenerationData } | null)?.data;
  } catch {
    return undefined;
  }
  if (!data || data.id !== id || data.total_cost === undefined || data.total_cost === null) return undefined;
  const m = totalCostPattern.exec(text);
  let micro: bigint;
  try {
    micro = usdToMicro(m ? m[1]! : (data.total_cost as number | string));
  } catch {
    return undefined;
  }
  const prompt = count(data.native_tokens_prompt, data.tokens_prompt);
  return {
    micro,
    source: "provider_lookup",
    usage: { prompt, completion: count(data.native_tokens_completion, data.tokens_completion), cached: Math.min(prompt, count(data.native_tokens_cached)), cacheWrite: 0 },
    generationId: id,
  };
}
