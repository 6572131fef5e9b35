// Anthropic Messages stream events → OpenAI chat completion chunks (see wire.ts).
import { CLAUDE_REASONING_FORMAT, claudeDetail } from "../reasoning.ts";
import { AnthropicStreamError, type AnthropicUsage, type OpenAIUsage, type Json } from "./wire.ts";
import { finishReason, openaiUsage, nowSeconds, stopSequenceField } from "./response.ts";

export interface MessagesStreamEvent {
  type: string;
  index?: number;
  message?: { id?: string; model?: string; usage?: AnthropicUsage };
  content_block?: { type: string; id?: string; name?: string; data?: string };
  delta?: { type?: string; text?: string; partial_json?: string; thinking?: string; signature?: string; stop_reason?: string | null; stop_sequence?: string | null };
  usage?: AnthropicUsage;
  error?: { type?: string; message?: string };
}

/**
 * Feed it Anthropic's SSE payloads in order; it answers each with the OpenAI
 * chunk payloads to relay (often none). Nothing is emitted until the first
 * content (reasoning included) arrives, so an early `error` event still
 * happens before the relay's first event and may fail over. Thinking goes
 * out as OpenRouter streams it: `reasoning` text pieces beside
 * `reasoning_details` pieces, a block's signature as a piece of its own, a
 * redacted block whole; `index` is the block's place among the reasoning
 * blocks.
 */
export class MessagesStreamTranslator {
  private id = "chatcmpl-anthropic";
  private model: string;
  private readonly created = nowSeconds();
  private started = false;
  private finished = false;
  private stopReason: string | null = null;
  private stopSequence: string | null = null;
  private usage: AnthropicUsage | undefined;
  /** Anthropic content-block index → OpenAI tool_calls index, and whether any arguments went out. */
  private readonly tools = new Map<number, { index: number; sentArgs: boolean }>();
  /** Anthropic content-block index → reasoning_details index, for thinking blocks. */
  private readonly thoughts = new Map<number, number>();
  private reasoningBlocks = 0;

  /** `excludeReasoning`: the client asked for thinking without seeing it: none is relayed. */
  constructor(private readonly opts: { includeUsage: boolean; model?: string; excludeReasoning?: boolean }) {
    this.model = opts.model ?? "";
  }

  feed(payload: string | MessagesStreamEvent): string[] {
    const ev = (typeof payload === "string" ? JSON.parse(payload) : payload) as MessagesStreamEvent;
    if (this.finished) return [];
    switch (ev.type) {
      case "message_start": {
        const m = ev.message ?? {};
        if (m.id) this.id = `chatcmpl-${m.id}`;
        if (m.model && !this.opts.model) this.model = m.model;
        this.mergeUsage(m.usage);
        return [];
      }
      case "content_block_start": {
        const b = ev.content_block;
        if (b?.type === "tool_use") {
          const index = this.tools.size;
          this.tools.set(ev.index ?? 0, { index, sentArgs: false });
          return this.emit({ tool_calls: [{ index, id: b.id ?? "", type: "function", function: { name: b.name ?? "", arguments: "" } }] });
        }
        if (this.opts.excludeReasoning) return [];
        // A thinking block starts empty: its text and signature follow as deltas.
        if (b?.type === "thinking") this.thoughts.set(ev.index ?? 0, this.reasoningBlocks++);
        else if (b?.type === "redacted_thinking") {
          return this.emit({ reasoning_details: [claudeDetail(b, this.reasoningBlocks++)] });
        }
        return [];
      }
      case "content_block_delta": {
        const d = ev.delta ?? {};
        if (d.type === "text_delta" && d.text) return this.emit({ content: d.text });
        if (d.type === "input_json_delta" && d.partial_json) {
          const tool = this.tools.get(ev.index ?? 0);
          if (!tool) return [];
          tool.sentArgs = true;
          return this.emit({ tool_calls: [{ index: tool.index, function: { arguments: d.partial_json } }] });
        }
        if (d.type === "thinking_delta" && d.thinking) {
          const index = this.thoughts.get(ev.index ?? 0);
          if (index === undefined) return [];
          return this.emit({ reasoning: d.thinking, reasoning_details: [{ type: "reasoning.text", text: d.thinking, format: CLAUDE_REASONING_FORMAT, index }] });
        }
        if (d.type === "signature_delta" && d.signature) {
          const index = this.thoughts.get(ev.index ?? 0);
          if (index === undefined) return [];
          return this.emit({ reasoning_details: [{ type: "reasoning.text", signature: d.signature, format: CLAUDE_REASONING_FORMAT, index }] });
        }
        return []; // citations: not part of an OpenAI chat answer
      }
      case "content_block_stop": {
        const tool = this.tools.get(ev.index ?? 0);
        // A tool without parameters streams no JSON at all; clients parse arguments.
        if (tool && !tool.sentArgs) {
          tool.sentArgs = true;
          return this.emit({ tool_calls: [{ index: tool.index, function: { arguments: "{}" } }] });
        }
        return [];
      }
      case "message_delta":
        if (ev.delta?.stop_reason !== undefined) this.stopReason = ev.delta.stop_reason;
        if (ev.delta?.stop_sequence !== undefined) this.stopSequence = ev.delta.stop_sequence;
        this.mergeUsage(ev.usage);
        return [];
      case "message_stop": {
        this.finished = true;
        const out = this.emit({}, finishReason(this.stopReason), stopSequenceField(this.stopReason, this.stopSequence));
        const usage = openaiUsage(this.usage);
        if (this.opts.includeUsage && usage) out.push(this.chunk([], usage));
        out.push("[DONE]");
        return out;
      }
      case "error":
        throw new AnthropicStreamError(ev.error?.type ?? "api_error", ev.error?.message ?? "stream error");
      default:
        return []; // ping, and event types Anthropic may add later
    }
  }

  /** Usage counts in message_delta are cumulative: the last value wins, never a sum (the cache writes' split too, count by count). */
  private mergeUsage(u: AnthropicUsage | undefined): void {
    if (!u) return;
    const next: AnthropicUsage = { ...this.usage };
    for (const k of ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"] as const) {
      if (typeof u[k] === "number") next[k] = u[k];
    }
    const split = u.cache_creation;
    if (split && typeof split === "object") {
      const byTtl = { ...next.cache_creation };
      for (const k of ["ephemeral_5m_input_tokens", "ephemeral_1h_input_tokens"] as const) {
        if (typeof split[k] === "number") byTtl[k] = split[k];
      }
      next.cache_creation = byTtl;
    }
    this.usage = next;
  }

  /** The chunk for this delta, preceded by the role chunk the first time. */
  private emit(delta: Json, finish: string | null = null, extra: Json = {}): string[] {
    const out: string[] = [];
    if (!this.started) {
      this.started = true;
      out.push(this.chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null, logprobs: null }]));
    }
    out.push(this.chunk([{ index: 0, delta, finish_reason: finish, ...extra, logprobs: null }]));
    return out;
  }

  // No `"usage": null` on ordinary chunks (as OpenAI sends): the relay parses
  // only payloads containing "usage", and that keeps its hot loop cheap.
  private chunk(choices: Json[], usage?: OpenAIUsage): string {
    return JSON.stringify({ id: this.id, object: "chat.completion.chunk", created: this.created, model: this.model, choices, ...(usage ? { usage } : {}) });
  }
}
