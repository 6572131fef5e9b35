import { describe, expect, it } from "vitest";
import { ToolCallParser, type ToolCallPiece } from "./tool-calls.ts";

const two =
  '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris \\"Ville\\" {x}", "days": [1, {"a": "}"}]}}\n</tool_call>\n' +
  '<tool_call>\n{"name": "get_time", "arguments": {"tz": "UTC"}}\n</tool_call>';

function run(chunks: string[]) {
  let n = 0;
  const p = new ToolCallParser(() => `call_${n++}`);
  const pieces: ToolCallPiece[] = [];
  for (const c of chunks) pieces.push(...p.feed(c));
  pieces.push(...p.finish());
  return { p, pieces };
}

describe("ToolCallParser", () => {
  it("reads parallel calls the same whole or a character at a time", () => {
    const whole = run([two]);
    const bytes = run([...two]);
    expect(whole.p.calls).toEqual([
      { id: "call_0", type: "function", function: { name: "get_weather", arguments: '{"city": "Paris \\"Ville\\" {x}", "days": [1, {"a": "}"}]}' } },
      { id: "call_1", type: "function", function: { name: "get_time", arguments: '{"tz": "UTC"}' } },
    ]);
    expect(bytes.p.calls).toEqual(whole.p.calls);
    expect(whole.p.text).toBe("");
    // Streamed: a call's header first, then its arguments, which add up to the whole.
    const args = bytes.pieces.filter((x) => x.kind === "arguments" && x.index === 0).map((x) => (x as { text: string }).text).join("");
    expect(args).toBe(whole.p.calls[0]!.function.arguments);
    expect(bytes.pieces[0]).toEqual({ kind: "call", index: 0, id: "call_0", name: "get_weather" });
    expect(JSON.parse(whole.p.calls[0]!.function.arguments)).toEqual({ city: 'Paris "Ville" {x}', days: [1, { a: "}" }] });
  });

  it("passes text through, holding back only what could open a call", () => {
    const { p, pieces } = run(["<to", "day is sunny"]);
    expect(p.calls).toEqual([]);
    expect(p.text).toBe("<today is sunny");
    expect(pieces).toEqual([{ kind: "text", text: "<today is sunny" }]);
    const held = new ToolCallParser();
    expect(held.feed("<tool_")).toEqual([]);
    expect(held.finish()).toEqual([{ kind: "text", text: "<tool_" }]);
  });

  it("a call cut short by max_tokens keeps what arrived", () => {
    const { p } = run(['<tool_call>\n{"name": "f", "arguments": {"a": "bc']);
    expect(p.calls).toEqual([{ id: "call_0", type: "function", function: { name: "f", arguments: '{"a": "bc' } }]);
  });
});
