// The Python clients a user points at Switchyard — the official `openai` SDK,
// LangChain's ChatOpenAI / OpenAIEmbeddings and LiteLLM, pinned in their own
// venv (scripts/python-clients.ts) — against a real router and worker on the
// real SmolLM2 and MiniLM. python-clients/clients.py makes the calls and
// prints what each client returned; this file judges it: parsed objects are
// instances of the caller's class and validate against its schema, required
// and named tool choices come back as calls whose arguments validate, token
// ids embed as their text does.
import Ajv from "ajv";
import path from "node:path";
import { resolveModel } from "@switchyard/agent";
import type { AgentHandle } from "@switchyard/agent";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensurePythonClients } from "../../scripts/python-clients.ts";
import { runTool } from "../../scripts/pyvenv.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

const LLM = "smollm2-135m-instruct";
const EMBED = "all-minilm-l6-v2";
const ajv = new Ajv({ strict: false, allErrors: true });

type Result = { ok: true; value: unknown } | { ok: false; error: string; message: string; status_code?: number; code?: string; param?: string; trace?: string };
interface Report {
  versions: Record<string, string>;
  schemas: Record<"Person" | "GetWeather", Record<string, unknown>>;
  results: Record<string, Result>;
}
interface Parsed {
  type: string | null;
  value?: unknown;
}
interface SdkCall {
  id: string;
  type: string;
  name: string;
  arguments: string;
}
interface LcCall {
  id: string;
  name: string;
  args: Record<string, unknown>;
}

let fx: RouterFixture;
let agent: AgentHandle;
let report: Report;

beforeAll(async () => {
  const python = await ensurePythonClients((s) => process.stderr.write(`${s}\n`));
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN, "deadlines.headersMs": 600_000 });
  agent = await startTestWorker(fx, { id: "e2e-python-clients" });
  const embed = await resolveModel(EMBED);
  const run = await runTool(python, [path.join(import.meta.dirname, "python-clients", "clients.py")], {
    timeoutMs: 840_000,
    env: {
      SY_BASE_URL: `${fx.router.url}/v1`,
      SY_API_KEY: fx.key,
      SY_CHAT_MODEL: LLM,
      SY_EMBED_MODEL: EMBED,
      SY_EMBED_TOKENIZER: path.join(embed.path, "tokenizer.json"),
      LANGSMITH_TRACING: "false",
      LANGCHAIN_TRACING_V2: "false",
      PYTHONUNBUFFERED: "1",
    },
  });
  const last = run.out.trim().split("\n").findLast((l) => l.startsWith("{"));
  if (run.code !== 0 || !last) throw new Error(`clients.py exited ${run.code}: ${run.out.slice(-6000)}`);
  report = JSON.parse(last) as Report;
  process.stderr.write(`python clients: ${JSON.stringify(report.versions)}\n`);
}, 1_200_000);

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

/** The value a check returned; a check that raised fails here with the client's error and trace. */
function ok<T>(name: string): T {
  const r = report.results[name];
  expect(r, `${name} did not run`).toBeDefined();
  if (!r!.ok) expect.fail(`${name} raised ${r!.error}: ${r!.message}\n${r!.trace ?? ""}`);
  return r!.value as T;
}

/** What the caller's class would hold: its name, and fields that validate against its schema. */
function expectInstance(p: Parsed, cls: "Person" | "GetWeather") {
  expect(p.type).toBe(cls);
  const validate = ajv.compile(report.schemas[cls]);
  expect(validate(p.value), ajv.errorsText(validate.errors)).toBe(true);
}

const weatherArgs = ajv.compile({ type: "object", properties: { city: { type: "string", maxLength: 40 }, unit: { enum: ["celsius", "fahrenheit"] } }, required: ["city", "unit"] });
const timeArgs = ajv.compile({ type: "object", properties: { timezone: { type: "string", maxLength: 40 } }, required: ["timezone"] });

/** OpenAI's call shape, arguments a JSON string that validates against the called function's parameters. */
function expectSdkCalls(calls: SdkCall[], names: Record<string, (v: unknown) => boolean>) {
  expect(calls.length).toBeGreaterThan(0);
  for (const c of calls) {
    expect(c.id).toMatch(/^call_[A-Za-z0-9]{24}$/);
    expect(c.type).toBe("function");
    expect(Object.keys(names)).toContain(c.name);
    expect(names[c.name]!(JSON.parse(c.arguments)), `${c.name}(${c.arguments})`).toBe(true);
  }
}

function expectLcCalls(calls: LcCall[], validate: (v: unknown) => boolean) {
  expect(calls.length).toBeGreaterThan(0);
  for (const c of calls) {
    expect(c.name).toBe("GetWeather");
    expect(c.id).toMatch(/^call_/);
    expect(validate(c.args), JSON.stringify(c.args)).toBe(true);
  }
}

describe("openai (Python SDK)", () => {
  it("models.retrieve: the served model in OpenAI's shape; an unserved one is NotFoundError model_not_found", () => {
    expect(ok("sdk.models.retrieve")).toEqual({ id: LLM, object: "model", owned_by: "switchyard" });
    expect(report.results["sdk.models.retrieve.missing"]).toMatchObject({ ok: false, error: "NotFoundError", status_code: 404, code: "model_not_found", param: "model" });
  });

  it("chat.completions.parse and beta.chat.completions.parse with a Pydantic model return an instance of it", () => {
    const whole = ok<{ finish: string; parsed: Parsed; content: string }>("sdk.parse");
    expect(whole.finish).toBe("stop");
    expectInstance(whole.parsed, "Person");
    expect(JSON.parse(whole.content)).toEqual(whole.parsed.value);
    expectInstance(ok<{ parsed: Parsed }>("sdk.beta.parse").parsed, "Person");
  });

  it("n=3 with a json_schema response_format: three choices, each parsed under its own grammar", () => {
    const choices = ok<{ index: number; finish: string; parsed: Parsed; content: string }[]>("sdk.parse.n3");
    expect(choices.map((c) => c.index)).toEqual([0, 1, 2]);
    for (const c of choices) {
      expect(c.finish).toBe("stop");
      expectInstance(c.parsed, "Person");
    }
    // Sampled at temperature 1 with seeds seed+i: three answers, not one answer three times.
    expect(new Set(choices.map((c) => c.content)).size).toBeGreaterThan(1);
  });

  it("chat.completions.stream with a Pydantic model: content deltas, then the parsed instance and usage", () => {
    const s = ok<{ deltas: number; parsed: Parsed; usage: { completion_tokens: number } | null }>("sdk.stream.parse");
    expect(s.deltas).toBeGreaterThan(1);
    expectInstance(s.parsed, "Person");
    expect(s.usage?.completion_tokens).toBeGreaterThan(0);
  });

  it("chat.completions.stream with n=2 and a Pydantic model: each streamed choice parses", () => {
    const choices = ok<{ index: number; finish: string; parsed: Parsed }[]>("sdk.stream.parse.n2");
    expect(choices.map((c) => c.index)).toEqual([0, 1]);
    for (const c of choices) {
      expect(c.finish).toBe("stop");
      expectInstance(c.parsed, "Person");
    }
  });

  it("parse() with a model the grammar cannot hold (a format it does not know) is a 400 naming response_format", () => {
    expect(report.results["sdk.parse.unenforceable"]).toMatchObject({ ok: false, error: "BadRequestError", status_code: 400, param: "response_format" });
  });

  it('tool_choice "required" returns tool_calls whose arguments validate, with no content', () => {
    const r = ok<{ finish: string; content: string | null; calls: SdkCall[] }>("sdk.tools.required");
    expect(r.finish).toBe("tool_calls");
    expect(r.content).toBeNull();
    expectSdkCalls(r.calls, { get_weather: weatherArgs, get_time: timeArgs });
  });

  it("tool_choice allowed_tools (chat and Responses): only the allowed function is called; one that is not among the tools is a 400", () => {
    const r = ok<{ finish: string; calls: SdkCall[]; unknown: { status_code: number; param: string } | null; responses: { type: string; name: string | null; arguments: string | null }[] }>("sdk.tools.allowed");
    expect(r.finish).toBe("tool_calls");
    expectSdkCalls(r.calls, { get_time: timeArgs });
    expect(r.unknown).toEqual({ status_code: 400, param: "tool_choice.allowed_tools.tools" });
    const calls = r.responses.filter((o) => o.type === "function_call");
    expect(calls.length).toBeGreaterThan(0);
    for (const c of calls) {
      expect(c.name).toBe("get_time");
      expect(timeArgs(JSON.parse(c.arguments!))).toBe(true);
    }
  });

  it("parse() with a strict pydantic_function_tool, parallel_tool_calls false: one call, arguments parsed into the model", () => {
    const r = ok<{ finish: string; calls: SdkCall[]; parsed: Parsed[] }>("sdk.tools.parse");
    expect(r.finish).toBe("tool_calls");
    expect(r.calls).toHaveLength(1);
    expectInstance(r.parsed[0]!, "GetWeather");
  });

  it("chat.completions.stream with a named tool: argument deltas, then the call parsed into the model", () => {
    const r = ok<{ events: string[]; finish: string; calls: SdkCall[]; parsed: Parsed[] }>("sdk.tools.stream");
    expect(r.events).toContain("tool_calls.function.arguments.delta");
    expect(r.events).toContain("tool_calls.function.arguments.done");
    expect(r.finish).toBe("tool_calls");
    expect(r.calls).toHaveLength(1);
    expectInstance(r.parsed[0]!, "GetWeather");
  });

  it("responses.parse with text_format returns an instance", () => {
    const r = ok<{ status: string; parsed: Parsed }>("sdk.responses.parse");
    expect(r.status).toBe("completed");
    expectInstance(r.parsed, "Person");
  });

  it("embeddings of the model's own token ids equal the texts' embeddings", () => {
    const r = ok<{ ids: number[][]; dims: number[]; max_abs_diff: number; usage: number }>("sdk.embeddings.tokens");
    expect(r.dims).toEqual([384, 384]);
    expect(r.max_abs_diff).toBeLessThan(1e-5);
    // Each input framed [CLS] .. [SEP] by the worker.
    expect(r.usage).toBe(r.ids.reduce((a, ids) => a + ids.length + 2, 0));
  });
});

describe("LangChain (ChatOpenAI, OpenAIEmbeddings)", () => {
  it.each(["json_schema", "json_schema.strict", "function_calling", "function_calling.strict", "responses_api"])("with_structured_output(Person) %s returns a Person", (method) => {
    expectInstance(ok<Parsed>(`lc.structured.${method}`), "Person");
  });

  it('bind_tools(tool_choice="required") returns tool_calls with valid arguments', () => {
    const r = ok<{ calls: LcCall[]; invalid: unknown[]; finish: string }>("lc.tools.required");
    expect(r.finish).toBe("tool_calls");
    expect(r.invalid).toEqual([]);
    expectLcCalls(r.calls, weatherArgs);
  });

  it("bind_tools with a named tool, strict, parallel_tool_calls false: exactly that call", () => {
    const r = ok<{ calls: LcCall[]; invalid: unknown[]; finish: string }>("lc.tools.named");
    expect(r.invalid).toEqual([]);
    expect(r.calls).toHaveLength(1);
    expectLcCalls(r.calls, weatherArgs);
  });

  it("a strict tool the grammar cannot hold is a 400 naming its parameters; not strict, the keyword is ignored and the call comes back", () => {
    const r = ok<{ strict: { status_code: number; param: string } | null; lenient: LcCall[] }>("lc.tools.unenforceable");
    expect(r.strict).toMatchObject({ status_code: 400, param: "tools[0].function.parameters" });
    expect(r.lenient).toHaveLength(1);
    expect(r.lenient[0]!.name).toBe("Host");
    expect(typeof r.lenient[0]!.args.address).toBe("string");
  });

  it("streamed tool-call chunks add up to the call, with usage", () => {
    const r = ok<{ chunks: number; calls: LcCall[]; invalid: unknown[]; usage: { output_tokens: number } | null }>("lc.tools.stream");
    expect(r.chunks).toBeGreaterThan(2);
    expect(r.invalid).toEqual([]);
    expect(r.calls).toHaveLength(1);
    expectLcCalls(r.calls, weatherArgs);
    expect(r.usage?.output_tokens).toBeGreaterThan(0);
  });

  it('a ToolMessage goes back into the conversation; tool_choice "none" answers in text', () => {
    const r = ok<{ content: string; calls: unknown[]; finish: string; prompt_tokens: number }>("lc.tools.round_trip");
    expect(r.calls).toEqual([]);
    expect(r.finish).not.toBe("tool_calls");
    expect(r.content.length).toBeGreaterThan(0);
    expect(r.content).not.toContain("<tool_call>");
  });

  it("OpenAIEmbeddings with check_embedding_ctx_length=False (LangChain's setting for providers other than OpenAI) embeds as the SDK does", () => {
    const r = ok<{ dims: number[]; max_abs_diff: number }>("lc.embeddings.text");
    expect(r.dims).toEqual([384, 384]);
    expect(r.max_abs_diff).toBeLessThan(1e-5);
  });

  it("OpenAIEmbeddings by default sends tiktoken's cl100k ids: outside this model's vocabulary they are a 400 naming input, not vectors of other tokens", () => {
    // Ids that happen to fall inside the vocabulary cannot be told apart from
    // the model's own; that case is why LangChain's docs turn the setting off.
    expect(report.results["lc.embeddings.tiktoken"]).toMatchObject({ ok: false, error: "BadRequestError", status_code: 400, param: "input" });
    expect((report.results["lc.embeddings.tiktoken"] as { message: string }).message).toMatch(/not a token id of this model .*check_embedding_ctx_length=False/);
  });
});

describe("LiteLLM (Python SDK)", () => {
  it("completion(response_format=Person) answers JSON that is a Person", () => {
    const r = ok<{ finish: string; parsed: Parsed }>("litellm.response_format");
    expect(r.finish).toBe("stop");
    expectInstance(r.parsed, "Person");
  });

  it('completion(tools, tool_choice="required") returns tool_calls, whole and streamed', () => {
    const whole = ok<{ finish: string; calls: SdkCall[] }>("litellm.tools");
    expect(whole.finish).toBe("tool_calls");
    expectSdkCalls(whole.calls, { get_weather: weatherArgs, get_time: timeArgs });
    const streamed = ok<{ chunks: number; finish: string; calls: SdkCall[]; usage: number }>("litellm.tools.stream");
    expect(streamed.chunks).toBeGreaterThan(2);
    expect(streamed.finish).toBe("tool_calls");
    expect(streamed.calls).toHaveLength(1);
    expectSdkCalls(streamed.calls, { get_weather: weatherArgs });
    expect(streamed.usage).toBeGreaterThan(0);
  });

  it("embedding() returns the model's vectors", () => {
    expect(ok("litellm.embedding")).toEqual({ dims: [384, 384] });
  });
});
