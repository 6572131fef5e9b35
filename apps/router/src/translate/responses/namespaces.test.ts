// Tool namespaces across the Responses ↔ chat boundary, without a router:
// a namespace's functions run as chat functions named <namespace>__<name>,
// their calls come back as function_call items with name and namespace
// (whole and streamed), a call item sent back with its namespace is the
// same chat call, and what chat cannot carry is the client's 400.
import { describe, expect, it } from "vitest";
import { ApiError } from "../../errors.ts";
import type { Json } from "../boundary.ts";
import { inputItems } from "./items.ts";
import { namespacedNames } from "./namespaces.ts";
import { toChatRequest } from "./request.ts";
import { outputFromCompletion } from "./response.ts";
import { ResponsesStreamTranslator } from "./stream.ts";

const crm: Json = {
  type: "namespace",
  name: "crm",
  description: "Customer records.",
  tools: [
    { type: "function", name: "lookup", description: "Find a customer.", parameters: { type: "object", properties: { id: { type: "string" } } } },
    { type: "function", name: "forget", parameters: { type: "object", properties: {} } },
  ],
};
const tools: Json[] = [{ type: "function", name: "lookup", parameters: { type: "object", properties: {} } }, crm];

function refusal(body: Json): ApiError {
  try {
    toChatRequest({ model: "m", input: "hi", ...body }, []);
  } catch (err) {
    if (err instanceof ApiError) return err;
    throw err;
  }
  throw new Error("not refused");
}

describe("tool namespaces", () => {
  it("run as chat functions named <namespace>__<name>, the namespace's description first", () => {
    const { chat } = toChatRequest({ model: "m", input: "hi", tools }, []);
    expect(chat.tools).toEqual([
      { type: "function", function: { name: "lookup", parameters: { type: "object", properties: {} } } },
      { type: "function", function: { name: "crm__lookup", description: "Customer records.\n\nFind a customer.", parameters: { type: "object", properties: { id: { type: "string" } } } } },
      { type: "function", function: { name: "crm__forget", description: "Customer records.", parameters: { type: "object", properties: {} } } },
    ]);
  });

  it("a call item sent back with its namespace is the same chat call", () => {
    const { chat } = toChatRequest(
      {
        model: "m",
        tools,
        input: [
          { role: "user", content: "who is 7?" },
          { type: "function_call", call_id: "c1", name: "lookup", namespace: "crm", arguments: '{"id":"7"}' },
          { type: "function_call", call_id: "c2", name: "lookup", arguments: "{}" },
          { type: "function_call_output", call_id: "c1", output: "Ada" },
          { type: "function_call_output", call_id: "c2", output: "-" },
        ],
      },
      [],
    );
    const turn = (chat.messages as Json[])[1]!;
    expect((turn.tool_calls as Json[]).map((c) => (c.function as Json).name)).toEqual(["crm__lookup", "lookup"]);
    // input_items lists it as it was sent.
    expect(inputItems([{ type: "function_call", call_id: "c1", name: "lookup", namespace: "crm", arguments: "{}" }], new Set())[0]).toMatchObject({ name: "lookup", namespace: "crm" });
  });

  it("a whole answer's calls come back with name and namespace; the stored turn keeps the chat names", () => {
    const completion: Json = {
      choices: [
        {
          finish_reason: "tool_calls",
          message: {
            role: "assistant",
            content: null,
            tool_calls: [
              { id: "c1", type: "function", function: { name: "crm__lookup", arguments: '{"id":"7"}' } },
              { id: "c2", type: "function", function: { name: "lookup", arguments: "{}" } },
            ],
          },
        },
      ],
    };
    const { output, turn } = outputFromCompletion(completion, false, namespacedNames(tools));
    expect(output.map((o) => [o.type, o.name, o.namespace])).toEqual([
      ["function_call", "lookup", "crm"],
      ["function_call", "lookup", undefined],
    ]);
    expect((turn.tool_calls as Json[]).map((c) => (c.function as Json).name)).toEqual(["crm__lookup", "lookup"]);
  });

  it("a streamed call's items and its arguments' done event name it as the client did", async () => {
    let stored: Json | undefined;
    const t = new ResponsesStreamTranslator({ id: "resp_1", createdAt: 1, body: { model: "m", input: "hi", tools } }, async ({ turn }) => {
      stored = turn;
    });
    const frames = [
      ...t.chunk({ choices: [{ index: 0, delta: { role: "assistant", tool_calls: [{ index: 0, id: "c1", type: "function", function: { name: "crm__forget", arguments: "" } }] } }] }),
      ...t.chunk({ choices: [{ index: 0, delta: { tool_calls: [{ index: 0, function: { arguments: "{}" } }] }, finish_reason: "tool_calls" }] }),
      ...(await t.done()),
    ];
    const events = frames.map((f) => JSON.parse(/^data: (.*)$/m.exec(f)![1]!) as Json);
    const added = events.find((e) => e.type === "response.output_item.added")!;
    expect(added.item).toMatchObject({ type: "function_call", name: "forget", namespace: "crm" });
    expect(events.find((e) => e.type === "response.function_call_arguments.done")).toMatchObject({ name: "forget", arguments: "{}" });
    expect(events.find((e) => e.type === "response.output_item.done")!.item).toMatchObject({ name: "forget", namespace: "crm", arguments: "{}" });
    expect(((stored!.tool_calls as Json[])[0]!.function as Json).name).toBe("crm__forget");
  });

  it("what chat cannot carry is the client's 400, naming the field", () => {
    expect(refusal({ tools: [{ ...crm, tools: [{ type: "custom", name: "patch" }] }] }).param).toBe("tools[0].tools[0].type");
    expect(refusal({ tools: [{ ...crm, name: "has space" }] }).param).toBe("tools[0].name");
    expect(refusal({ tools: [{ ...crm, tools: [] }] }).param).toBe("tools[0].tools");
    expect(refusal({ tools: [{ ...crm, name: "n".repeat(60) }] }).param).toBe("tools[0].tools[0].name");
    // A function named as a namespaced one runs as: its calls could not be told apart.
    expect(refusal({ tools: [crm, { type: "function", name: "crm__lookup" }] }).param).toBe("tools[1]");
    expect(refusal({ tools: [{ type: "web_search" }] }).message).toContain("only function tools (and namespaces of them) are supported (got 'web_search'; server tools such as web_search run inside OpenAI's API");
  });
});
