// A model's reasoning in the router's chat, as OpenRouter's chat extension
// carries it: an assistant message's `reasoning` text and its
// `reasoning_details` entries (`reasoning.text` with a signature ↔ Claude's
// `thinking` block, `reasoning.encrypted` ↔ `redacted_thinking`,
// `reasoning.summary` from other models), streamed as pieces that merge by
// `index`. One place for what every translation of it shares: the Anthropic
// backend (both ways), /v1/messages and /v1/responses.
type Json = Record<string, unknown>;

/** OpenRouter's `format` for Claude's entries: the only ones Anthropic takes back. */
export const CLAUDE_REASONING_FORMAT = "anthropic-claude-v1";

/** Anthropic's least thinking budget (`budget_tokens`). */
export const MIN_THINKING_BUDGET = 1024;

/** Claude's thinking or redacted_thinking block as its reasoning_details entry, `index` its place among the turn's reasoning. */
export function claudeDetail(block: { type: string; thinking?: string; signature?: string; data?: string }, index: number): Json {
  return block.type === "thinking"
    ? { type: "reasoning.text", text: block.thinking ?? "", signature: block.signature ?? "", format: CLAUDE_REASONING_FORMAT, index }
    : { type: "reasoning.encrypted", data: block.data ?? "", format: CLAUDE_REASONING_FORMAT, index };
}

/** Whether an entry or a streamed piece carries anything (an empty opening piece does not). */
export function detailCarries(piece: Json): boolean {
  return ["text", "summary", "signature", "data"].some((k) => typeof piece[k] === "string" && piece[k] !== "");
}

/**
 * Adds one reasoning_details piece to `merged`, as OpenRouter's pieces
 * merge: by `index` and type, text and summary concatenated, signature and
 * data taken; a piece without an index, and an empty one, merges with
 * nothing (the empty one is dropped).
 */
export function mergeDetail(merged: Json[], piece: Json): void {
  if (!detailCarries(piece)) return;
  const same = typeof piece.index === "number" ? merged.find((d) => d.index === piece.index && d.type === piece.type) : undefined;
  if (!same) {
    merged.push({ ...piece });
    return;
  }
  same.format ??= piece.format;
  for (const k of ["text", "summary"] as const) if (typeof piece[k] === "string") same[k] = (typeof same[k] === "string" ? same[k] : "") + piece[k];
  for (const k of ["signature", "data"] as const) if (typeof piece[k] === "string" && piece[k] !== "") same[k] = piece[k];
}

/** A message's reasoning_details (whole, or a stream's pieces) as whole entries, in order. */
export function mergeDetails(details: readonly Json[]): Json[] {
  const merged: Json[] = [];
  for (const d of details) mergeDetail(merged, d);
  return merged;
}
