// The model's tool calls, read out of its text as it streams. The engine's
// grammar fixes the format (workers/engine/src/tools.rs):
//   <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
// with parallel calls separated by "\n". The parser turns text into OpenAI
// pieces as soon as they are certain: a call's id and name once its name is
// complete, then its arguments a fragment at a time, so a streamed answer
// is the same calls, split into chunks, as the whole one.
import { randomUUID } from "node:crypto";

export const CALL_OPEN = "<tool_call>\n";
const CALL_CLOSE = "\n</tool_call>";
const HEAD = /^\{"name": ("(?:[^"\\]|\\.)*"), "arguments": /;
/** Held text longer than this that still is no call head is not one. */
const MAX_HEAD = 512;

export type ToolCallPiece =
  | { kind: "text"; text: string }
  | { kind: "call"; index: number; id: string; name: string }
  | { kind: "arguments"; index: number; text: string };

export interface ToolCall {
  id: string;
  type: "function";
  function: { name: string; arguments: string };
}

type State = "start" | "text" | "head" | "arguments" | "close" | "between";

export class ToolCallParser {
  private state: State = "start";
  private held = "";
  private index = -1;
  // The arguments value being read: nesting depth, inside a string, after a backslash.
  private depth = 0;
  private inString = false;
  private escaped = false;
  readonly calls: ToolCall[] = [];
  text = "";

  constructor(private readonly newId: () => string = () => `call_${randomUUID().replaceAll("-", "").slice(0, 24)}`) {}

  /** Text from the model → the pieces it settles. */
  feed(chunk: string): ToolCallPiece[] {
    const out: ToolCallPiece[] = [];
    this.held += chunk;
    for (;;) {
      const before = this.state;
      const heldBefore = this.held.length;
      this.step(out);
      if (this.state === before && this.held.length === heldBefore) break;
    }
    return merge(out);
  }

  /** The generation ended: whatever was held back that is not a call is text. */
  finish(): ToolCallPiece[] {
    const out: ToolCallPiece[] = [];
    if ((this.state === "start" || this.state === "text") && this.held) this.emitText(out, this.held);
    this.held = "";
    return out;
  }

  private emitText(out: ToolCallPiece[], text: string) {
    this.text += text;
    out.push({ kind: "text", text });
  }

  private step(out: ToolCallPiece[]) {
    switch (this.state) {
      case "start":
        if (this.held.startsWith(CALL_OPEN)) {
          this.held = this.held.slice(CALL_OPEN.length);
          this.state = "head";
        } else if (!CALL_OPEN.startsWith(this.held)) {
          this.state = "text";
        }
        return;
      case "text":
        if (this.held) this.emitText(out, this.held);
        this.held = "";
        return;
      case "head": {
        const m = HEAD.exec(this.held);
        if (m) {
          this.index += 1;
          const call: ToolCall = { id: this.newId(), type: "function", function: { name: JSON.parse(m[1]!) as string, arguments: "" } };
          this.calls.push(call);
          out.push({ kind: "call", index: this.index, id: call.id, name: call.function.name });
          this.held = this.held.slice(m[0].length);
          this.state = "arguments";
          this.depth = 0;
          this.inString = false;
          this.escaped = false;
        } else if (this.held.length > MAX_HEAD) {
          // Not the grammar's format (only possible without one): text.
          this.state = "text";
        }
        return;
      }
      case "arguments": {
        let i = 0;
        let done = false;
        for (; i < this.held.length; i++) {
          const c = this.held[i]!;
          if (this.inString) {
            if (this.escaped) this.escaped = false;
            else if (c === "\\") this.escaped = true;
            else if (c === '"') this.inString = false;
          } else if (c === '"') this.inString = true;
          else if (c === "{" || c === "[") this.depth += 1;
          else if (c === "]") this.depth -= 1;
          else if (c === "}") {
            // The outer object's brace closes the call.
            if (this.depth === 0) {
              done = true;
              break;
            }
            this.depth -= 1;
          }
        }
        const args = this.held.slice(0, i);
        if (args) {
          this.calls[this.index]!.function.arguments += args;
          out.push({ kind: "arguments", index: this.index, text: args });
        }
        this.held = this.held.slice(done ? i + 1 : i);
        if (done) this.state = "close";
        return;
      }
      case "close":
        if (this.held.startsWith(CALL_CLOSE)) {
          this.held = this.held.slice(CALL_CLOSE.length);
          this.state = "between";
        }
        return;
      case "between":
        if (this.held.startsWith("\n" + CALL_OPEN)) {
          this.held = this.held.slice(1 + CALL_OPEN.length);
          this.state = "head";
        }
        return;
    }
  }
}

/** Adjacent pieces of one kind (and call) become one. */
function merge(pieces: ToolCallPiece[]): ToolCallPiece[] {
  const out: ToolCallPiece[] = [];
  for (const p of pieces) {
    const last = out.at(-1);
    if (last?.kind === "text" && p.kind === "text") last.text += p.text;
    else if (last?.kind === "arguments" && p.kind === "arguments" && last.index === p.index) last.text += p.text;
    else out.push({ ...p });
  }
  return out;
}

/** A piece as OpenAI streams it in `delta.tool_calls` (text pieces are `delta.content`). */
export function toolCallDelta(p: Exclude<ToolCallPiece, { kind: "text" }>) {
  return p.kind === "call"
    ? { index: p.index, id: p.id, type: "function", function: { name: p.name, arguments: "" } }
    : { index: p.index, function: { arguments: p.text } };
}
