// What an orphaned Anthropic attempt cost. Anthropic has no per-message cost
// lookup, so it is its price table × the last usage seen (the message's
// input, cache-read and cache-write tokens — one-hour writes apart — audio
// input (none from Anthropic today, priced apart if a usage block has it) and
// output so far, as the final usage chunk reported them); without one,
// nothing (the finisher charges the hold).
import { usageCostMicro } from "@switchyard/db";
import type { CrashCost, CrashCostInput, CrashCostLookup } from "../../billing/orphans.ts";

export class AnthropicCostLookup implements CrashCostLookup {
  async cost(input: CrashCostInput): Promise<CrashCost | undefined> {
    const u = input.usage;
    if (!u || !input.price) return undefined;
    const cached = Math.min(u.cached, u.prompt);
    const written = Math.min(u.cacheWrite, u.prompt - cached);
    const micro = usageCostMicro(
      { promptTokens: u.prompt, completionTokens: u.completion, cachedTokens: cached, cacheWriteTokens: written, cacheWrite1hTokens: Math.min(u.cacheWrite1h ?? 0, written), audioTokens: Math.min(u.audio ?? 0, u.prompt - cached - written) },
      input.price,
    );
    return { micro, source: "usage_on_crash", usage: u, ...(input.generationId ? { generationId: input.generationId } : {}) };
  }
}
