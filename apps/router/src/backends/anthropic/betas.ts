// Anthropic's beta features a client asks for in `anthropic-beta` (a
// comma-separated list of names; the SDKs' `betas: [...]`), on any inference
// route. The request reaches Anthropic translated (Messages → chat →
// Messages), so only betas whose whole effect survives that trip are sent
// on: switches of the model's behaviour or limits that need no field of
// their own. The rest are left out. Claude Code sends several on every
// request — its attribution (`claude-code-…`), the context edits the router
// applies itself (`context-management-…`), tools whose fields the router
// refuses by name anyway — and refusing them would refuse Claude Code.
// Sending them would hand Anthropic switches for answers the translation
// does not read (new block types, server tools).
import { divCeil, type TokenPrice } from "@switchyard/db";

/** Claude's 1M-token context window (Sonnet 4 and later, Opus 4.6): prompts past 200k tokens are billed at the price row's long-context tier. */
export const CONTEXT_1M_BETA = "context-1m-2025-08-07";

/**
 * Anthropic's long-context pricing, as published for every 1M-context
 * model: a request whose prompt (cache reads and writes counted) is over
 * 200,000 tokens pays twice the input rate and 1.5× the output rate for all
 * its tokens, cache rates following the input's.
 */
export const ANTHROPIC_LONG_CONTEXT = { thresholdTokens: 200_000, inputPermille: 2_000n, outputPermille: 1_500n } as const;

/**
 * An Anthropic price row as billed: its own long-context tier, or — none
 * set — Anthropic's published one (ANTHROPIC_LONG_CONTEXT), so a 1M-context
 * request is never settled at the ordinary rates Anthropic does not charge
 * it. Only a prompt past 200k tokens reaches the tier, and Anthropic takes
 * one only with the 1M beta, so it costs other requests nothing.
 */
export function anthropicBilled(price: TokenPrice): TokenPrice {
  if (price.longContext) return price;
  const { thresholdTokens, inputPermille, outputPermille } = ANTHROPIC_LONG_CONTEXT;
  const times = (micro: bigint, permille: bigint) => divCeil(micro * permille, 1_000n);
  return { ...price, longContext: { thresholdTokens, inputMicroPerMtok: times(price.inputMicroPerMtok, inputPermille), outputMicroPerMtok: times(price.outputMicroPerMtok, outputPermille) } };
}

/** The betas sent on to Anthropic, and why each survives the translation. */
export const FORWARDED_BETAS: ReadonlyMap<string, string> = new Map([
  [CONTEXT_1M_BETA, "a larger context window: no field, the same answer shape"],
  ["interleaved-thinking-2025-05-14", "thinking between tool calls on Claude 4 models before 4.6: thinking blocks, which the translation carries"],
  ["fine-grained-tool-streaming-2025-05-14", "tool input streamed without buffering: the same input_json_delta events, in other slices"],
  ["output-128k-2025-02-19", "up to 128k output tokens on Claude 3.7 Sonnet: max_tokens, which the budget hold already counts"],
  ["token-efficient-tools-2025-02-19", "fewer tokens for tool calls on Claude 3.7 Sonnet: the same answer shape"],
]);

/** A beta's name as Anthropic writes them: lowercase words, digits and dashes (or underscores). */
const BETA_NAME = /^[a-z0-9][a-z0-9_-]{0,99}$/;

/**
 * The request's `anthropic-beta` names that go on to Anthropic, in the
 * client's order without repeats; undefined when there are none (most
 * requests: no header). Several headers reach here joined by ", ".
 */
export function forwardedBetas(header: string | undefined): readonly string[] | undefined {
  if (header === undefined || header === "") return undefined;
  let out: string[] | undefined;
  for (const part of header.split(",")) {
    const name = part.trim();
    if (!BETA_NAME.test(name) || !FORWARDED_BETAS.has(name) || out?.includes(name)) continue;
    (out ??= []).push(name);
  }
  return out;
}

/**
 * The price a request may be billed at, for what is worked out before it
 * runs (the budget hold, the route scorer's cost): Anthropic bills its
 * long-context tier only with the 1M beta, refusing a longer prompt
 * without it, so without the beta its tier is left out — the prompt's
 * bound (bytes, three to four times its tokens) would otherwise put every
 * conversation past ~200 kB at twice its price. The settle needs no such
 * care: it prices the tokens Anthropic counted.
 */
export function priceBefore(kind: string, price: TokenPrice, contextOneM: boolean): TokenPrice {
  return kind === "anthropic" && !contextOneM && price.longContext ? { ...price, longContext: null } : price;
}
