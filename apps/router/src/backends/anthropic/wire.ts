// OpenAI chat ⇄ Anthropic Messages, both directions, as pure functions (the
// client does the I/O): request.ts reshapes request bodies, response.ts
// whole answers, stream.ts stream events, so the relay sees OpenAI shapes
// with an OpenAI `usage` block, and Claude's thinking in OpenRouter's chat
// extension (`reasoning`, `reasoning_details`). This file: the errors they
// raise and the wire shapes they share.

/** The request asks for something the Messages API cannot express (a 400 for the client). */
export class UntranslatableRequest extends Error {
  override name = "UntranslatableRequest";
  constructor(
    message: string,
    readonly param: string | null,
  ) {
    super(message);
  }
}

/** Anthropic's own `event: error` inside a 200 stream (e.g. overloaded_error). */
export class AnthropicStreamError extends Error {
  override name = "AnthropicStreamError";
  constructor(
    readonly errorType: string,
    message: string,
  ) {
    super(message);
  }
}

// ---- Anthropic wire shapes (only the fields we read or write) ----

export interface TextBlock {
  type: "text";
  text: string;
  cache_control?: unknown;
}
export interface ImageBlock {
  type: "image";
  source: { type: "base64"; media_type: string; data: string } | { type: "url"; url: string };
  cache_control?: unknown;
}
export interface ToolUseBlock {
  type: "tool_use";
  id: string;
  name: string;
  input: Record<string, unknown>;
}
export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content?: string | Array<TextBlock | ImageBlock>;
}
/** Claude's reasoning, signed: sent back unmodified in later turns (Anthropic checks the signature). */
export interface ThinkingBlock {
  type: "thinking";
  thinking: string;
  signature: string;
}
/** Reasoning Anthropic's safety systems encrypted whole: opaque, sent back as it came. */
export interface RedactedThinkingBlock {
  type: "redacted_thinking";
  data: string;
}
export type ReasoningBlock = ThinkingBlock | RedactedThinkingBlock;
export type ContentBlock = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock | ReasoningBlock;

/** Anthropic's effort levels that chat's efforts map onto (it also has max, which no chat effort names). */
export type Effort = "low" | "medium" | "high" | "xhigh";
/** Extended thinking: a token budget (below max_tokens), or adaptive (the model decides; newer models). */
export type ThinkingConfig = { type: "enabled"; budget_tokens: number } | { type: "adaptive" };

export interface MessagesRequest {
  model: string;
  max_tokens: number;
  messages: Array<{ role: "user" | "assistant"; content: string | ContentBlock[] }>;
  system?: string | TextBlock[];
  temperature?: number;
  top_p?: number;
  top_k?: number;
  stop_sequences?: string[];
  stream?: boolean;
  tools?: Array<{ name: string; description?: string; input_schema: unknown }>;
  tool_choice?: { type: "auto" | "any" | "none"; disable_parallel_tool_use?: boolean } | { type: "tool"; name: string; disable_parallel_tool_use?: boolean };
  metadata?: { user_id: string };
  thinking?: ThinkingConfig;
  /** How much the model spends, thinking included (Claude 4.6 and later; with adaptive thinking, how much it thinks). */
  output_config?: { effort: Effort };
}

export interface AnthropicUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
  /** The cache writes by lifetime (5-minute and 1-hour writes are priced apart); their sum is cache_creation_input_tokens. */
  cache_creation?: { ephemeral_5m_input_tokens?: number | null; ephemeral_1h_input_tokens?: number | null } | null;
}

export interface MessagesResponse {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: Array<{ type: string; text?: string; id?: string; name?: string; input?: unknown; thinking?: string; signature?: string; data?: string }>;
  stop_reason: string | null;
  stop_sequence?: string | null;
  usage?: AnthropicUsage;
}

/**
 * OpenAI's usage block, with cache reads/writes where the router's usageFrom
 * looks for them; `cache_write_1h_tokens` (of cache_write_tokens, those
 * written for one hour) only when there are some.
 */
export interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number; cache_write_tokens: number; cache_write_1h_tokens?: number };
}

export type Json = Record<string, unknown>;

export const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
