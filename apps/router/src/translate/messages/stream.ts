// Chat completion chunks → Anthropic's Messages stream (inbound): the
// inverse of backends/anthropic/stream.ts. message_start, then per content
// block content_block_start → content_block_delta (text_delta |
// input_json_delta)… → content_block_stop, then message_delta (stop_reason,
// usage) and message_stop; a failure after the first byte is one
// `event: error`.
import { continuesCall, isObject, sseFrame, type Json, type StreamFailure, type StreamTranslator } from "../boundary.ts";
import { errorCodes, type ErrorCode } from "../../errors.ts";
import { anthropicErrorType, anthropicUsage, newMessageId, stopOf } from "./response.ts";

/** A router error code's HTTP status (for Anthropic's error type); a code from elsewhere is a 500. */
const failureStatus = (code: string): number => (Object.hasOwn(errorCodes, code) ? errorCodes[code as ErrorCode].status : 500);

export class MessagesStreamTranslator implements StreamTranslator {
  private readonly id = newMessageId();
  private started = false;
  /** The open block: its index, and for a tool_use block the chat tool_calls index and id it came with. */
  private open: { index: number; kind: "text" | "tool_use"; call?: { chatIndex: number; callId: string } } | undefined;
  private blocks = 0;
  private finish: unknown = null;
  /** The finishing choice's stop_reason: which stop sequence ended it, when the backend says (response.ts stopOf). */
  private matched: unknown = null;
  private usage: unknown;

  constructor(
    private readonly model: string,
    /** The request's stop_sequences. */
    private readonly stops: readonly string[] = [],
  ) {}

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
    this.open = undefined;
  }

  private start(out: string[], block: Json, kind: "text" | "tool_use", call?: { chatIndex: number; callId: string }): number {
    this.close(out);
    const index = this.blocks++;
    this.open = { index, kind, ...(call ? { call } : {}) };
    out.push(sseFrame("content_block_start", { type: "content_block_start", index, content_block: block }));
    return index;
  }

  chunk(chunk: Json): string[] {
    const out: string[] = [];
    this.begin(out);
    if (isObject(chunk.usage)) this.usage = chunk.usage;
    const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
    if (!choice) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
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
        : this.start(out, { type: "tool_use", id: callId, name: String(fn.name ?? ""), input: {} }, "tool_use", { chatIndex, callId });
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
