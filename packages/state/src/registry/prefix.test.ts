import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { PREFIX_MIN_CHARS, prefixKey } from "./prefix.ts";

// The name as every earlier router computed it: routers of two versions
// side by side, and the names workers advertise, must agree.
const before = (scope: string, text: string) => createHash("sha256").update(`${scope.length}:${scope}\u0000`).update(text.slice(0, 4096)).digest("base64url").slice(0, 22);

describe("a prefix's name", () => {
  const long = "You are the internal assistant of the treasury desk. Answer in one short sentence and cite the memo.";
  const cases: Array<[string, string, string]> = [
    ["a system prompt", "7", `system\u0000${long}`],
    ["characters of every UTF-8 length", "12", `user\u0000${long} — café 東京 🚢`],
    ["a text cut at 4,096 characters between a surrogate pair's halves", "3", `user\u0000${"x".repeat(4096 - 6)}🚢${"y".repeat(500)}`],
    ["a scope that is not a number", "s_abc", `system\u0000${long}`],
  ];
  for (const [name, scope, text] of cases) {
    it(`is the one every router computed: ${name}`, () => {
      const [role, content] = text.split("\u0000") as [string, string];
      const got = prefixKey("/v1/chat/completions", { messages: [{ role, content }] }, scope);
      expect(got).toBe(before(scope, text));
      expect(got).toMatch(/^[A-Za-z0-9_-]{22}$/);
    });
  }

  it("differs by tenant, and short first messages get none", () => {
    const body = { messages: [{ role: "system", content: long }] };
    expect(prefixKey("/v1/chat/completions", body, "1")).not.toBe(prefixKey("/v1/chat/completions", body, "2"));
    expect(prefixKey("/v1/chat/completions", { messages: [{ role: "system", content: "x".repeat(PREFIX_MIN_CHARS - 10) }] }, "1")).toBeUndefined();
  });
});
