// Chat completion chunks → Gemini's streamGenerateContent SSE (alt=sse):
// each frame `data: <GenerateContentResponse>` with no event name and no
// [DONE]. Text and (when asked for) thought text go out as they come; a tool
// call goes out whole, as one functionCall part, once it is complete (Gemini
// never streams a partial call); the last frame carries finishReason and
// usageMetadata. A failure after the first byte is one `{"error":…}` frame,
// as Google's streams end on one.
import { continuesCall, failureStatus, isObject, type Json, type StreamFailure, type StreamTranslator } from "../boundary.ts";
import { errorCodes } from "../../errors.ts";
import { mergeDetail } from "../../backends/reasoning.ts";
import { callArgs, envelope, finishWithCalls, functionCallPart, geminiErrorBody, usageMetadata, type GeminiAnswerShape } from "./response.ts";
import { mintThoughtSignature } from "./signature.ts";

/**
 * A failure's status (Google's clients retry by the error's `code`: 429 and
 * 5xx): its router error code's, and a code from elsewhere that names a
 * timeout is a 504, not boundary.ts's 500.
 */
function geminiFailureStatus(code: string): number {
  return !Object.hasOwn(errorCodes, code) && code.includes("timeout") ? 504 : failureStatus(code);
}

/** The call being assembled: its chat tool_calls index and id, and its arguments so far. */
interface OpenCall {
  chatIndex: number;
  callId: string;
  name: string;
  args: string;
}

export class GeminiStreamTranslator implements StreamTranslator {
  private readonly includeThoughts: boolean;
  private readonly responseId: string;
  /** The stream's reasoning_details pieces, merged by index: the thoughtSignature's content. */
  private readonly details: Json[] = [];
  private call: OpenCall | undefined;
  /** Whether the thoughtSignature has gone out (on the first call sent). */
  private signed = false;
  /** Whether a call was left out for arguments that are not a JSON object (response.ts callArgs). */
  private dropped = false;
  private finish: unknown = null;
  private usage: unknown;

  constructor(
    private readonly model: string,
    shape: GeminiAnswerShape,
  ) {
    this.includeThoughts = shape.includeThoughts;
    this.responseId = shape.responseId;
  }

  private frame(parts: Json[], end?: { finishReason: string; usageMetadata: Json }): string {
    return `data: ${JSON.stringify(envelope(parts, this.model, this.responseId, end))}\r\n\r\n`;
  }

  /**
   * The open call, now complete, as its own frame. The thoughtSignature goes
   * on the first call sent: the part after the thinking, where Gemini puts
   * it (the reasoning comes before any call, so its details are whole by
   * then).
   */
  private sendCall(out: string[]): void {
    const c = this.call;
    if (!c) return;
    this.call = undefined;
    const args = callArgs(c.args);
    if (!args) {
      this.dropped = true;
      return;
    }
    const part = functionCallPart(c.callId, c.name, args);
    if (!this.signed && this.details.length > 0) {
      part.thoughtSignature = mintThoughtSignature(this.details);
      this.signed = true;
    }
    out.push(this.frame([part]));
  }

  chunk(chunk: Json): string[] {
    const out: string[] = [];
    if (isObject(chunk.usage)) this.usage = chunk.usage;
    const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
    if (!choice) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    if (Array.isArray(delta.reasoning_details)) for (const p of delta.reasoning_details) if (isObject(p)) mergeDetail(this.details, p);
    // Reasoning and text in one chunk go out as one frame; a call open before them is complete.
    let parts: Json[] | undefined;
    if (this.includeThoughts && typeof delta.reasoning === "string" && delta.reasoning !== "") (parts ??= []).push({ text: delta.reasoning, thought: true });
    if (typeof delta.content === "string" && delta.content !== "") (parts ??= []).push({ text: delta.content });
    if (parts) {
      this.sendCall(out);
      out.push(this.frame(parts));
    }
    if (Array.isArray(delta.tool_calls)) {
      for (const tc of delta.tool_calls) {
        if (!isObject(tc)) continue;
        const fn = isObject(tc.function) ? tc.function : {};
        const chatIndex = typeof tc.index === "number" ? tc.index : 0;
        if (!continuesCall(this.call, chatIndex, tc)) {
          this.sendCall(out);
          this.call = { chatIndex, callId: "", name: "", args: "" };
        }
        const call = this.call!;
        // A call that opened without an id or name takes the first one that comes.
        if (call.callId === "" && typeof tc.id === "string") call.callId = tc.id;
        if (call.name === "" && typeof fn.name === "string") call.name = fn.name;
        if (typeof fn.arguments === "string") call.args += fn.arguments;
      }
    }
    if (typeof choice.finish_reason === "string") this.finish = choice.finish_reason;
    return out;
  }

  async done(): Promise<string[]> {
    const out: string[] = [];
    this.sendCall(out);
    // With no call to carry it, the signature has a part of its own: the
    // client keeps it with the turn and sends it back, with Claude's thinking.
    const last = !this.signed && this.details.length > 0 ? { text: "", thoughtSignature: mintThoughtSignature(this.details) } : { text: "" };
    this.signed = true;
    out.push(this.frame([last], { finishReason: finishWithCalls(this.finish, this.dropped), usageMetadata: usageMetadata(this.usage) }));
    return out;
  }

  fail(failure: StreamFailure): string[] {
    return [`data: ${JSON.stringify(geminiErrorBody(geminiFailureStatus(failure.code), failure.message))}\r\n\r\n`];
  }
}
