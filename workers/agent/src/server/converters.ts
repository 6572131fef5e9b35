// The one boundary between the worker's JSON (OpenAI's shapes) and the
// engine's protobuf: request bodies become engine requests here, and engine
// events, tensors and errors become JSON here. Routes and the stream pump
// (generate.ts) never build a proto message or read one's fields themselves,
// so a change to engine.proto lands in this file.
import { DType, FinishReason, Pooling, ToolChoiceMode, type ChatMessage, type ChatMessages, type Constraint, type Done, type Embed, type Embeddings, type Generate, type HiddenStates, type Loaded, type Tokenize, type Tool, type TokenLogprob, type TokenLogprobs } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { EngineError } from "../engine/client.ts";
import { ShardRefusedError } from "../shard/link.ts";

export interface GenerateBody {
  model: string;
  stream?: boolean | null;
  stream_options?: { include_usage?: boolean } | null;
  max_tokens?: number | null;
  max_completion_tokens?: number | null;
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  seed?: number | null;
  stop?: string | string[] | null;
  /** chat: a boolean; legacy completions: how many alternatives (0–5). */
  logprobs?: boolean | number | null;
  /** chat only: alternatives per token (0–20), needs logprobs: true. */
  top_logprobs?: number | null;
  n?: number | null;
  logit_bias?: Record<string, number> | null;
  frequency_penalty?: number | null;
  presence_penalty?: number | null;
  repetition_penalty?: number | null;
  min_p?: number | null;
  /** completions only */
  echo?: boolean | null;
  best_of?: number | null;
  suffix?: string | null;
}

/** A field the worker can't honour as asked: the 400 to answer. */
export interface Refusal {
  param: string;
  message: string;
}

/** Choices per request at most (n, best_of): a request's choices decode together in one batch. */
export const MAX_CHOICES = 8;

/** The sampling controls beyond temperature/top-p/top-k, checked against the model. */
export interface SamplingAsk {
  /** Choices generated: best_of when set (the best n are returned), else n. */
  generate: number;
  /** Choices returned. */
  n: number;
  logitBias: Record<number, number>;
  frequencyPenalty: number;
  presencePenalty: number;
  repetitionPenalty: number;
  minP: number;
  echo: boolean;
  suffix: string;
}

const isNum = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

/** OpenAI's rules for the sampling fields (and the extensions'), against what this model and engine can do. */
export function samplingAsk(body: GenerateBody, chat: boolean, model: Loaded): SamplingAsk | Refusal {
  const bad = (param: string, what: string): Refusal => ({ param, message: `${param}: ${what}` });
  const most = Math.min(MAX_CHOICES, model.maxBatch || MAX_CHOICES);
  const n = body.n ?? 1;
  if (!Number.isInteger(n) || n < 1 || n > most) return bad("n", `an integer from 1 to ${most} (choices decode together in one batch)`);
  let generate = n;
  if (body.best_of != null) {
    if (chat) return bad("best_of", "a legacy completions field");
    if (!Number.isInteger(body.best_of) || body.best_of < n || body.best_of > most) return bad("best_of", `an integer from n (${n}) to ${most}`);
    if (body.stream === true && body.best_of > n) return bad("best_of", "cannot be used with stream (the best choices are known only at the end)");
    generate = body.best_of;
  }
  const logitBias: Record<number, number> = {};
  if (body.logit_bias != null) {
    if (typeof body.logit_bias !== "object" || Array.isArray(body.logit_bias)) return bad("logit_bias", "an object mapping token ids to biases");
    for (const [k, v] of Object.entries(body.logit_bias)) {
      const id = /^\d+$/.test(k) ? Number(k) : NaN;
      if (!Number.isSafeInteger(id) || id >= model.vocabSize) return bad("logit_bias", `'${k}' is not a token id of this model (0 to ${model.vocabSize - 1})`);
      if (!isNum(v) || v < -100 || v > 100) return bad("logit_bias", `the bias for ${k} must be a number from -100 to 100`);
      logitBias[id] = v;
    }
  }
  for (const f of ["frequency_penalty", "presence_penalty"] as const) {
    const v = body[f];
    if (v != null && (!isNum(v) || v < -2 || v > 2)) return bad(f, "a number from -2 to 2");
  }
  const rep = body.repetition_penalty;
  if (rep != null && (!isNum(rep) || rep <= 0)) return bad("repetition_penalty", "a number > 0 (1 is off)");
  const minP = body.min_p;
  if (minP != null && (!isNum(minP) || minP < 0 || minP > 1)) return bad("min_p", "a number from 0 to 1");
  if (chat && (body.echo != null || body.suffix != null)) return bad(body.echo != null ? "echo" : "suffix", "a legacy completions field");
  if (body.echo != null && typeof body.echo !== "boolean") return bad("echo", "a boolean");
  const suffix = body.suffix ?? "";
  if (typeof suffix !== "string") return bad("suffix", "a string");
  if (suffix !== "" && !model.fim) return bad("suffix", `model '${model.model}' has no fill-in-the-middle tokens, so it cannot complete between a prompt and a suffix`);
  return {
    generate,
    n,
    logitBias,
    frequencyPenalty: body.frequency_penalty ?? 0,
    presencePenalty: body.presence_penalty ?? 0,
    repetitionPenalty: rep ?? 0,
    minP: minP ?? 0,
    echo: body.echo === true,
    suffix,
  };
}

/** What the request asks for in logprobs (undefined: none). */
export type LogprobsAsk = { top: number } | undefined;

const utf8 = new TextDecoder();
const tokenText = (t: TokenLogprob | undefined) => utf8.decode(t?.token ?? new Uint8Array());

/** Engine logprobs → the chat shape (`choices[].logprobs.content`). */
export function chatLogprobs(entries: TokenLogprobs[]) {
  const one = (t: TokenLogprob | undefined) => ({ token: tokenText(t), logprob: t?.logprob ?? 0, bytes: [...(t?.token ?? [])] });
  return { content: entries.map((e) => ({ ...one(e.chosen), top_logprobs: e.top.map(one) })), refusal: null };
}

/** Engine logprobs → the legacy completions shape; `offset` is where the first token's text starts. */
export function completionLogprobs(entries: TokenLogprobs[], offset: number) {
  const tokens = entries.map((e) => tokenText(e.chosen));
  const text_offset: number[] = [];
  for (const t of tokens) {
    text_offset.push(offset);
    offset += t.length;
  }
  return {
    tokens,
    token_logprobs: entries.map((e) => e.chosen?.logprob ?? 0),
    top_logprobs: entries.map((e) => Object.fromEntries(e.top.map((t) => [tokenText(t), t.logprob]))),
    text_offset,
  };
}

export type Input =
  | { case: "prompt"; value: string }
  /** Token ids of the model's vocabulary (completions' token-array prompt). */
  | { case: "tokens"; value: number[] }
  /**
   * continueFinal: carry on the final (assistant) message instead of opening a new turn;
   * structured: the tools and the output constraint (structuredOutput).
   */
  | { case: "messages"; value: OpenAIMessage[]; continueFinal?: boolean; structured?: Structured };

/** An OpenAI chat message as the worker reads it. */
export interface OpenAIMessage {
  role?: unknown;
  content?: unknown;
  tool_calls?: unknown;
  tool_call_id?: unknown;
  name?: unknown;
}

/** What a chat request asks of its output beyond free text. */
export interface Structured {
  /** The tools rendered into the prompt ([] with tool_choice "none"). */
  tools: Tool[];
  constraint?: Constraint;
  /** The output is read for tool calls (tool_choice auto, required or a function). */
  toolCalls: boolean;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);

/**
 * response_format, tools, tool_choice and parallel_tool_calls → the engine's
 * tools and constraint, or the 400 to answer (field and message). Nothing
 * asked for is dropped: what the engine cannot do is refused here.
 */
export function structuredOutput(body: Record<string, unknown>): Structured | { param: string; message: string } {
  let answer: Constraint["answer"] = { case: undefined };
  let strict = false;
  const rf = body.response_format;
  if (rf != null) {
    if (!isObject(rf)) return { param: "response_format", message: "response_format: must be an object" };
    if (rf.type === "json_object") answer = { case: "jsonObject", value: true };
    else if (rf.type === "json_schema") {
      const js = rf.json_schema;
      if (!isObject(js)) return { param: "response_format.json_schema", message: "response_format.json_schema: must be an object with a schema" };
      const schema = js.schema ?? {};
      if (!isObject(schema)) return { param: "response_format.json_schema.schema", message: "response_format.json_schema.schema: must be a JSON Schema object" };
      answer = { case: "jsonSchema", value: JSON.stringify(schema) };
      strict = js.strict === true;
    } else if (rf.type !== "text") return { param: "response_format.type", message: "response_format.type: one of text, json_object, json_schema" };
  }
  const tools: Tool[] = [];
  if (body.tools != null) {
    if (!Array.isArray(body.tools)) return { param: "tools", message: "tools: must be an array" };
    for (const [i, t] of body.tools.entries()) {
      if (!isObject(t) || t.type !== "function" || !isObject(t.function)) return { param: `tools[${i}]`, message: `tools[${i}]: only {type: "function", function: {...}} tools are supported` };
      const fn = t.function;
      if (typeof fn.name !== "string" || !/^[A-Za-z0-9_-]{1,64}$/.test(fn.name)) return { param: `tools[${i}].function.name`, message: `tools[${i}].function.name: 1-64 letters, digits, _ or -` };
      if (fn.parameters != null && !isObject(fn.parameters)) return { param: `tools[${i}].function.parameters`, message: `tools[${i}].function.parameters: must be a JSON Schema object` };
      if (tools.some((x) => x.name === fn.name)) return { param: `tools[${i}].function.name`, message: `tools[${i}].function.name: '${fn.name}' is defined twice` };
      tools.push({ $typeName: "switchyard.engine.v1.Tool", name: fn.name, description: typeof fn.description === "string" ? fn.description : "", parameters: fn.parameters == null ? "" : JSON.stringify(fn.parameters), strict: fn.strict === true });
    }
  }
  const tc = body.tool_choice;
  let mode = tools.length > 0 ? ToolChoiceMode.AUTO : ToolChoiceMode.NONE;
  let fn = "";
  if (tc != null) {
    if (tc === "none") mode = ToolChoiceMode.NONE;
    else if (tc === "auto") mode = ToolChoiceMode.AUTO;
    else if (tc === "required") mode = ToolChoiceMode.REQUIRED;
    else if (isObject(tc) && tc.type === "function" && isObject(tc.function) && typeof tc.function.name === "string") {
      mode = ToolChoiceMode.FUNCTION;
      fn = tc.function.name;
      if (!tools.some((t) => t.name === fn)) return { param: "tool_choice", message: `tool_choice: '${fn}' is not among the tools` };
    } else return { param: "tool_choice", message: "tool_choice: 'none', 'auto', 'required' or {type: 'function', function: {name}}" };
    if (mode !== ToolChoiceMode.NONE && tools.length === 0) return { param: "tool_choice", message: "tool_choice: needs tools" };
  }
  if (body.parallel_tool_calls != null && typeof body.parallel_tool_calls !== "boolean") return { param: "parallel_tool_calls", message: "parallel_tool_calls: must be a boolean" };
  const toolCalls = mode !== ToolChoiceMode.NONE;
  const constrained = answer.case !== undefined || toolCalls;
  return {
    // tool_choice "none": the model is not shown the tools, so it cannot call one.
    tools: toolCalls ? tools : [],
    toolCalls,
    ...(constrained
      ? {
          constraint: {
            $typeName: "switchyard.engine.v1.Constraint",
            answer,
            strict,
            ...(toolCalls ? { toolChoice: { $typeName: "switchyard.engine.v1.ToolChoice", mode, function: fn, parallel: body.parallel_tool_calls !== false } } : {}),
          },
        }
      : {}),
  };
}

/**
 * A chat body's messages and structured output as a generation reads them,
 * or the 400 for what it cannot take: no messages, a part that is not text
 * (an image or audio would be dropped, not read), a response_format or
 * tools it cannot honour. Chat and tokenize read a body alike, so a count is
 * of the prompt a generation would run.
 */
export function chatInput(body: Record<string, unknown>): { messages: OpenAIMessage[]; structured: Structured } | { status: 400; param: string; message: string } {
  if (!Array.isArray(body.messages) || body.messages.length === 0) return { status: 400, param: "messages", message: "messages: at least one message is required" };
  const part = nonTextPart(body.messages as { content?: unknown }[]);
  if (part) return { status: 400, param: part, message: `${part}: model '${String(body.model)}' reads text only; only text content parts can be sent to it` };
  const messages = (body.messages as unknown[]).map((m): OpenAIMessage => (m && typeof m === "object" ? (m as OpenAIMessage) : { content: m }));
  const structured = structuredOutput(body);
  if ("param" in structured) return { status: 400, param: structured.param, message: structured.message };
  return { messages, structured };
}

/** The first content part a text-only model cannot read, as its param path (messages[i].content[j]). */
export function nonTextPart(messages: { content?: unknown }[]): string | undefined {
  for (const [i, m] of messages.entries()) {
    if (!Array.isArray(m.content)) continue;
    for (const [j, p] of (m.content as unknown[]).entries()) {
      const type = p && typeof p === "object" ? (p as { type?: unknown }).type : undefined;
      if (type !== "text") return `messages[${i}].content[${j}]`;
    }
  }
  return undefined;
}

export function contentText(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) return content.map((p) => (p && typeof p === "object" && "text" in p ? String((p as { text: unknown }).text) : "")).join("");
  return "";
}

/**
 * `contextTokens`: the model's context as loaded (max_seq_len), the output
 * limit of a request that sets none: it generates until it stops or the
 * context is full, as OpenAI's models do (the engine caps prompt + max_tokens
 * at the context and grows the sequence's cache as it goes).
 */
export function toGenerate(body: GenerateBody, input: Input, logprobs: LogprobsAsk, cacheSalt: string, sampling: SamplingAsk, contextTokens: number): Generate {
  const stop = body.stop == null ? [] : Array.isArray(body.stop) ? body.stop : [body.stop];
  return {
    $typeName: "switchyard.engine.v1.Generate",
    model: body.model,
    input:
      input.case === "prompt"
        ? { case: "prompt", value: input.value }
        : input.case === "tokens"
          ? { case: "promptTokens", value: { $typeName: "switchyard.engine.v1.TokenIds", ids: input.value } }
          : { case: "messages", value: chatMessages(input.value, input.continueFinal ?? false, input.structured?.tools ?? []) },
    maxTokens: body.max_tokens ?? body.max_completion_tokens ?? contextTokens,
    temperature: body.temperature ?? 1,
    // OpenAI's top_p 0 keeps only the likeliest token; the engine reads 0 as
    // "off", so it is asked as top_k 1 (the same single candidate).
    topP: body.top_p === 0 ? 1 : (body.top_p ?? 1),
    topK: body.top_p === 0 ? 1 : (body.top_k ?? 0),
    seed: body.seed == null ? undefined : BigInt(Math.abs(Math.trunc(body.seed))),
    stop,
    logprobs: logprobs !== undefined,
    topLogprobs: logprobs?.top ?? 0,
    cacheSalt,
    n: sampling.generate,
    logitBias: sampling.logitBias,
    frequencyPenalty: sampling.frequencyPenalty,
    presencePenalty: sampling.presencePenalty,
    repetitionPenalty: sampling.repetitionPenalty,
    minP: sampling.minP,
    echoPrompt: sampling.echo,
    suffix: sampling.suffix,
    ...(input.case === "messages" && input.structured?.constraint ? { constraint: input.structured.constraint } : {}),
  };
}

/**
 * Completions' `prompt` as the engine's inputs: a string, a list of strings,
 * token ids, or a list of token-id lists (OpenAI's four shapes), each id
 * checked against the model's vocabulary; or the 400 to answer.
 */
export function completionInputs(prompt: unknown, vocabSize: number): Input[] | Refusal {
  const bad = (message: string): Refusal => ({ param: "prompt", message: `prompt: ${message}` });
  const ids = (v: unknown[]): Input | Refusal => {
    if (v.length === 0) return bad("an empty token list");
    for (const t of v) if (!Number.isSafeInteger(t) || (t as number) < 0 || (t as number) >= vocabSize) return bad(`${String(t)} is not a token id of this model (0 to ${vocabSize - 1})`);
    return { case: "tokens", value: v as number[] };
  };
  if (typeof prompt === "string") return [{ case: "prompt", value: prompt }];
  if (!Array.isArray(prompt) || prompt.length === 0) return bad("a string, a list of strings, or token ids");
  if (prompt.every((p) => typeof p === "number")) {
    const one = ids(prompt);
    return "param" in one ? one : [one];
  }
  if (prompt.length > MAX_CHOICES) return bad(`at most ${MAX_CHOICES} prompts per request`);
  const out: Input[] = [];
  for (const p of prompt) {
    if (typeof p === "string") out.push({ case: "prompt", value: p });
    else if (Array.isArray(p)) {
      const one = ids(p);
      if ("param" in one) return one;
      out.push(one);
    } else return bad("a string, a list of strings, or token ids");
  }
  return out;
}

/**
 * A chat request's prompt as the engine's Tokenize: the messages and the
 * tools a generation of it would render (structuredOutput's), so the count
 * is the prompt that generation would feed.
 */
export function toTokenize(model: string, messages: OpenAIMessage[], tools: Tool[]): Tokenize {
  return { $typeName: "switchyard.engine.v1.Tokenize", model, input: { case: "messages", value: chatMessages(messages, false, tools) } };
}

/**
 * Embeddings' `input` as the engine's: strings, or token ids of the model's
 * vocabulary (LangChain's default shape); or the 400 to answer.
 */
export function toEmbed(model: string, input: unknown, vocabSize: number): Embed | Refusal {
  const bad = (message: string): Refusal => ({ param: "input", message: `input: ${message}` });
  const embed = (inputs: string[], tokens: number[][]): Embed => ({
    $typeName: "switchyard.engine.v1.Embed",
    model,
    inputs,
    tokenInputs: tokens.map((ids) => ({ $typeName: "switchyard.engine.v1.TokenIds", ids })),
  });
  if (typeof input === "string") return embed([input], []);
  if (!Array.isArray(input) || input.length === 0) return bad("a string or a non-empty array of strings or token ids is required");
  if (input.every((s) => typeof s === "string")) return embed(input as string[], []);
  const lists = input.every((t) => typeof t === "number") ? [input as unknown[]] : input;
  const tokens: number[][] = [];
  for (const l of lists) {
    if (!Array.isArray(l) || l.length === 0) return bad("mixes strings and token ids, or holds an empty token list");
    for (const t of l) {
      if (!Number.isSafeInteger(t) || (t as number) < 0 || (t as number) >= vocabSize) {
        // The usual sender: LangChain's OpenAIEmbeddings, which tokenizes with tiktoken by default.
        return bad(`${String(t)} is not a token id of this model (0 to ${vocabSize - 1}); token ids are the model's own, so a client that tokenizes with tiktoken (LangChain's OpenAIEmbeddings by default) must send the text instead (check_embedding_ctx_length=False)`);
      }
    }
    tokens.push(l as number[]);
  }
  return embed([], tokens);
}

/** OpenAI's usage block; prompt tokens served from the engine's prefix cache count as cached. */
export function usageOf(done: Done) {
  const prompt = done.usage?.promptTokens ?? 0;
  const completion = done.usage?.completionTokens ?? 0;
  return { prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion, prompt_tokens_details: { cached_tokens: done.cachedPromptTokens } };
}

export const finishName = (r: FinishReason) => (r === FinishReason.LENGTH ? "length" : "stop");

/** Engine logprobs of an echoed prompt → the completions shape: the first token has none (null), as OpenAI reports it. */
export function echoLogprobs(entries: TokenLogprobs[]) {
  const lp = completionLogprobs(entries, 0);
  return {
    ...lp,
    token_logprobs: lp.token_logprobs.map((v, i) => (i === 0 || !Number.isFinite(v) ? null : v)),
    top_logprobs: lp.top_logprobs.map((v, i) => (i === 0 ? null : v)),
  };
}

/** A refusal's message that starts with the request field at fault (`tools[1].function.parameters: …`): that field. */
const FIELD_PREFIX = /^([a-z_]+(?:\[\d+\])?(?:\.[a-z_]+)*): /;

export const engineErrorStatus = (err: unknown): { status: number; code: string; message: string; param: string | null } => {
  // A shard of the pipeline refused as a whole worker would (a stale lease fencing token): its status and code.
  if (err instanceof ShardRefusedError) return { status: err.status, code: err.code, message: err.message, param: null };
  if (err instanceof EngineError) {
    const invalid = err.code === 1 || err.code === 3; // INVALID_REQUEST, CONTEXT_LENGTH
    const param = err.code === 1 ? (FIELD_PREFIX.exec(err.message)?.[1] ?? null) : null;
    return { status: invalid ? 400 : err.code === 2 ? 404 : 503, code: invalid ? "invalid_request" : err.code === 2 ? "model_not_found" : "engine_error", message: err.message, param };
  }
  return { status: 500, code: "internal_error", message: (err as Error)?.message ?? String(err), param: null };
};


/** OpenAI chat messages → the engine's (content parts flattened to their text, an assistant's tool calls, a tool result's call id). */
export function chatMessages(messages: OpenAIMessage[], continueFinal = false, tools: Tool[] = []): ChatMessages {
  return {
    $typeName: "switchyard.engine.v1.ChatMessages",
    messages: messages.map(chatMessage),
    continueFinalMessage: continueFinal,
    tools,
  };
}

/**
 * OpenAI's newer and older names for roles chat templates know by others:
 * `developer` is what o-series clients send for `system`; `function` is the
 * deprecated `tool`. A template rendering them as they come would show the
 * model a role it was never trained on (ChatML) or refuse (Gemma's).
 */
const templateRoles: Record<string, string> = { developer: "system", function: "tool" };

function chatMessage(m: OpenAIMessage): ChatMessage {
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls.filter(isObject) : [];
  const role = String(m.role ?? "user");
  return {
    $typeName: "switchyard.engine.v1.ChatMessage",
    role: Object.hasOwn(templateRoles, role) ? templateRoles[role]! : role,
    content: contentText(m.content),
    toolCalls: calls.map((c) => {
      const fn = isObject(c.function) ? c.function : {};
      return {
        $typeName: "switchyard.engine.v1.ToolCall",
        id: typeof c.id === "string" ? c.id : "",
        name: typeof fn.name === "string" ? fn.name : "",
        arguments: typeof fn.arguments === "string" ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
      };
    }),
    toolCallId: typeof m.tool_call_id === "string" ? m.tool_call_id : "",
    name: typeof m.name === "string" ? m.name : "",
  };
}

/** Engine embeddings → OpenAI's `data` list: floats, or base64 of little-endian f32 (`encoding_format: "base64"`). */
export function embeddingsData(result: Embeddings, base64: boolean) {
  return result.vectors.map((t, index) => {
    const bytes = t.data;
    const f32 = new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.byteLength));
    return { object: "embedding", index, embedding: base64 ? Buffer.from(f32.buffer).toString("base64") : Array.from(f32) };
  });
}

// Maps, not object literals: a body's `pooling: "constructor"` must not find
// Object.prototype's.
const POOLINGS = new Map<string, Pooling>([
  ["none", Pooling.NONE],
  ["mean", Pooling.MEAN],
  ["last", Pooling.LAST],
]);
const DTYPES = new Map<string, DType>([
  ["f32", DType.DTYPE_F32],
  ["f16", DType.DTYPE_F16],
]);

/** A hidden-states body → the engine request, or the 400 to answer (field and message). */
export function toHiddenStates(body: Record<string, unknown>): HiddenStates | { param: string; message: string } {
  const pooling = POOLINGS.get(String(body.pooling ?? "none"));
  if (pooling === undefined) return { param: "pooling", message: "pooling: one of none, mean, last" };
  const dtype = DTYPES.get(String(body.dtype ?? "f32"));
  if (dtype === undefined) return { param: "dtype", message: "dtype: one of f32, f16" };
  const layers = body.layers === undefined || body.layers === "all" ? [] : body.layers;
  if (!Array.isArray(layers) || !layers.every((l) => Number.isInteger(l) && l >= 0)) return { param: "layers", message: "layers: 'all' or an array of layer indices" };
  // Each index names one tensor of the answer, so a repeat adds nothing to it;
  // sent on, it would be copied again at every stage (engine, frames), up to
  // 1024 times over. Asked for once each, in the order first asked.
  let input: HiddenStates["input"];
  if (typeof body.input === "string") input = { case: "prompt", value: body.input };
  else if (Array.isArray(body.messages) && body.messages.length > 0) input = { case: "messages", value: chatMessages(body.messages as { role?: unknown; content?: unknown }[]) };
  else return { param: "input", message: "input (a string) or messages is required" };
  return { $typeName: "switchyard.engine.v1.HiddenStates", model: String(body.model), input, layers: [...new Set(layers as number[])], pooling, dtype, passOn: false };
}
