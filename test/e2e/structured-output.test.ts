// Structured outputs and tool calls on a self-hosted model, end to end: the
// official `openai` client → router → worker agent → engine (llguidance
// token masks) → the real SmolLM2-135M. A 135M model cannot be trusted to
// write JSON; the grammar guarantees it, so every answer must parse and
// validate (ajv), every required tool call must come back with valid
// arguments, and a streamed call must be the same call as the whole one.
import Ajv, { type ValidateFunction } from "ajv";
import addFormats from "ajv-formats";
import OpenAI from "openai";
import { zodResponseFormat } from "openai/helpers/zod";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import type { AgentHandle } from "@switchyard/agent";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

let fx: RouterFixture;
let agent: AgentHandle;
let client: OpenAI;
const LLM = "smollm2-135m-instruct";
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);

beforeAll(async () => {
  // Whole (non-streamed) answers have their headers only when complete, and
  // requests beyond the worker's batch of 8 wait their turn in the engine.
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN, "deadlines.headersMs": 600_000 });
  agent = await startTestWorker(fx, { id: "e2e-structured" });
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0, timeout: 600_000 });
}, 180_000);

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

/** Runs `jobs` with at most `n` in flight (the worker batches 8). */
async function pool<T, R>(items: T[], n: number, job: (item: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await job(items[i]!, i);
      }
    }),
  );
  return out;
}

// A small seeded generator, so the 100 schemas are the same every run.
function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const WORDS = ["name", "title", "city", "country", "color", "size", "count", "price", "status", "email", "date", "tags", "owner", "score", "level", "kind", "id", "note", "active", "rating"];
const FORMATS = ["date", "email", "uuid", "date-time", "ipv4", "time"];

/**
 * One schema of the kind `k` (0–9), built from the generator. Strings and
 * numbers are bounded, as a schema for a real answer would be: unbounded, a
 * 135M model can loop on one character of an email or one digit of a
 * number until max_tokens (finish_reason "length"), which no grammar can
 * end for it.
 */
function makeSchema(k: number, r: () => number): Record<string, unknown> {
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const leaf = (depth: number): Record<string, unknown> => {
    const t = Math.floor(r() * (depth > 0 ? 7 : 9));
    switch (t) {
      case 0:
        return { type: "string", maxLength: 8 + Math.floor(r() * 24) };
      case 1:
        return { type: "integer", minimum: Math.floor(r() * 10), maximum: 10 + Math.floor(r() * 1000) };
      case 2:
        return { type: "number", minimum: -1000, maximum: 1000 };
      case 3:
        return { type: "boolean" };
      case 4:
        return { enum: ["red", "green", "blue", "amber"].slice(0, 2 + Math.floor(r() * 3)) };
      case 5:
        return { type: "string", format: pick(FORMATS), maxLength: 40 };
      case 6:
        return { type: ["string", "null"], maxLength: 16 };
      case 7:
        return object(depth + 1, 2);
      default:
        return { type: "array", items: leaf(depth + 1), minItems: 1, maxItems: 3 };
    }
  };
  const object = (depth: number, max: number): Record<string, unknown> => {
    const n = 1 + Math.floor(r() * max);
    const names = [...WORDS].sort(() => r() - 0.5).slice(0, n);
    const properties = Object.fromEntries(names.map((w) => [w, leaf(depth)]));
    const required = names.filter((_, i) => i === 0 || r() < 0.6);
    return { type: "object", properties, required, ...(r() < 0.5 ? { additionalProperties: false } : {}) };
  };
  switch (k) {
    case 0: // flat object, every kind of leaf
      return object(0, 4);
    case 1: // an array of objects
      return { type: "array", items: object(1, 2), minItems: 1, maxItems: 2 };
    case 2: // enums and const
      return { type: "object", properties: { kind: { const: "event" }, level: { enum: ["low", "mid", "high"] }, ok: { type: "boolean" } }, required: ["kind", "level", "ok"] };
    case 3: // nested two deep
      return { type: "object", properties: { owner: object(1, 2), item: object(1, 3) }, required: ["owner", "item"] };
    case 4: // string formats
      return { type: "object", properties: Object.fromEntries(FORMATS.slice(0, 2 + Math.floor(r() * 4)).map((f) => [f.replace("-", "_"), { type: "string", format: f, maxLength: 40 }])), required: FORMATS.slice(0, 2).map((f) => f.replace("-", "_")) };
    case 5: // an array of enums
      return { type: "array", items: { enum: ["north", "south", "east", "west"] }, minItems: 2, maxItems: 4 };
    case 6: // anyOf alternatives
      return { anyOf: [{ type: "object", properties: { error: { type: "string", maxLength: 20 } }, required: ["error"], additionalProperties: false }, { type: "object", properties: { value: { type: "integer" } }, required: ["value"], additionalProperties: false }] };
    case 7: // $defs and $ref, the way pydantic and zod write them
      return { $defs: { point: { type: "object", properties: { x: { type: "number", minimum: -180, maximum: 180 }, y: { type: "number", minimum: -90, maximum: 90 } }, required: ["x", "y"] } }, type: "object", properties: { from: { $ref: "#/$defs/point" }, to: { $ref: "#/$defs/point" } }, required: ["from", "to"] };
    case 8: // numbers with bounds
      return { type: "object", properties: { score: { type: "number", minimum: 0, maximum: 1 }, count: { type: "integer", exclusiveMinimum: 0, maximum: 99 } }, required: ["score", "count"] };
    default: // a bounded string pattern
      return { type: "object", properties: { code: { type: "string", pattern: "^[A-Z]{3}-[0-9]{3}$" }, note: { type: "string", maxLength: 30 } }, required: ["code"] };
  }
}

const schemas = Array.from({ length: 100 }, (_, i) => makeSchema(i % 10, rng(1000 + i)));

describe("response_format json_schema on SmolLM2", () => {
  it("100 generated schemas: every answer parses and validates", async () => {
    const topics = ["a person", "a city", "an order", "a weather report", "a book", "a sensor reading", "a meeting", "a product"];
    const t0 = Date.now();
    const results = await pool(schemas, 16, async (schema, i) => {
      const res = await client.chat.completions.create({
        model: LLM,
        messages: [{ role: "user", content: `Describe ${topics[i % topics.length]} as JSON.` }],
        response_format: { type: "json_schema", json_schema: { name: `s${i}`, schema, strict: true } },
        temperature: 0,
        max_tokens: 240,
      });
      return { text: res.choices[0]!.message.content ?? "", finish: res.choices[0]!.finish_reason, tokens: res.usage?.completion_tokens ?? 0 };
    });
    const failures: string[] = [];
    for (const [i, r] of results.entries()) {
      let value: unknown;
      try {
        value = JSON.parse(r.text);
      } catch (err) {
        failures.push(`#${i} (${r.finish}, ${r.tokens} tokens) is not JSON: ${(err as Error).message}: ${r.text.slice(0, 300)}`);
        continue;
      }
      const validate: ValidateFunction = ajv.compile(schemas[i]!);
      if (!validate(value)) failures.push(`#${i} does not validate: ${ajv.errorsText(validate.errors)}: ${r.text.slice(0, 300)}`);
      if (r.finish !== "stop") failures.push(`#${i} finished with ${r.finish}`);
    }
    expect(failures).toEqual([]);
    process.stderr.write(`100 schemas in ${((Date.now() - t0) / 1000).toFixed(1)} s, ${results.reduce((a, r) => a + r.tokens, 0)} tokens\n`);
  }, 900_000);

  it("json_object: any JSON object", async () => {
    const res = await client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "Give a JSON object with a name and an age." }], response_format: { type: "json_object" }, temperature: 0, max_tokens: 200 });
    const v = JSON.parse(res.choices[0]!.message.content!) as unknown;
    expect(typeof v === "object" && v !== null && !Array.isArray(v)).toBe(true);
  });

  it("the SDK's chat.completions.parse() with a zod schema returns a parsed object", async () => {
    const Person = z.object({ name: z.string().max(30), age: z.number().int().min(0).max(120), role: z.enum(["admin", "user", "guest"]), tags: z.array(z.string().max(12)).max(3) });
    const res = await client.chat.completions.parse({
      model: LLM,
      messages: [{ role: "user", content: "Invent a user called Ada." }],
      response_format: zodResponseFormat(Person, "person"),
      temperature: 0,
      max_tokens: 200,
    });
    const parsed = res.choices[0]!.message.parsed;
    expect(parsed).not.toBeNull();
    expect(Person.parse(parsed)).toEqual(parsed);
  });

  it("a schema the grammar cannot enforce is a 400 naming the field (strict), ignored without strict", async () => {
    const odd = { type: "object", properties: { card: { type: "string", format: "credit-card" } }, required: ["card"] };
    const refused = client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "x" }], response_format: { type: "json_schema", json_schema: { name: "odd", schema: odd, strict: true } }, max_tokens: 8 });
    await expect(refused).rejects.toMatchObject({ status: 400, param: "response_format" });
    // A strict tool whose parameters the grammar cannot enforce: the 400 names that tool.
    const oddTool = client.chat.completions.create({
      model: LLM,
      messages: [{ role: "user", content: "x" }],
      tools: [tools[0]!, { type: "function", function: { name: "pay", parameters: odd, strict: true } }],
      tool_choice: "required",
      max_tokens: 8,
    });
    await expect(oddTool).rejects.toMatchObject({ status: 400, param: "tools[1].function.parameters" });
    const bad = client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "x" }], response_format: { type: "xml" } as never, max_tokens: 8 });
    await expect(bad).rejects.toMatchObject({ status: 400, param: "response_format.type" });
    const lenient = await client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "A card number." }], response_format: { type: "json_schema", json_schema: { name: "odd", schema: odd, strict: false } }, temperature: 0, max_tokens: 60 });
    expect(JSON.parse(lenient.choices[0]!.message.content!)).toHaveProperty("card");
  });
});

const tools: OpenAI.ChatCompletionTool[] = [
  {
    type: "function",
    function: {
      name: "get_weather",
      description: "Current weather in a city",
      parameters: { type: "object", properties: { city: { type: "string", maxLength: 40 }, unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"] },
    },
  },
  {
    type: "function",
    function: { name: "get_time", description: "Current time in a timezone", parameters: { type: "object", properties: { timezone: { type: "string", maxLength: 40 } }, required: ["timezone"] } },
  },
  {
    type: "function",
    function: {
      name: "search_flights",
      description: "Find flights between two airports on a date",
      parameters: { type: "object", properties: { from: { type: "string", pattern: "^[A-Z]{3}$" }, to: { type: "string", pattern: "^[A-Z]{3}$" }, date: { type: "string", format: "date" }, passengers: { type: "integer", minimum: 1, maximum: 9 } }, required: ["from", "to", "date"] },
    },
  },
];
const validators = new Map(tools.map((t) => [(t as OpenAI.ChatCompletionFunctionTool).function.name, ajv.compile((t as OpenAI.ChatCompletionFunctionTool).function.parameters!)]));

const prompts = [
  "What is the weather in Paris?",
  "Is it raining in London right now?",
  "What time is it in Tokyo?",
  "Find me a flight from JFK to LAX on 2025-03-14.",
  "How hot is it in Cairo in fahrenheit?",
  "Current time in Europe/Berlin please.",
  "Book two seats from CDG to NRT next Friday.",
  "Weather for Sydney?",
  "What's the time in New York?",
  "Flights from SFO to SEA on 2025-07-01 for 3 people.",
  "Temperature in Oslo in celsius.",
  "What time is it in UTC?",
  "Is it sunny in Madrid?",
  "Search flights BOS to ORD tomorrow.",
  "Tell me the local time in Mumbai.",
  "Weather in Reykjavik, please.",
  "Any flights from LHR to DXB on 2025-12-24?",
  "What's the weather like in Toronto?",
  "Time in Sao Paulo?",
  "Cheapest flight AMS to BCN on 2025-05-05.",
];

function validCall(call: OpenAI.ChatCompletionMessageToolCall): string | undefined {
  if (call.type !== "function") return `not a function call: ${JSON.stringify(call)}`;
  const validate = validators.get(call.function.name);
  if (!validate) return `unknown function ${call.function.name}`;
  let args: unknown;
  try {
    args = JSON.parse(call.function.arguments);
  } catch {
    return `arguments are not JSON: ${call.function.arguments}`;
  }
  if (!validate(args)) return `${call.function.name} arguments invalid: ${ajv.errorsText(validate.errors)}: ${call.function.arguments}`;
  if (!/^call_[A-Za-z0-9]{24}$/.test(call.id)) return `odd id ${call.id}`;
  return undefined;
}

describe("tool calls on SmolLM2", () => {
  it('tool_choice "required" over 20 prompts: a valid call every time', async () => {
    const results = await pool(prompts, 8, async (p) =>
      client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: p }], tools, tool_choice: "required", seed: 7, max_tokens: 200 }),
    );
    const failures: string[] = [];
    for (const [i, res] of results.entries()) {
      const choice = res.choices[0]!;
      const calls = choice.message.tool_calls ?? [];
      if (choice.finish_reason !== "tool_calls") failures.push(`#${i}: finish_reason ${choice.finish_reason}`);
      if (calls.length === 0) failures.push(`#${i}: no tool_calls (content ${JSON.stringify(choice.message.content)})`);
      if (choice.message.content !== null) failures.push(`#${i}: content ${JSON.stringify(choice.message.content)} beside calls`);
      for (const c of calls) {
        const bad = validCall(c);
        if (bad) failures.push(`#${i}: ${bad}`);
      }
    }
    expect(failures).toEqual([]);
  }, 600_000);

  it("a named function is the one called; parallel_tool_calls false gives one call", async () => {
    const named = await client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "Tell me about Paris." }], tools, tool_choice: { type: "function", function: { name: "get_weather" } }, temperature: 0, max_tokens: 80 });
    const calls = named.choices[0]!.message.tool_calls!;
    expect(calls).toHaveLength(1);
    expect((calls[0] as OpenAI.ChatCompletionMessageFunctionToolCall).function.name).toBe("get_weather");
    expect(validCall(calls[0]!)).toBeUndefined();
    const single = await client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "Weather in Paris and the time in Tokyo?" }], tools, tool_choice: "required", parallel_tool_calls: false, temperature: 0, max_tokens: 120 });
    expect(single.choices[0]!.message.tool_calls).toHaveLength(1);
  });

  it("streamed tool calls reassemble into the non-streamed ones, chunked as OpenAI streams them", async () => {
    for (const p of [prompts[0]!, prompts[3]!, "Weather in Paris and the time in Tokyo?"]) {
      const body = { model: LLM, messages: [{ role: "user" as const, content: p }], tools, tool_choice: "required" as const, temperature: 0, max_tokens: 160 };
      const whole = await client.chat.completions.create(body);
      const stream = await client.chat.completions.create({ ...body, stream: true });
      const calls: { id: string; name: string; arguments: string }[] = [];
      let finish: string | null | undefined;
      let content = "";
      for await (const chunk of stream) {
        const choice = chunk.choices[0];
        if (!choice) continue;
        if (choice.finish_reason) finish = choice.finish_reason;
        content += choice.delta.content ?? "";
        for (const d of choice.delta.tool_calls ?? []) {
          if (d.id) {
            // A call's first chunk: its index, id, type and name, arguments empty.
            expect(d.index).toBe(calls.length);
            expect(d.type).toBe("function");
            expect(d.function?.arguments).toBe("");
            calls.push({ id: d.id, name: d.function!.name!, arguments: "" });
          } else {
            expect(d.function?.name).toBeUndefined();
            calls[d.index]!.arguments += d.function?.arguments ?? "";
          }
        }
      }
      expect(finish).toBe("tool_calls");
      expect(content).toBe("");
      const expected = whole.choices[0]!.message.tool_calls!.map((c) => ({ name: (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.name, arguments: (c as OpenAI.ChatCompletionMessageFunctionToolCall).function.arguments }));
      expect(calls.map(({ name, arguments: a }) => ({ name, arguments: a }))).toEqual(expected);
      expect(expected.length).toBeGreaterThan(0);
    }
  }, 300_000);

  it("tool results go back into the conversation; tool_choice none answers in text", async () => {
    const first = await client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "What is the weather in Paris?" }], tools, tool_choice: { type: "function", function: { name: "get_weather" } }, temperature: 0, max_tokens: 80 });
    const call = first.choices[0]!.message.tool_calls![0]!;
    const followUp: OpenAI.ChatCompletionMessageParam[] = [
      { role: "user", content: "What is the weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [call] },
      { role: "tool", tool_call_id: call.id, content: JSON.stringify({ temperature: 18, sky: "sunny" }) },
    ];
    const answer = await client.chat.completions.create({ model: LLM, messages: followUp, tools, tool_choice: "none", temperature: 0, max_tokens: 40 });
    expect(answer.choices[0]!.message.tool_calls ?? []).toEqual([]);
    expect(answer.choices[0]!.finish_reason).not.toBe("tool_calls");
    expect(answer.choices[0]!.message.content!.length).toBeGreaterThan(0);
    // The result is in the prompt: the same turn without it is shorter.
    const without = await client.chat.completions.create({ model: LLM, messages: followUp.slice(0, 1), max_tokens: 1 });
    expect(answer.usage!.prompt_tokens).toBeGreaterThan(without.usage!.prompt_tokens + 20);
    // auto: either a valid call or text that holds none.
    const auto = await client.chat.completions.create({ model: LLM, messages: followUp, tools, temperature: 0, max_tokens: 60 });
    const msg = auto.choices[0]!.message;
    if (msg.tool_calls?.length) for (const c of msg.tool_calls) expect(validCall(c)).toBeUndefined();
    else expect(msg.content).not.toContain("<tool_call>");
  }, 300_000);

  it("a tool_choice naming no given tool, or a tool that is not a function, is a 400 naming the field", async () => {
    const unknown = client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "x" }], tools, tool_choice: { type: "function", function: { name: "nope" } } });
    await expect(unknown).rejects.toMatchObject({ status: 400, param: "tool_choice" });
    const noTools = client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "x" }], tool_choice: "required" });
    await expect(noTools).rejects.toMatchObject({ status: 400, param: "tool_choice" });
    const custom = client.chat.completions.create({ model: LLM, messages: [{ role: "user", content: "x" }], tools: [{ type: "custom", custom: { name: "x" } } as never] });
    await expect(custom).rejects.toMatchObject({ status: 400 });
  });
});
