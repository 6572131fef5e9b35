// One reader of OpenAI-shaped `usage` blocks for every backend: workers send
// plain OpenAI usage, OpenRouter adds `cost` (USD, its own credits) and the
// generation id, the Anthropic adapter maps cache read/write tokens into
// `prompt_tokens_details` (one-hour writes, priced apart, also as
// `cache_write_1h_tokens`); OpenAI and OpenRouter report a prompt's audio
// there as `audio_tokens`. Billing reads only this.
import { usdToMicro } from "@switchyard/db";

export interface Usage {
  /** All prompt tokens, cached and cache-written ones included (OpenAI's convention). */
  prompt: number;
  completion: number;
  /** Prompt tokens read from the provider's cache. */
  cached: number;
  /** Prompt tokens written to the provider's cache (Anthropic prices them higher). */
  cacheWrite: number;
  /** Of cacheWrite, those written for one hour (Anthropic `ttl: "1h"`, dearer still); absent: none. */
  cacheWrite1h?: number;
  /**
   * Audio prompt tokens (`prompt_tokens_details.audio_tokens`), inside
   * prompt and apart from cached and cacheWrite (at most what those leave);
   * priced at the row's audio input price. Absent: none.
   */
  audio?: number;
  /** The provider's own charge, when it reports one (OpenRouter `usage.cost`). */
  providerCostMicro?: bigint;
  /** The response's id (OpenRouter `gen-…`): for a paid backend, the line on its invoice; kept on the ledger row. */
  generationId?: string;
}

const costPattern = /"cost"\s*:\s*"?([0-9][0-9.]*(?:[eE][-+]?\d+)?)/;

function count(v: unknown): number {
  const n = Number(v ?? 0);
  return Number.isFinite(n) && n >= 0 ? Math.floor(n) : 0;
}

/**
 * Usage from a parsed body or chunk; `text` is the same payload as sent, so
 * the cost is read from its decimal digits rather than from a float.
 */
export function usageFrom(payload: unknown, text?: string): Usage | undefined {
  const p = payload as { id?: unknown; usage?: Record<string, unknown> | null } | null;
  const u = p?.usage;
  if (!u || typeof u !== "object") return undefined;
  // Most usage blocks (every worker's) have no details: nothing more is read or made for them.
  const details = u.prompt_tokens_details as Record<string, unknown> | null | undefined;
  const usage: Usage = {
    prompt: count(u.prompt_tokens),
    completion: count(u.completion_tokens),
    cached: details ? count(details.cached_tokens) : 0,
    cacheWrite: details ? count(details.cache_write_tokens) : 0,
  };
  if (details) {
    // A provider's counts that overrun the prompt (cached + written > prompt:
    // a bug, or a proxy's arithmetic) are capped to it: the price table's
    // split of the prompt refuses them, and a settle that throws writes no row.
    if (usage.cached > usage.prompt) usage.cached = usage.prompt;
    if (usage.cacheWrite > usage.prompt - usage.cached) usage.cacheWrite = usage.prompt - usage.cached;
    const written1h = Math.min(count(details.cache_write_1h_tokens), usage.cacheWrite);
    if (written1h > 0) usage.cacheWrite1h = written1h;
    // Audio a provider also counts as cached (cached audio) is not taken off
    // the prompt twice: capped at what the cached and written tokens leave
    // (those keep their cache prices), the prompt's split stays valid.
    const audio = Math.min(count(details.audio_tokens), usage.prompt - usage.cached - usage.cacheWrite);
    if (audio > 0) usage.audio = audio;
  }
  if (u.cost !== undefined && u.cost !== null) {
    // The usage block is the last object holding "cost": search from "usage".
    const at = text?.indexOf('"usage"') ?? -1;
    const m = at >= 0 ? costPattern.exec(text!.slice(at)) : null;
    try {
      usage.providerCostMicro = usdToMicro(m ? m[1]! : (u.cost as number | string));
    } catch {
      // unreadable cost: billed from the price table instead
    }
  }
  if (typeof p?.id === "string" && p.id.length > 0 && p.id.length <= 200) usage.generationId = p.id;
  return usage;
}
