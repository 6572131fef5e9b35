// Chat completion chunks → OpenAI's typed Responses stream: response.created
// and response.in_progress first, then per output item
// response.output_item.added → (reasoning_summary_part.added →
// reasoning_summary_text.delta… → reasoning_summary_text.done →
// reasoning_summary_part.done | content_part.added → output_text.delta… →
// output_text.done → content_part.done | function_call_arguments.delta… →
// function_call_arguments.done) → output_item.done, and at the end
// response.completed (response.incomplete when the output limit cut it;
// response.failed when the stream broke). Every event carries its
// sequence_number, from 0.
import { continuesCall, isObject, sseFrame, type Json, type StreamFailure, type StreamTranslator } from "../boundary.ts";
import { detailCarries, mergeDetail } from "../../backends/reasoning.ts";
import { callName, namespacedNames, type CallName } from "./namespaces.ts";
import { attachReasoning, includesEncrypted, reasoningItem } from "./reasoning.ts";
import { historyTurn, newItemId, outputText, responseEnvelope, responsesLogprobs, responsesUsage, statusOf, type ResponseSeed, type TurnReasoning } from "./response.ts";

/** The chat answer's reasoning, streamed as one reasoning item's summary (its text) while nothing else has opened. */
interface OpenReasoning {
  kind: "reasoning";
  index: number;
  id: string;
  text: string;
  /** Its reasoning_details, the stream's pieces merged by index. */
  details: Json[];
}

interface OpenMessage {
  kind: "message";
  index: number;
  id: string;
  text: string;
  refusal: string;
  logprobs: Json[];
  /** Content parts opened so far: output_text at 0 when text came first. */
  parts: Array<"output_text" | "refusal">;
}

interface OpenCall {
  kind: "call";
  index: number;
  id: string;
  /** The chat tool_calls index it came as. */
  chatIndex: number;
  call_id: string;
  name: string;
  arguments: string;
}

/** What the finished stream hands back: the response, and the assistant turn for the stored conversation. */
export interface FinishedResponse {
  response: Json;
  turn: Json;
}

export class ResponsesStreamTranslator implements StreamTranslator {
  private seq = 0;
  private started = false;
  private readonly output: Json[] = [];
  private open: OpenReasoning | OpenMessage | OpenCall | undefined;
  private text = "";
  private readonly calls: Array<{ call_id: string; name: string; arguments: string }> = [];
  /** The closed reasoning items' text and details, for the stored turn. */
  private readonly reasoned: TurnReasoning[] = [];
  private finish: string | null = null;
  private usage: Json | null = null;
  /** Whether reasoning items carry encrypted_content (include "reasoning.encrypted_content"). */
  private readonly encrypted: boolean;
  /** The request's namespaced functions by chat name: their calls' items carry name and namespace. */
  private readonly names: Map<string, CallName> | undefined;

  constructor(
    private readonly seed: ResponseSeed,
    /** Runs before response.completed goes out (storing it); a throw becomes response.failed. */
    private readonly onFinished: (f: FinishedResponse) => Promise<void>,
  ) {
    this.encrypted = includesEncrypted(seed.body);
    this.names = namespacedNames(seed.body.tools);
  }

  private frame(type: string, fields: Json): string {
    return sseFrame(type, { type, sequence_number: this.seq++, ...fields });
  }

  private envelope(status: "in_progress" | "completed" | "incomplete" | "failed", extra: { usage?: Json | null; error?: Json } = {}): Json {
    return responseEnvelope(this.seed, { status, output: this.output, finish: this.finish, ...extra });
  }

  private begin(out: string[]): void {
    if (this.started) return;
    this.started = true;
    out.push(this.frame("response.created", { response: this.envelope("in_progress") }));
    out.push(this.frame("response.in_progress", { response: this.envelope("in_progress") }));
  }

  /** Closes the open item (its done events), if any. */
  private close(out: string[], status: "completed" | "incomplete"): void {
    const o = this.open;
    if (!o) return;
    this.open = undefined;
    if (o.kind === "reasoning") {
      if (o.text !== "") {
        const where = { item_id: o.id, output_index: o.index, summary_index: 0 };
        out.push(this.frame("response.reasoning_summary_text.done", { ...where, text: o.text }));
        out.push(this.frame("response.reasoning_summary_part.done", { ...where, part: { type: "summary_text", text: o.text } }));
      }
      const item = reasoningItem(o.id, o.text, o.details, this.encrypted);
      this.output[o.index] = item;
      this.reasoned.push({ text: o.text, details: o.details });
      out.push(this.frame("response.output_item.done", { output_index: o.index, item }));
    } else if (o.kind === "message") {
      const content: Json[] = [];
      o.parts.forEach((kind, i) => {
        const part = kind === "output_text" ? outputText(o.text, o.logprobs) : { type: "refusal", refusal: o.refusal };
        if (kind === "output_text") out.push(this.frame("response.output_text.done", { item_id: o.id, output_index: o.index, content_index: i, text: o.text, logprobs: o.logprobs }));
        else out.push(this.frame("response.refusal.done", { item_id: o.id, output_index: o.index, content_index: i, refusal: o.refusal }));
        out.push(this.frame("response.content_part.done", { item_id: o.id, output_index: o.index, content_index: i, part }));
        content.push(part);
      });
      const item = { id: o.id, type: "message", status, role: "assistant", content };
      this.output[o.index] = item;
      out.push(this.frame("response.output_item.done", { output_index: o.index, item }));
    } else {
      out.push(this.frame("response.function_call_arguments.done", { item_id: o.id, output_index: o.index, name: callName(o.name, this.names).name, arguments: o.arguments }));
      // Cut by the output limit, its arguments are unfinished JSON: a client must not run it as if whole.
      const item = { id: o.id, type: "function_call", status, call_id: o.call_id, ...callName(o.name, this.names), arguments: o.arguments };
      this.output[o.index] = item;
      this.calls.push({ call_id: o.call_id, name: o.name, arguments: o.arguments });
      out.push(this.frame("response.output_item.done", { output_index: o.index, item }));
    }
  }

  /**
   * A delta's reasoning: its text as the open reasoning item's summary
   * deltas (one summary part, opened on the first text), its
   * reasoning_details pieces merged into the item's (a signature arrives as
   * a piece without text). The item opens on the first piece that carries
   * anything; reasoning after the message or a call opened is a new item.
   */
  private reasoning(out: string[], delta: Json): void {
    const text = typeof delta.reasoning === "string" ? delta.reasoning : "";
    const pieces = Array.isArray(delta.reasoning_details) ? delta.reasoning_details.filter(isObject) : [];
    if (text === "" && !pieces.some(detailCarries)) return;
    let r = this.open?.kind === "reasoning" ? this.open : undefined;
    if (!r) {
      this.close(out, "completed");
      r = { kind: "reasoning", index: this.output.length, id: newItemId("rs"), text: "", details: [] };
      this.output.push({ id: r.id, type: "reasoning", summary: [] });
      this.open = r;
      out.push(this.frame("response.output_item.added", { output_index: r.index, item: this.output[r.index] }));
    }
    for (const p of pieces) mergeDetail(r.details, p);
    if (text === "") return;
    const where = { item_id: r.id, output_index: r.index, summary_index: 0 };
    if (r.text === "") {
      const part = { type: "summary_text", text: "" };
      (this.output[r.index]!.summary as Json[]).push(part);
      out.push(this.frame("response.reasoning_summary_part.added", { ...where, part }));
    }
    r.text += text;
    out.push(this.frame("response.reasoning_summary_text.delta", { ...where, delta: text }));
  }

  private message(out: string[]): OpenMessage {
    if (this.open?.kind === "message") return this.open;
    this.close(out, "completed");
    const m: OpenMessage = { kind: "message", index: this.output.length, id: newItemId("msg"), text: "", refusal: "", logprobs: [], parts: [] };
    this.output.push({ id: m.id, type: "message", status: "in_progress", role: "assistant", content: [] });
    this.open = m;
    out.push(this.frame("response.output_item.added", { output_index: m.index, item: this.output[m.index] }));
    return m;
  }

  private part(out: string[], m: OpenMessage, kind: "output_text" | "refusal"): number {
    const at = m.parts.indexOf(kind);
    if (at >= 0) return at;
    m.parts.push(kind);
    const i = m.parts.length - 1;
    const part = kind === "output_text" ? outputText("", []) : { type: "refusal", refusal: "" };
    (this.output[m.index]!.content as Json[]).push(part);
    out.push(this.frame("response.content_part.added", { item_id: m.id, output_index: m.index, content_index: i, part }));
    return i;
  }

  chunk(chunk: Json): string[] {
    const out: string[] = [];
    this.begin(out);
    if (isObject(chunk.usage)) this.usage = responsesUsage(chunk.usage);
    const choice = Array.isArray(chunk.choices) && isObject(chunk.choices[0]) ? chunk.choices[0] : undefined;
    if (!choice) return out;
    const delta = isObject(choice.delta) ? choice.delta : {};
    // An answer without reasoning costs these two property checks.
    if ((delta.reasoning !== undefined && delta.reasoning !== null) || delta.reasoning_details !== undefined) this.reasoning(out, delta);
    if (typeof delta.content === "string" && delta.content !== "") {
      const m = this.message(out);
      const i = this.part(out, m, "output_text");
      const logprobs = responsesLogprobs(isObject(choice.logprobs) ? choice.logprobs.content : undefined);
      m.text += delta.content;
      this.text += delta.content;
      m.logprobs.push(...logprobs);
      out.push(this.frame("response.output_text.delta", { item_id: m.id, output_index: m.index, content_index: i, delta: delta.content, logprobs }));
    }
    if (typeof delta.refusal === "string" && delta.refusal !== "") {
      const m = this.message(out);
      const i = this.part(out, m, "refusal");
      m.refusal += delta.refusal;
      out.push(this.frame("response.refusal.delta", { item_id: m.id, output_index: m.index, content_index: i, delta: delta.refusal }));
    }
    for (const tc of Array.isArray(delta.tool_calls) ? delta.tool_calls.filter(isObject) : []) this.toolCall(out, tc);
    if (typeof choice.finish_reason === "string") this.finish = choice.finish_reason;
    return out;
  }

  private toolCall(out: string[], tc: Json): void {
    const fn = isObject(tc.function) ? tc.function : {};
    const chatIndex = typeof tc.index === "number" ? tc.index : 0;
    const open = this.open?.kind === "call" ? this.open : undefined;
    let call = continuesCall(open && { chatIndex: open.chatIndex, callId: open.call_id }, chatIndex, tc) ? open : undefined;
    if (!call) {
      this.close(out, "completed");
      call = { kind: "call", index: this.output.length, id: newItemId("fc"), chatIndex, call_id: String(tc.id ?? ""), name: String(fn.name ?? ""), arguments: "" };
      this.output.push({ id: call.id, type: "function_call", status: "in_progress", call_id: call.call_id, ...callName(call.name, this.names), arguments: "" });
      this.open = call;
      out.push(this.frame("response.output_item.added", { output_index: call.index, item: this.output[call.index] }));
    }
    const args = typeof fn.arguments === "string" ? fn.arguments : "";
    if (args !== "") {
      call.arguments += args;
      out.push(this.frame("response.function_call_arguments.delta", { item_id: call.id, output_index: call.index, delta: args }));
    }
  }

  async done(): Promise<string[]> {
    const out: string[] = [];
    this.begin(out);
    const status = statusOf(this.finish);
    this.close(out, status === "completed" ? "completed" : "incomplete");
    // An answer with nothing in it (reasoning aside) still has its (empty) message, as a whole answer does.
    if (this.output.every((i) => i.type === "reasoning")) {
      const m = this.message(out);
      this.part(out, m, "output_text");
      this.close(out, status === "completed" ? "completed" : "incomplete");
    }
    const response = this.envelope(status, { usage: this.usage ?? responsesUsage(undefined) });
    try {
      const turn = historyTurn(this.text, this.calls);
      for (const r of this.reasoned) attachReasoning(turn, r.text, r.details);
      await this.onFinished({ response, turn });
    } catch (err) {
      return [...out, ...this.fail({ code: "server_error", message: (err as Error)?.message ?? "the response could not be stored" })];
    }
    out.push(this.frame(status === "completed" ? "response.completed" : "response.incomplete", { response }));
    return out;
  }

  fail(failure: StreamFailure): string[] {
    const out: string[] = [];
    this.begin(out);
    // OpenAI's ResponseError codes are its own; a router or upstream failure is a server_error.
    const error = { code: "server_error", message: failure.code === "server_error" ? failure.message : `${failure.code}: ${failure.message}` };
    out.push(this.frame("response.failed", { response: this.envelope("failed", { usage: this.usage, error }) }));
    return out;
  }
}
