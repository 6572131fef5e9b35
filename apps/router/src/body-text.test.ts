import { describe, expect, it } from "vitest";
import { bodyEdited, keepBodyText, setBodyField, takeBodyText, withFields } from "./body-text.ts";
import { upstreamJson } from "./backends/types.ts";

describe("a body's client text", () => {
  it("is handed out once, then forgotten", () => {
    const text = '{ "model" : "m" }';
    const body = JSON.parse(text) as Record<string, unknown>;
    keepBodyText(body, text);
    expect(takeBodyText(body)).toBe(text);
    expect(takeBodyText(body)).toBeUndefined();
  });

  it("belongs to the object, not to a copy of it", () => {
    const text = '{"model":"m"}';
    const body = JSON.parse(text) as Record<string, unknown>;
    keepBodyText(body, text);
    expect(takeBodyText({ ...body })).toBeUndefined();
    expect(takeBodyText(body)).toBe(text);
  });

  it("is forgotten when the body is edited in place", () => {
    const text = '{"model":"m","max_tokens":5}';
    const body = JSON.parse(text) as Record<string, unknown>;
    keepBodyText(body, text);
    bodyEdited(body);
    body.max_tokens = 9;
    expect(upstreamJson({ body })).toBe('{"model":"m","max_tokens":9}');
  });

  it("stays exact when a field the body lacked is set: written after the others", () => {
    const text = '{"model": "m",\n "stream": true}\n';
    const body = JSON.parse(text) as Record<string, unknown>;
    keepBodyText(body, text);
    setBodyField(body, "stream_options", { include_usage: true });
    expect(body.stream_options).toEqual({ include_usage: true });
    const sent = takeBodyText(body)!;
    expect(sent).toBe('{"model": "m",\n "stream": true,"stream_options":{"include_usage":true}}');
    expect(JSON.parse(sent)).toEqual(body);
  });

  it("is dropped when a field the body had is set (the text would say it twice)", () => {
    const text = '{"model":"m","stream_options":{"include_usage":false}}';
    const body = JSON.parse(text) as Record<string, unknown>;
    keepBodyText(body, text);
    setBodyField(body, "stream_options", { include_usage: true });
    expect(takeBodyText(body)).toBeUndefined();
    expect(upstreamJson({ body })).toBe('{"model":"m","stream_options":{"include_usage":true}}');
  });

  it("goes upstream as the client wrote it, with the attempt's fields after it", () => {
    const text = ' {"messages":[{"role":"user","content":"h\\u0069"}], "model":"m"} ';
    const body = JSON.parse(text) as Record<string, unknown>;
    keepBodyText(body, text);
    const sent = upstreamJson({ body, fields: { switchyard_cache_scope: "s_1", switchyard_prefix: null, skipped: undefined } });
    expect(sent).toBe(' {"messages":[{"role":"user","content":"h\\u0069"}], "model":"m","switchyard_cache_scope":"s_1","switchyard_prefix":null}');
    expect(JSON.parse(sent)).toEqual({ ...body, switchyard_cache_scope: "s_1", switchyard_prefix: null });
  });

  it("is not used when the body has one of the attempt's fields: merged the plain way", () => {
    const text = '{"model":"m","max_tokens":900}';
    const body = JSON.parse(text) as Record<string, unknown>;
    keepBodyText(body, text);
    expect(upstreamJson({ body, fields: { max_tokens: 100 } })).toBe('{"model":"m","max_tokens":100}');
  });
});

describe("withFields", () => {
  const cases: Array<[string, string, Record<string, unknown>, string | undefined]> = [
    ["after the last member", '{"a":1}', { b: 2 }, '{"a":1,"b":2}'],
    ["an empty object, spaces inside", "{ \n}", { b: 2 }, '{ \n"b":2}'],
    ["trailing whitespace dropped", '{"a":{}}\r\n\t ', { b: [1] }, '{"a":{},"b":[1]}'],
    ["a member ending in a brace-like string", '{"a":"{"}', { b: 2 }, '{"a":"{","b":2}'],
    ["nothing to add", '{"a":1} ', { b: undefined }, '{"a":1}'],
    ["keys and values that need escaping", "{}", { 'k"\n': "\u2028" }, JSON.stringify({ 'k"\n': "\u2028" })],
    ["not an object", "[1]", { b: 2 }, undefined],
    ["empty text", "  ", { b: 2 }, undefined],
  ];
  for (const [name, text, fields, want] of cases) {
    it(name, () => {
      const got = withFields(text, fields);
      expect(got).toBe(want);
      if (got !== undefined) expect(JSON.parse(got)).toEqual(JSON.parse(JSON.stringify({ ...(JSON.parse(text) as object), ...fields })));
    });
  }
});
