// Chat completion chunks → Anthropic's Messages stream (inbound): the
// inverse of backends/anthropic/stream.ts. message_start, then per content
// block content_block_start → content_block_delta (thinking_delta |
// signature_delta | text_delta | input_json_delta)… → content_block_stop
// (a redacted_thinking block comes whole in its start), then message_delta
// (stop_reason, usage) and message_stop; a failure after the first byte is
// one `event: error`.
import { continuesCall, failureStatus, isObject, sseFrame, type Json, type StreamFailure, type StreamTranslator } from "../boundary.ts";
import { anthropicErrorType, anthropicUsage, newMessageId, stopOf, type AnswerShape } from "./response.ts";
import { thinkingPiece, type ThinkingDisplay } from "./thinking.ts";


type BlockKind = "thinking" | "redacted_thinking" | "text" | "tool_use";

/** The reasoning_details index standing for reasoning text streamed without details (none is negative). */
const RAW_REASONING = -1;

export class MessagesStreamTranslator implements StreamTranslator {
  private readonly id = newMessageId();
  private started = false;
  /**
   * The open block: its index, for a tool_use block the chat tool_calls
   * index and id it came with, for a thinking block the reasoning_details
   * index its pieces carry.
   */
  private open: { index: number; kind: BlockKind; call?: { chatIndex: number; callId: string }; detail?: number } | undefined;
  private blocks = 0;
  /** reasoning_details indexes whose thinking block has stopped: a late piece of one cannot reopen it. */
  private readonly stoppedDetails = new Set<number>();
  private readonly stops: readonly string[];
  private readonly thinking: ThinkingDisplay;
  private finish: unknown = null;
  /** The finishing choice's stop_reason: which stop sequence ended it, when the backend says (response.ts stopOf). */
  private matched: unknown = null;
  private usage: unknown;

  constructor(
    private readonly model: string,
    shape: AnswerShape = {},
  ) {
    this.stops = shape.stops ?? [];
    this.thinking = shape.thinking ?? "none";
  }

  private begin(out: string[]): void {
    if (this.started) return;
    this.started = true;
    // The prompt's size is known only from the usage chunk at the end: message_delta carries it then.
    const message = {
      id: this.id,
      type: "message",
      role: "assistant",
      model: this.model,
      content: [],
      stop_reason: null,
      stop_sequence: null,
      usage: { input_tokens: 0, output_tokens: 0, cache_creation_input_tokens: 0, cache_read_input_tokens: 0, cache_creation: { ephemeral_5m_input_tokens: 0, ephemeral_1h_input_tokens: 0 }, service_tier: "standard" },
    };
    out.push(sseFrame("message_start", { type: "message_start", message }));
  }

  private close(out: string[]): void {
    if (!this.open) return;
    out.push(sseFrame("content_block_stop", { type: "content_block_stop", index: this.open.index }));
    if (this.open.detail !== undefined) this.stoppedDetails.add(this.open.detail);
    this.open = undefined;
  }

  private start(out: string[], block: Json, kind: BlockKind, opened: { call?: { chatIndex: number; callId: string }; detail?: number } = {}): number {
    this.close(out);
    const index = this.blocks++;
    this.open = { index, kind, ...opened };
    out.push(sseFrame("content_block_start", { type: "content_block_start", index, content_block: block }));
    return index;
  }

  /**
   * A delta's reasoning → thinking blocks: its reasoning_details pieces,
   * merged by their index into one block each (text as thinking_delta, the
   * signature as signature_delta; an encrypted entry is a redacted_thinking
   * block, whole); or, from a model that streams only reasoning text, one
   * thinking block with an empty signature.
   */
  private reasoning(out: string[], delta: Json): void {
    const details = Array.isArray(delta.reasoning_details) ? delta.reasoning_details.filter(isObject) : [];
    if (details.length === 0) {
      if (typeof delta.reasoning === "string" && this.thinking !== "omitted") this.thinkingDelta(out, RAW_REASONING, delta.reasoning, "");
      return;
    }
    for (const d of details) {
      const piece = thinkingPiece(d, this.thinking);
      if (!piece) continue;
      if (piece.kind === "redacted") {
        this.start(out, { type: "redacted_thinking", data: piece.data }, "redacted_thinking", typeof d.index === "number" ? { detail: d.index } : {});
        this.close(out);
        continue;
      }
      // A piece without an index continues the thinking block open.
      const detail = typeof d.index === "number" ? d.index : this.open?.kind === "thinking" ? this.open.detail! : RAW_REASONING;
      this.thinkingDelta(out, detail, piece.text, piece.signature);
    }
  }

  private thinkingDelta(out: string[], detail: number, text: string, signature: string): void {
    // An empty opening piece opens nothing; a piece of a stopped block cannot reopen it (raw reasoning after the answer began is a new block).
    if ((text === "" && signature === "") || (detail !== RAW_REASONING && this.stoppedDetails.has(detail))) return;
    const index = this.open?.kind === "thinking" && this.open.detail === detail ? this.open.index : this.start(out, { type: "thinking", thinking: "", signature: "" }, "thinking", { detail });
    if (text !== "") out.push(sseFrame("content_block_delta", { type: "content_block_delta", index, delta: { type: "thinking_delta", thinking: text } }));
    if (signature !== "") out.push(sseFrame("content_block_delta", { type: "content_block_delta", index, delta: { type: "signature_delta", signature } }));
  }

  chunk(chunk: Json): string[] {
    const out: string[] = [];
    this.begin(out);
    if (isObject(chunk.usage)) this.usage = chunk.usage;
    const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
    if (!choice) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    // Anthropic sends thinking only when asked for it.
    if (this.thinking !== "none") this.reasoning(out, delta);
    if (typeof delta.content === "string" && delta.content !== "") {
      const index = this.open?.kind === "text" ? this.open.index : this.start(out, { type: "text", text: "" }, "text");
      out.push(sseFrame("content_block_delta", { type: "content_block_delta", index, delta: { type: "text_delta", text: delta.content } }));
    }
    for (const tc of Array.isArray(delta.tool_calls) ? delta.tool_calls.filter(isObject) : []) {
      const fn = isObject(tc.function) ? tc.function : {};
      const chatIndex = typeof tc.index === "number" ? tc.index : 0;
      const callId = String(tc.id ?? "");
      const index = continuesCall(this.open?.call, chatIndex, tc)
        ? this.open!.index
        : this.start(out, { type: "tool_use", id: callId, name: String(fn.name ?? ""), input: {} }, "tool_use", { call: { chatIndex, callId } });
      if (typeof fn.arguments === "string" && fn.arguments !== "") {
        out.push(sseFrame("content_block_delta", { type: "content_block_delta", index, delta: { type: "input_json_delta", partial_json: fn.arguments } }));
      }
    }
    if (typeof choice.finish_reason === "string") {
      this.finish = choice.finish_reason;
      this.matched = choice.stop_reason;
    }
    return out;
  }

  async done(): Promise<string[]> {
    const out: string[] = [];
    this.begin(out);
    this.close(out);
    // Counts in message_delta are cumulative: the whole answer's.
    out.push(sseFrame("message_delta", { type: "message_delta", delta: stopOf(this.finish, this.matched, this.stops), usage: anthropicUsage(this.usage) }));
    out.push(sseFrame("message_stop", { type: "message_stop" }));
    return out;
  }

  fail(failure: StreamFailure): string[] {
    return [sseFrame("error", { type: "error", error: { type: anthropicErrorType(failureStatus(failure.code)), message: failure.message } })];
  }
}
