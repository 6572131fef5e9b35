import { describe, expect, it } from "vitest";
import { upstreamBody, upstreamJson } from "./types.ts";

describe("an attempt's upstream body", () => {
  const cases: Array<[string, Record<string, unknown>, Record<string, unknown> | undefined]> = [
    ["no fields", { model: "m", messages: [{ role: "user", content: "hi" }] }, undefined],
    ["fields after the body's own", { model: "m", stream: true }, { switchyard_prefix: null, switchyard_cache_scope: "s_1" }],
    ["an empty body", {}, { max_tokens: 7 }],
    ["a field the body has too: the attempt's wins, once", { model: "m", max_tokens: 900 }, { max_tokens: 100 }],
    ["an undefined field is left out, a null one kept", { model: "m" }, { a: undefined, b: null }],
    ["only undefined fields", { model: "m" }, { a: undefined }],
    ["keys and values that need escaping", { model: 'a"b' }, { 'k"\n': "\u2028\ud800", n: [1, { x: "y" }] }],
  ];
  for (const [name, body, fields] of cases) {
    it(`is the merged object's JSON: ${name}`, () => {
      const req = { body, ...(fields ? { fields } : {}) };
      const text = upstreamJson(req);
      expect(text).toBe(JSON.stringify(upstreamBody(req)));
      expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify({ ...body, ...fields })));
    });
  }

  it("leaves the request's body as it was", () => {
    const body = { model: "m" };
    upstreamJson({ body, fields: { x: 1 } });
    expect(upstreamBody({ body, fields: { x: 1 } })).toEqual({ model: "m", x: 1 });
    expect(body).toEqual({ model: "m" });
    expect(upstreamBody({ body })).toBe(body);
  });
});
