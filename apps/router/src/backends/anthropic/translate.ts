// OpenAI chat ⇄ Anthropic Messages, both directions, as pure functions: the
// client does the I/O, this file only reshapes request bodies, responses and
// stream events so the relay sees OpenAI shapes with an OpenAI `usage` block.

/** The request asks for something the Messages API cannot express (a 400 for the client). */
export class UntranslatableRequest extends Error {
  override name = "UntranslatableRequest";
  constructor(
    message: string,
    readonly param: string | null,
  ) {
    super(message);
  }
}

/** Anthropic's own `event: error` inside a 200 stream (e.g. overloaded_error). */
export class AnthropicStreamError extends Error {
  override name = "AnthropicStreamError";
  constructor(
    readonly errorType: string,
    message: string,
  ) {
    super(message);
  }
}

// ---- Anthropic wire shapes (only the fields we read or write) ----

export interface TextBlock {
  type: "text";
  text: string;
  cache_control?: unknown;
}
export interface ImageBlock {
  type: "image";
  source: { type: "base64"; media_type: string; data: string } | { type: "url"; url: string };
  cache_control?: unknown;
}
export interface ToolUseBlock {
  type: "tool_use";
  id: string;
  name: string;
  input: Record<string, unknown>;
}
export interface ToolResultBlock {
  type: "tool_result";
  tool_use_id: string;
  content?: string | Array<TextBlock | ImageBlock>;
}
export type ContentBlock = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock;

export interface MessagesRequest {
  model: string;
  max_tokens: number;
  messages: Array<{ role: "user" | "assistant"; content: string | ContentBlock[] }>;
  system?: string | TextBlock[];
  temperature?: number;
  top_p?: number;
  top_k?: number;
  stop_sequences?: string[];
  stream?: boolean;
  tools?: Array<{ name: string; description?: string; input_schema: unknown }>;
  tool_choice?: { type: "auto" | "any" | "none"; disable_parallel_tool_use?: boolean } | { type: "tool"; name: string; disable_parallel_tool_use?: boolean };
  metadata?: { user_id: string };
}

export interface AnthropicUsage {
  input_tokens?: number | null;
  output_tokens?: number | null;
  cache_read_input_tokens?: number | null;
  cache_creation_input_tokens?: number | null;
}

export interface MessagesResponse {
  id: string;
  type: "message";
  role: "assistant";
  model: string;
  content: Array<{ type: string; text?: string; id?: string; name?: string; input?: unknown }>;
  stop_reason: string | null;
  stop_sequence?: string | null;
  usage?: AnthropicUsage;
}

/** OpenAI's usage block, with cache reads/writes where the router's usageFrom looks for them. */
export interface OpenAIUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  prompt_tokens_details: { cached_tokens: number; cache_write_tokens: number };
}

// ---- OpenAI request → Anthropic request ----

type Json = Record<string, unknown>;

const isObject = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);

function reject(param: string, message: string): never {
  throw new UntranslatableRequest(`${param}: ${message}`, param);
}

const dataUrl = /^data:([^;,]+);base64,(.*)$/s;

/** One OpenAI content part as an Anthropic block (null: nothing to send). */
function partBlock(part: unknown, at: string): TextBlock | ImageBlock | null {
  if (!isObject(part)) reject(at, "content parts must be objects");
  const cache = part.cache_control !== undefined ? { cache_control: part.cache_control } : {};
  if (part.type === "text") {
    if (typeof part.text !== "string") reject(`${at}.text`, "must be a string");
    // Anthropic refuses empty text blocks; an empty part says nothing anyway.
    return part.text === "" ? null : { type: "text", text: part.text, ...cache };
  }
  if (part.type === "image_url") {
    const url = isObject(part.image_url) ? part.image_url.url : part.image_url;
    if (typeof url !== "string") reject(`${at}.image_url.url`, "must be a string");
    const m = dataUrl.exec(url);
    if (m) return { type: "image", source: { type: "base64", media_type: m[1]!, data: m[2]! }, ...cache };
    if (/^https?:\/\//i.test(url)) return { type: "image", source: { type: "url", url }, ...cache };
    reject(`${at}.image_url.url`, "only base64 data: URLs and http(s) URLs can be sent to Anthropic");
  }
  reject(`${at}.type`, `content part type '${String(part.type)}' cannot be sent to Anthropic`);
}

function contentBlocks(content: unknown, at: string): Array<TextBlock | ImageBlock> {
  if (content === undefined || content === null) return [];
  if (typeof content === "string") return content === "" ? [] : [{ type: "text", text: content }];
  if (!Array.isArray(content)) reject(at, "must be a string or an array of content parts");
  return content.map((p, j) => partBlock(p, `${at}[${j}]`)).filter((b): b is TextBlock | ImageBlock => b !== null);
}

function toolUse(call: unknown, at: string): ToolUseBlock {
  if (!isObject(call) || call.type !== "function" || !isObject(call.function)) reject(at, "only function tool calls can be sent to Anthropic");
  const fn = call.function;
  if (typeof call.id !== "string" || typeof fn.name !== "string") reject(at, "tool calls need an id and a function name");
  let input: unknown = {};
  const args = fn.arguments;
  if (typeof args === "string" && args.trim() !== "") {
    try {
      input = JSON.parse(args);
    } catch {
      reject(`${at}.function.arguments`, "must be valid JSON");
    }
  } else if (isObject(args)) {
    input = args;
  }
  // Anthropic takes tool input as an object, never a bare value.
  if (!isObject(input)) reject(`${at}.function.arguments`, "must be a JSON object");
  return { type: "tool_use", id: call.id, name: fn.name, input };
}

function toolResult(msg: Json, at: string): ToolResultBlock {
  if (typeof msg.tool_call_id !== "string") reject(`${at}.tool_call_id`, "is required for tool messages");
  const block: ToolResultBlock = { type: "tool_result", tool_use_id: msg.tool_call_id };
  if (typeof msg.content === "string") {
    if (msg.content !== "") block.content = msg.content;
  } else {
    const blocks = contentBlocks(msg.content, `${at}.content`);
    if (blocks.length > 0) block.content = blocks;
  }
  return block;
}

function toolsFrom(tools: unknown): MessagesRequest["tools"] {
  if (!Array.isArray(tools)) reject("tools", "must be an array");
  return tools.map((t, i) => {
    if (!isObject(t) || t.type !== "function" || !isObject(t.function)) reject(`tools[${i}]`, "only function tools can be sent to Anthropic");
    const fn = t.function;
    if (typeof fn.name !== "string") reject(`tools[${i}].function.name`, "is required");
    return {
      name: fn.name,
      ...(typeof fn.description === "string" ? { description: fn.description } : {}),
      // Anthropic requires a schema; OpenAI lets a parameterless function omit it.
      input_schema: isObject(fn.parameters) ? fn.parameters : { type: "object", properties: {} },
    };
  });
}

function toolChoiceFrom(choice: unknown, parallel: unknown): MessagesRequest["tool_choice"] {
  let tc: NonNullable<MessagesRequest["tool_choice"]>;
  if (choice === undefined || choice === null || choice === "auto") tc = { type: "auto" };
  else if (choice === "none") return { type: "none" };
  else if (choice === "required") tc = { type: "any" };
  else if (isObject(choice) && choice.type === "function" && isObject(choice.function) && typeof choice.function.name === "string") {
    tc = { type: "tool", name: choice.function.name };
  } else reject("tool_choice", "must be 'auto', 'none', 'required' or a function");
  if (parallel === false) return { ...tc, disable_parallel_tool_use: true };
  return choice === undefined || choice === null ? undefined : tc;
}

/** OpenAI fields with no Messages equivalent that change what the client gets back. */
function rejectInexpressible(body: Json): void {
  if (typeof body.n === "number" && body.n > 1) reject("n", "Anthropic returns one choice per request; n must be 1");
  if (body.logprobs === true) reject("logprobs", "Anthropic does not return log probabilities");
  if (typeof body.top_logprobs === "number" && body.top_logprobs > 0) reject("top_logprobs", "Anthropic does not return log probabilities");
  if (isObject(body.logit_bias) && Object.keys(body.logit_bias).length > 0) reject("logit_bias", "Anthropic has no logit bias");
  if (isObject(body.response_format) && body.response_format.type !== "text") {
    reject("response_format", `'${String(body.response_format.type)}' cannot be enforced by Anthropic`);
  }
  if (body.audio != null || (Array.isArray(body.modalities) && body.modalities.some((m) => m !== "text"))) {
    reject("modalities", "Anthropic answers with text only");
  }
}

/**
 * The Messages request for an OpenAI chat body. Sampling hints Anthropic
 * lacks (seed, presence/frequency penalties) are dropped, not rejected:
 * they do not change the shape of the answer.
 */
export function toMessagesRequest(body: Json, upstreamModel: string, defaults: { maxTokens: number }): MessagesRequest {
  rejectInexpressible(body);
  if (!Array.isArray(body.messages)) reject("messages", "must be an array");

  const system: TextBlock[] = [];
  const turns: Array<{ role: "user" | "assistant"; blocks: ContentBlock[] }> = [];
  // Anthropic wants alternating turns: same-role neighbours become one turn,
  // and tool results travel in the user turn that follows the tool calls.
  const push = (role: "user" | "assistant", blocks: ContentBlock[]) => {
    if (blocks.length === 0) return;
    const last = turns[turns.length - 1];
    if (last?.role === role) last.blocks.push(...blocks);
    else turns.push({ role, blocks });
  };
  body.messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (!isObject(m)) reject(at, "must be an object");
    switch (m.role) {
      case "system":
      case "developer":
        for (const b of contentBlocks(m.content, `${at}.content`)) {
          if (b.type !== "text") reject(`${at}.content`, "system messages can hold text only");
          system.push(b);
        }
        return;
      case "user":
        return push("user", contentBlocks(m.content, `${at}.content`));
      case "assistant": {
        const calls = Array.isArray(m.tool_calls) ? m.tool_calls.map((c, j) => toolUse(c, `${at}.tool_calls[${j}]`)) : [];
        return push("assistant", [...contentBlocks(m.content, `${at}.content`), ...calls]);
      }
      case "tool":
        return push("user", [toolResult(m, at)]);
      default:
        reject(`${at}.role`, `role '${String(m.role)}' cannot be sent to Anthropic`);
    }
  });

  const req: MessagesRequest = {
    model: upstreamModel,
    max_tokens: num(body.max_completion_tokens) ?? num(body.max_tokens) ?? defaults.maxTokens,
    messages: turns.map(({ role, blocks }) => {
      const only = blocks[0];
      const plain = blocks.length === 1 && only?.type === "text" && only.cache_control === undefined;
      return { role, content: plain ? only.text : blocks };
    }),
  };
  if (system.length > 0) {
    // Blocks only where one carries cache_control; otherwise one plain string.
    req.system = system.some((b) => b.cache_control !== undefined) ? system : system.map((b) => b.text).join("\n\n");
  }
  const temperature = num(body.temperature);
  // OpenAI's range is 0..2, Anthropic's 0..1: clamp rather than refuse.
  if (temperature !== undefined) req.temperature = Math.min(1, Math.max(0, temperature));
  const topP = num(body.top_p);
  if (topP !== undefined) req.top_p = topP;
  const topK = num(body.top_k);
  if (topK !== undefined) req.top_k = topK;
  const stop = typeof body.stop === "string" ? [body.stop] : Array.isArray(body.stop) ? body.stop.filter((s): s is string => typeof s === "string") : [];
  if (stop.length > 0) req.stop_sequences = stop;
  if (body.stream === true) req.stream = true;
  if (body.tools !== undefined && body.tools !== null) {
    const tools = toolsFrom(body.tools);
    if (tools && tools.length > 0) {
      req.tools = tools;
      const tc = toolChoiceFrom(body.tool_choice, body.parallel_tool_calls);
      if (tc) req.tool_choice = tc;
    }
  }
  if (typeof body.user === "string" && body.user !== "") req.metadata = { user_id: body.user };
  return req;
}

function num(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}

// ---- Anthropic response → OpenAI response ----

const finishReasons: Record<string, string> = {
  end_turn: "stop",
  stop_sequence: "stop",
  pause_turn: "stop",
  max_tokens: "length",
  model_context_window_exceeded: "length",
  tool_use: "tool_calls",
  refusal: "content_filter",
};

export function finishReason(stopReason: string | null | undefined): string {
  return (stopReason && finishReasons[stopReason]) || "stop";
}

function count(v: unknown): number {
  return typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0;
}

/** OpenAI usage from Anthropic's: prompt_tokens counts cached and cache-written tokens too. */
export function openaiUsage(u: AnthropicUsage | undefined): OpenAIUsage | undefined {
  if (!u) return undefined;
  const cached = count(u.cache_read_input_tokens);
  const cacheWrite = count(u.cache_creation_input_tokens);
  const prompt = count(u.input_tokens) + cached + cacheWrite;
  const completion = count(u.output_tokens);
  return {
    prompt_tokens: prompt,
    completion_tokens: completion,
    total_tokens: prompt + completion,
    prompt_tokens_details: { cached_tokens: cached, cache_write_tokens: cacheWrite },
  };
}

const nowSeconds = () => Math.floor(Date.now() / 1000);

/** The OpenAI `chat.completion` for a Messages response. Unknown block types (thinking) are skipped. */
export function fromMessagesResponse(msg: MessagesResponse, requestedModel?: string): Json {
  const text = msg.content
    .filter((b) => b.type === "text")
    .map((b) => b.text ?? "")
    .join("");
  const toolCalls = msg.content
    .filter((b) => b.type === "tool_use")
    .map((b) => ({ id: b.id ?? "", type: "function", function: { name: b.name ?? "", arguments: JSON.stringify(b.input ?? {}) } }));
  const message: Json = { role: "assistant", content: text === "" && toolCalls.length > 0 ? null : text, refusal: null };
  if (toolCalls.length > 0) message.tool_calls = toolCalls;
  const out: Json = {
    id: `chatcmpl-${msg.id}`,
    object: "chat.completion",
    created: nowSeconds(),
    model: requestedModel ?? msg.model,
    choices: [{ index: 0, message, finish_reason: finishReason(msg.stop_reason), logprobs: null }],
  };
  const usage = openaiUsage(msg.usage);
  if (usage) out.usage = usage;
  return out;
}

// ---- Anthropic stream → OpenAI chunks ----

export interface MessagesStreamEvent {
  type: string;
  index?: number;
  message?: { id?: string; model?: string; usage?: AnthropicUsage };
  content_block?: { type: string; id?: string; name?: string };
  delta?: { type?: string; text?: string; partial_json?: string; stop_reason?: string | null };
  usage?: AnthropicUsage;
  error?: { type?: string; message?: string };
}

/**
 * Feed it Anthropic's SSE payloads in order; it answers each with the OpenAI
 * chunk payloads to relay (often none). Nothing is emitted until the first
 * content arrives, so an early `error` event still happens before the
 * relay's first event and may fail over.
 */
export class MessagesStreamTranslator {
  private id = "chatcmpl-anthropic";
  private model: string;
  private readonly created = nowSeconds();
  private started = false;
  private finished = false;
  private stopReason: string | null = null;
  private usage: AnthropicUsage | undefined;
  /** Anthropic content-block index → OpenAI tool_calls index, and whether any arguments went out. */
  private readonly tools = new Map<number, { index: number; sentArgs: boolean }>();

  constructor(private readonly opts: { includeUsage: boolean; model?: string }) {
    this.model = opts.model ?? "";
  }

  feed(payload: string | MessagesStreamEvent): string[] {
    const ev = (typeof payload === "string" ? JSON.parse(payload) : payload) as MessagesStreamEvent;
    if (this.finished) return [];
    switch (ev.type) {
      case "message_start": {
        const m = ev.message ?? {};
        if (m.id) this.id = `chatcmpl-${m.id}`;
        if (m.model && !this.opts.model) this.model = m.model;
        this.mergeUsage(m.usage);
        return [];
      }
      case "content_block_start": {
        const b = ev.content_block;
        if (b?.type !== "tool_use") return [];
        const index = this.tools.size;
        this.tools.set(ev.index ?? 0, { index, sentArgs: false });
        return this.emit({ tool_calls: [{ index, id: b.id ?? "", type: "function", function: { name: b.name ?? "", arguments: "" } }] });
      }
      case "content_block_delta": {
        const d = ev.delta ?? {};
        if (d.type === "text_delta" && d.text) return this.emit({ content: d.text });
        if (d.type === "input_json_delta" && d.partial_json) {
          const tool = this.tools.get(ev.index ?? 0);
          if (!tool) return [];
          tool.sentArgs = true;
          return this.emit({ tool_calls: [{ index: tool.index, function: { arguments: d.partial_json } }] });
        }
        return []; // thinking, signatures, citations: not part of an OpenAI chat answer
      }
      case "content_block_stop": {
        const tool = this.tools.get(ev.index ?? 0);
        // A tool without parameters streams no JSON at all; clients parse arguments.
        if (tool && !tool.sentArgs) {
          tool.sentArgs = true;
          return this.emit({ tool_calls: [{ index: tool.index, function: { arguments: "{}" } }] });
        }
        return [];
      }
      case "message_delta":
        if (ev.delta?.stop_reason !== undefined) this.stopReason = ev.delta.stop_reason;
        this.mergeUsage(ev.usage);
        return [];
      case "message_stop": {
        this.finished = true;
        const out = this.emit({}, finishReason(this.stopReason));
        const usage = openaiUsage(this.usage);
        if (this.opts.includeUsage && usage) out.push(this.chunk([], usage));
        out.push("[DONE]");
        return out;
      }
      case "error":
        throw new AnthropicStreamError(ev.error?.type ?? "api_error", ev.error?.message ?? "stream error");
      default:
        return []; // ping, and event types Anthropic may add later
    }
  }

  /** Usage counts in message_delta are cumulative: the last value wins, never a sum. */
  private mergeUsage(u: AnthropicUsage | undefined): void {
    if (!u) return;
    const next: AnthropicUsage = { ...this.usage };
    for (const k of ["input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"] as const) {
      if (typeof u[k] === "number") next[k] = u[k];
    }
    this.usage = next;
  }

  /** The chunk for this delta, preceded by the role chunk the first time. */
  private emit(delta: Json, finish: string | null = null): string[] {
    const out: string[] = [];
    if (!this.started) {
      this.started = true;
      out.push(this.chunk([{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null, logprobs: null }]));
    }
    out.push(this.chunk([{ index: 0, delta, finish_reason: finish, logprobs: null }]));
    return out;
  }

  // No `"usage": null` on ordinary chunks (as OpenAI sends): the relay parses
  // only payloads containing "usage", and that keeps its hot loop cheap.
  private chunk(choices: Json[], usage?: OpenAIUsage): string {
    return JSON.stringify({ id: this.id, object: "chat.completion.chunk", created: this.created, model: this.model, choices, ...(usage ? { usage } : {}) });
  }
}
