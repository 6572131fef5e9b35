// The fast path held to zod: for every body the fast path accepts, zod
// accepts it too and hands back an equal value — over tens of thousands of
// bodies mutated from real requests of each route (a bound crossed, a type
// swapped, a key dropped or added, deep inside the messages too). And it is
// a fast path in fact: the requests clients send most pass it.
import { describe, expect, it } from "vitest";
import * as z from "zod";
import { acceptsAsIs } from "./accept-as-is.ts";
import { chatCompletionSchema } from "./routes/v1/chat/completions.ts";
import { completionSchema } from "./routes/v1/completions/create.ts";
import { hiddenStatesSchema } from "./routes/v1/hidden_states/create.ts";
import { createMessageSchema } from "./routes/v1/messages/create.ts";
import { createResponseSchema } from "./routes/v1/responses/create.ts";

/** A seeded generator (mulberry32): a failure names its seed and replays. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const numbers = [-3, -2.5, -2, -1, -0.5, 0, 0.1, 0.5, 1, 1.5, 2, 2.5, 4, 5, 6, 8, 9, 10, 10.5, 16, 20, 21, 64, 128, 129, 256, 1024, 1025, 4294967295, 4294967296, 9007199254740991, 9007199254740992, -9007199254740991, -9007199254740992, 1e300];
const strings = ["", "x", "sim", "hi", "user", "system", "assistant", "developer", "tool", "function", "auto", "none", "required", "any", "text", "json_object", "json_schema", "function", "ephemeral", "5m", "1h", "all", "mean", "f16", "low", "disabled", "get_weather", "bad name!", "123", "allowed_tools", "a".repeat(65), "a".repeat(300)];
const scalars: unknown[] = [...numbers, ...strings, true, false, null];

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

function randomValue(r: () => number, depth = 0): unknown {
  const k = r();
  if (depth > 2 || k < 0.6) return pick(r, scalars);
  if (k < 0.8) return Array.from({ length: Math.floor(r() * 4) }, () => randomValue(r, depth + 1));
  const o: Record<string, unknown> = {};
  for (let i = Math.floor(r() * 3); i > 0; i--) o[pick(r, ["type", "name", "role", "content", "text", "function", "schema", "x"])] = randomValue(r, depth + 1);
  return o;
}

/** Every path to a value inside `v` (objects' keys, arrays' indices). */
function paths(v: unknown, at: (string | number)[] = [], out: (string | number)[][] = []): (string | number)[][] {
  out.push(at);
  if (Array.isArray(v)) v.forEach((x, i) => paths(x, [...at, i], out));
  else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) paths(x, [...at, k], out);
  return out;
}

/** One random change somewhere in the body: a value replaced, a key dropped or added, an array emptied or grown. */
function mutate(r: () => number, body: unknown): unknown {
  const copy = structuredClone(body) as Record<string, unknown>;
  const all = paths(copy).filter((p) => p.length > 0);
  if (all.length === 0) return { [pick(r, ["model", "messages", "input", "prompt"])]: randomValue(r) };
  const path = pick(r, all);
  const parent = path.slice(0, -1).reduce<any>((o, k) => o[k], copy);
  const key = path[path.length - 1]!;
  const what = r();
  if (what < 0.55) parent[key] = randomValue(r);
  else if (what < 0.7 && !Array.isArray(parent)) delete parent[key];
  else if (what < 0.85 && !Array.isArray(parent)) parent[pick(r, ["extra", "n", "stream", "seed", "tools", "stop", "logprobs", "name", "tool_calls", "cache_control", "metadata"])] = randomValue(r);
  else if (Array.isArray(parent[key])) parent[key] = what < 0.92 ? [] : [...parent[key], ...parent[key]];
  else parent[key] = [parent[key]];
  return copy;
}

const chatSeeds = [
  { model: "sim", messages: [{ role: "user", content: "hi" }] },
  { model: "sim", stream: true, stream_options: { include_usage: true }, max_tokens: 64, temperature: 0.7, top_p: 0.9, messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi there" }] },
  { model: "sim", n: 2, seed: 7, stop: ["\n"], logprobs: true, top_logprobs: 3, user: "u1", max_completion_tokens: 10, messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }] },
  {
    model: "sim",
    tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }],
    tool_choice: { type: "function", function: { name: "get_weather" } },
    parallel_tool_calls: false,
    response_format: { type: "json_object" },
    messages: [
      { role: "user", content: "weather?" },
      { role: "assistant", content: null, tool_calls: [{ id: "c1", type: "function", function: { name: "get_weather", arguments: "{}" } }] },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ],
  },
];

const routes: Array<{ name: string; schema: z.ZodType; seeds: unknown[]; fast: unknown[] }> = [
  { name: "chat", schema: chatCompletionSchema, seeds: chatSeeds, fast: chatSeeds },
  {
    name: "completions",
    schema: completionSchema,
    seeds: [{ model: "sim", prompt: "hi" }, { model: "sim", prompt: ["a", "b"], max_tokens: 5, echo: true, logprobs: 2, stream: false }],
    fast: [{ model: "sim", prompt: "hi" }],
  },
  {
    name: "messages",
    schema: createMessageSchema,
    seeds: [
      { model: "sim", max_tokens: 16, messages: [{ role: "user", content: "hi" }] },
      { model: "sim", max_tokens: 16, system: [{ type: "text", text: "be brief", cache_control: { type: "ephemeral" } }], stream: true, temperature: 0.5, messages: [{ role: "user", content: [{ type: "text", text: "hi" }] }] },
    ],
    fast: [{ model: "sim", max_tokens: 16, messages: [{ role: "user", content: "hi" }] }],
  },
  {
    name: "responses",
    schema: createResponseSchema,
    seeds: [{ model: "sim", input: "hi" }, { model: "sim", input: [{ role: "user", content: "hi" }], instructions: "be brief", max_output_tokens: 20, text: { format: { type: "json_object" } }, metadata: { a: "b" } }],
    fast: [{ model: "sim", input: "hi" }],
  },
  {
    name: "hidden_states",
    schema: hiddenStatesSchema,
    seeds: [{ model: "sim", input: "hi", layers: [0, 1], pooling: "mean" }, { model: "sim", messages: [{ role: "user", content: "hi" }], layers: "all", dtype: "f16" }],
    fast: [{ model: "sim", input: "hi", layers: [0, 1], pooling: "mean" }],
  },
];

describe("acceptsAsIs: a body the fast path accepts is one zod accepts and returns unchanged", () => {
  for (const route of routes) {
    it(`${route.name}: 20,000 bodies mutated from real requests`, () => {
      const accept = acceptsAsIs(route.schema);
      const r = rng(route.name.length * 7919);
      let accepted = 0;
      let zodOk = 0;
      for (let i = 0; i < 20_000; i++) {
        let body = pick(r, route.seeds);
        for (let m = 1 + Math.floor(r() * 3); m > 0; m--) body = mutate(r, body);
        // As the router sees a body: JSON's values only.
        body = JSON.parse(JSON.stringify(body));
        const parsed = route.schema.safeParse(body);
        if (parsed.success) zodOk++;
        if (!accept(body)) continue;
        accepted++;
        expect(parsed.success, `${route.name} #${i}: ${JSON.stringify(body)}`).toBe(true);
        expect(parsed.data, `${route.name} #${i}`).toStrictEqual(body);
      }
      // The mutations reach both sides: bodies zod refuses, and bodies the fast path takes.
      expect(zodOk).toBeLessThan(20_000);
      expect(accepted).toBeGreaterThan(500);
    });

    it(`${route.name}: takes the plain requests clients send most`, () => {
      const accept = acceptsAsIs(route.schema);
      for (const body of route.fast) expect(accept(JSON.parse(JSON.stringify(body))), JSON.stringify(body)).toBe(true);
    });
  }

  it("leaves to zod what zod would change or must explain", () => {
    const chat = acceptsAsIs(chatCompletionSchema);
    const ok = { model: "sim", messages: [{ role: "user", content: "hi" }] };
    // zod's copy would not keep "__proto__" as a key.
    expect(chat(JSON.parse('{"model":"sim","messages":[{"role":"user","content":"hi"}],"__proto__":{"x":1}}'))).toBe(false);
    // A record with its keys checked (logit_bias: token ids), and a bound crossed: zod's, for the value or for the error naming the field.
    expect(chat({ ...ok, logit_bias: { "5": 1 } })).toBe(true);
    expect(chat({ ...ok, logit_bias: { five: 1 } })).toBe(false);
    expect(chat({ ...ok, temperature: 2.5 })).toBe(false);
    expect(chat({ ...ok, max_tokens: 1.5 })).toBe(false);
    expect(chat({ ...ok, messages: [] })).toBe(false);
    // The schema's own refinement runs: tool_choice naming no tool.
    expect(chat({ ...ok, tool_choice: "auto" })).toBe(false);
    expect(chat({ ...ok, tool_choice: "none" })).toBe(true);
    // NaN and Infinity are numbers to JavaScript, not to zod.
    expect(chat({ ...ok, temperature: Number.NaN })).toBe(false);
    expect(chat({ ...ok, seed: Number.POSITIVE_INFINITY })).toBe(false);
    // Types the fast path does not know: defaults, transforms, a plain object that strips keys, coercion.
    expect(acceptsAsIs(z.object({ a: z.string().default("x") }))({})).toBe(false);
    expect(acceptsAsIs(z.object({ a: z.string().transform((s) => s.length) }))({ a: "xy" })).toBe(false);
    expect(acceptsAsIs(z.object({ a: z.string() }))({ a: "x", b: 1 })).toBe(false);
    expect(acceptsAsIs(z.object({ a: z.string() }))({ a: "x" })).toBe(true);
    expect(acceptsAsIs(z.strictObject({ a: z.string() }))({ a: "x", b: 1 })).toBe(false);
    expect(acceptsAsIs(z.object({ a: z.coerce.number() }))({ a: 1 })).toBe(false);
    // A schema that contains itself (through a getter, as zod 4 writes recursion): compiled once, checked at every depth.
    const Node = z.object({
      name: z.string().min(1),
      get children() {
        return z.array(Node).optional();
      },
    });
    const tree = acceptsAsIs(Node);
    const deep = { name: "a", children: [{ name: "b", children: [{ name: "c" }] }] };
    expect(tree(deep)).toBe(true);
    expect(Node.safeParse(deep).data).toStrictEqual(deep);
    expect(tree({ name: "a", children: [{ name: "b", children: [{ name: "" }] }] })).toBe(false);
    // An async refinement: zod's (which refuses it in a synchronous parse).
    expect(acceptsAsIs(z.string().refine(async () => true))("x")).toBe(false);
  });
});
