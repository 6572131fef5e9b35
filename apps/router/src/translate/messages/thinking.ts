// Extended thinking across the chat hop, both ways. The router's chat
// carries reasoning as OpenRouter's extension does: a request's `reasoning`
// ({max_tokens} | {enabled}), an assistant message's `reasoning` text and
// its `reasoning_details` entries (reasoning.text with a signature ↔
// Anthropic's `thinking` block, reasoning.encrypted ↔ `redacted_thinking`),
// so a Messages client's thinking round-trips through any backend that
// reasons, signatures untouched.
import { claudeDetail, mergeDetails, MIN_THINKING_BUDGET } from "../../backends/reasoning.ts";
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";

function reject(param: string, message: string): never {
  throw new ApiError("invalid_request", `${param}: ${message}`, param);
}

/**
 * How the answer shows the model's thinking: not at all (Anthropic returns
 * thinking blocks only when asked for them), in full, or as signatures
 * alone (`display: "omitted"`: empty thinking text, the signature kept for
 * the next turn).
 */
export type ThinkingDisplay = "none" | "summarized" | "omitted";

/**
 * `thinking` → chat `reasoning`: a budget is its `max_tokens`, adaptive is
 * `enabled` (the model decides how much). Anthropic's own checks first: the
 * budget an integer of at least 1024 and under max_tokens (where the
 * request has one: count_tokens' has none).
 */
export function chatReasoning(body: Json, chat: Json): ThinkingDisplay {
  const t = body.thinking;
  const effort = effortOf(body);
  if (t === undefined || t === null) return "none";
  if (!isObject(t)) reject("thinking", "must be an object");
  switch (t.type) {
    case "disabled":
      return "none";
    case "enabled": {
      const budget = t.budget_tokens;
      if (typeof budget !== "number" || !Number.isInteger(budget) || budget < MIN_THINKING_BUDGET) reject("thinking.budget_tokens", `must be an integer of at least ${MIN_THINKING_BUDGET}`);
      if (typeof body.max_tokens === "number" && budget >= body.max_tokens) reject("thinking.budget_tokens", "must be less than max_tokens");
      chat.reasoning = { max_tokens: budget };
      break;
    }
    case "adaptive":
      // With an effort, how much to think (Claude Code's slider); without one the model decides.
      chat.reasoning = effort ? { enabled: true, effort } : { enabled: true };
      break;
    default:
      reject("thinking.type", "must be enabled, adaptive or disabled");
  }
  if (t.display === undefined || t.display === null || t.display === "summarized") return "summarized";
  if (t.display === "omitted") return "omitted";
  reject("thinking.display", "must be summarized or omitted");
}

/** Anthropic's effort levels as chat's (OpenRouter's) efforts: chat has no max, its most is xhigh. */
const chatEffort: Record<string, string> = { low: "low", medium: "medium", high: "high", xhigh: "xhigh", max: "xhigh" };

/**
 * `output_config.effort` as a chat effort, or undefined when unset. It
 * shapes thinking only where thinking is adaptive; beside a budget the
 * budget says how much to think, and without thinking it is a hint on how
 * much text to spend, which no chat backend takes (docs/APIS.md).
 */
function effortOf(body: Json): string | undefined {
  const e = isObject(body.output_config) ? body.output_config.effort : undefined;
  if (e === undefined || e === null) return undefined;
  if (typeof e !== "string" || !Object.hasOwn(chatEffort, e)) reject("output_config.effort", `must be one of ${Object.keys(chatEffort).join(", ")}`);
  return chatEffort[e];
}

/**
 * A thinking block of an assistant turn → that chat message's
 * reasoning_details entry, its signature or data as sent: Anthropic checks
 * them when a tool-use turn's thinking comes back, and refuses the turn if
 * they were touched.
 */
export function reasoningDetail(b: Json, at: string, index: number): Json {
  if (b.type === "thinking") {
    if (typeof b.thinking !== "string") reject(`${at}.thinking`, "must be a string");
    if (typeof b.signature !== "string") reject(`${at}.signature`, "must be a string");
    return claudeDetail({ type: "thinking", thinking: b.thinking, signature: b.signature }, index);
  }
  if (typeof b.data !== "string") reject(`${at}.data`, "must be a string");
  return claudeDetail({ type: "redacted_thinking", data: b.data }, index);
}

const str = (v: unknown): string => (typeof v === "string" ? v : "");

/**
 * One reasoning_details entry (whole, or a stream's piece of one) read as
 * Anthropic would show it: readable thinking (reasoning.text; another
 * model's reasoning.summary) with its signature, or an encrypted block.
 * Other entry types carry nothing a Messages client can hold.
 */
export type ThinkingPiece = { kind: "thinking"; text: string; signature: string } | { kind: "redacted"; data: string };

export function thinkingPiece(d: Json, display: ThinkingDisplay): ThinkingPiece | undefined {
  switch (d.type) {
    case "reasoning.text":
      return { kind: "thinking", text: display === "omitted" ? "" : str(d.text), signature: str(d.signature) };
    case "reasoning.summary":
      return { kind: "thinking", text: display === "omitted" ? "" : str(d.summary), signature: "" };
    case "reasoning.encrypted":
      return typeof d.data === "string" && d.data !== "" ? { kind: "redacted", data: d.data } : undefined;
    default:
      return undefined;
  }
}

/**
 * A whole chat answer's reasoning as Anthropic's blocks, in order:
 * reasoning_details merged by index (text concatenated, the signature or
 * data taken), or, from a model that reports only its reasoning text (a
 * non-Claude reasoning model on OpenRouter), one thinking block with an
 * empty signature. None unless the request asked for thinking.
 */
export function thinkingBlocks(message: Json, display: ThinkingDisplay): Json[] {
  if (display === "none") return [];
  const details = mergeDetails(Array.isArray(message.reasoning_details) ? message.reasoning_details.filter(isObject) : []);
  const merged = details.map((d) => thinkingPiece(d, display)).filter((p): p is ThinkingPiece => p !== undefined);
  if (merged.length === 0 && typeof message.reasoning === "string" && display !== "omitted") merged.push({ kind: "thinking", text: message.reasoning, signature: "" });
  return merged.flatMap((p): Json[] => {
    if (p.kind === "redacted") return [{ type: "redacted_thinking", data: p.data }];
    // An entry with nothing to show and nothing to send back is no block.
    return p.text === "" && p.signature === "" ? [] : [{ type: "thinking", thinking: p.text, signature: p.signature }];
  });
}

/**
 * `context_management`'s edits, applied here rather than by an upstream (no
 * chat backend takes them): `clear_thinking_20251015`, which Claude Code
 * sends with thinking on, keeps the thinking of the last `keep` assistant
 * turns that have some (`{type: "thinking_turns", value: N}`; "all": every
 * turn's; by default the last one's) and clears the rest from the prompt, as
 * Anthropic does. It needs thinking on, as Anthropic says. Other edits
 * (clear_tool_uses, which rewrites tool results by token thresholds) are a
 * 400 naming them, not a prompt quietly left as it was.
 */
export function applyContextEdits(body: Json, messages: Json[], thinkingOn: boolean): void {
  const cm = body.context_management;
  if (cm === undefined || cm === null) return;
  if (!isObject(cm)) reject("context_management", "must be an object");
  for (const k of Object.keys(cm)) if (k !== "edits") reject(`context_management.${k}`, "Extra inputs are not permitted");
  if (cm.edits === undefined || cm.edits === null) return;
  if (!Array.isArray(cm.edits)) reject("context_management.edits", "must be an array");
  cm.edits.forEach((edit, i) => {
    const at = `context_management.edits[${i}]`;
    if (!isObject(edit)) reject(at, "must be an object");
    if (edit.type !== "clear_thinking_20251015") reject(`${at}.type`, `context edits of type '${String(edit.type)}' are not available on Switchyard's backends (clear_thinking_20251015 is)`);
    if (!thinkingOn) reject(`${at}.type`, "clear_thinking_20251015 needs thinking enabled or adaptive");
    const keep = keptThinkingTurns(edit.keep, `${at}.keep`);
    let seen = 0;
    for (let j = messages.length - 1; j >= 0; j--) {
      const m = messages[j]!;
      if (m.role !== "assistant" || m.reasoning_details === undefined) continue;
      if (++seen <= keep) continue;
      delete m.reasoning_details;
      delete m.reasoning;
    }
  });
}

function keptThinkingTurns(keep: unknown, at: string): number {
  if (keep === undefined || keep === null) return 1;
  if (keep === "all") return Infinity;
  if (!isObject(keep) || keep.type !== "thinking_turns" || typeof keep.value !== "number" || !Number.isInteger(keep.value) || keep.value < 1) reject(at, "must be 'all' or {type: 'thinking_turns', value: N ≥ 1}");
  return keep.value;
}

