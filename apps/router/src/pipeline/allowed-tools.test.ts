import { describe, expect, it } from "vitest";
import { narrowAllowedTools } from "./allowed-tools.ts";

const tool = (name: string) => ({ type: "function", function: { name, parameters: { type: "object" } } });

describe("narrowAllowedTools", () => {
  it("keeps only the allowed tools and asks for the plain mode", () => {
    const body: Record<string, unknown> = {
      tools: [tool("a"), tool("b"), tool("c")],
      tool_choice: { type: "allowed_tools", allowed_tools: { mode: "required", tools: [{ type: "function", function: { name: "c" } }, { type: "function", function: { name: "a" } }] } },
    };
    narrowAllowedTools("/v1/chat/completions", body);
    expect(body).toEqual({ tools: [tool("a"), tool("c")], tool_choice: "required" });
  });

  it("leaves every other choice, and other routes, as they are", () => {
    for (const tool_choice of ["auto", "none", "required", { type: "function", function: { name: "a" } }, undefined]) {
      const body = { tools: [tool("a"), tool("b")], tool_choice };
      narrowAllowedTools("/v1/chat/completions", body);
      expect(body).toEqual({ tools: [tool("a"), tool("b")], tool_choice });
    }
    const completions = { tools: [tool("a")], tool_choice: { type: "allowed_tools", allowed_tools: { mode: "auto", tools: [] } } };
    narrowAllowedTools("/v1/completions", completions);
    expect(completions.tool_choice.type).toBe("allowed_tools");
  });
});
