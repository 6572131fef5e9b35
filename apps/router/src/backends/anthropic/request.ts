// OpenAI chat request → Anthropic Messages request (see wire.ts). Reasoning
// travels in OpenRouter's chat extension: `reasoning` / `reasoning_effort`
// become `thinking`, an assistant message's `reasoning_details` its thinking
// blocks.
import { CLAUDE_REASONING_FORMAT, mergeDetails, MIN_THINKING_BUDGET } from "../reasoning.ts";
import {
  isObject,
  UntranslatableRequest,
  type ContentBlock,
  type ImageBlock,
  type Json,
  type MessagesRequest,
  type ReasoningBlock,
  type TextBlock,
  type Effort,
  type ThinkingConfig,
  type ToolResultBlock,
  type ToolUseBlock,
} from "./wire.ts";

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

/**
 * An assistant message's `reasoning_details` (OpenRouter's) as the thinking
 * blocks Anthropic gave: entries merged by `index` (a streamed answer's
 * pieces: text joined, signature and data taken), in order. Only Claude's
 * entries (format anthropic-claude-v1, or none given) can go back; another
 * provider's reasoning is dropped, and so is a text without its signature,
 * which Anthropic would refuse as forged.
 */
function reasoningBlocks(details: unknown, at: string): ReasoningBlock[] {
  if (details === undefined || details === null) return [];
  if (!Array.isArray(details)) reject(at, "must be an array");
  details.forEach((d, j) => {
    if (!isObject(d)) reject(`${at}[${j}]`, "must be an object");
  });
  const blocks: ReasoningBlock[] = [];
  for (const e of mergeDetails(details as Json[])) {
    if (e.format != null && e.format !== CLAUDE_REASONING_FORMAT) continue;
    if (e.type === "reasoning.text" && typeof e.signature === "string" && e.signature !== "") blocks.push({ type: "thinking", thinking: typeof e.text === "string" ? e.text : "", signature: e.signature });
    else if (e.type === "reasoning.encrypted" && typeof e.data === "string" && e.data !== "") blocks.push({ type: "redacted_thinking", data: e.data });
  }
  return blocks;
}

/** OpenRouter's share of max_tokens a thinking budget gets, by effort. */
const effortRatio: Record<string, number> = { xhigh: 0.95, high: 0.8, medium: 0.5, low: 0.2, minimal: 0.1 };
/** OpenRouter's most for an effort. */
const MAX_EFFORT_BUDGET = 32_000;

function effortBudget(effort: unknown, param: string, maxTokens: number): number {
  if (typeof effort !== "string" || !Object.hasOwn(effortRatio, effort)) reject(param, `must be one of none, ${Object.keys(effortRatio).join(", ")}`);
  return Math.max(MIN_THINKING_BUDGET, Math.min(MAX_EFFORT_BUDGET, Math.floor(maxTokens * effortRatio[effort]!)));
}

/**
 * Whether a Claude model thinks adaptively and takes `output_config.effort`
 * (Claude 4.6 and later, as their ids name them: claude-opus-4-6,
 * claude-sonnet-4-6-…, claude-opus-5…). Anthropic refuses adaptive thinking
 * on older models, and budgets (`type: "enabled"`) on the newest, so an
 * effort is said to each in its own terms.
 */
export function thinksAdaptively(model: string): boolean {
  const m = /claude-(?:opus|sonnet|haiku)-(\d+)(?:-(\d{1,2})(?!\d))?/.exec(model);
  if (!m) return false;
  const major = Number(m[1]);
  return major > 4 || (major === 4 && Number(m[2] ?? 0) >= 6);
}

/** Chat's efforts (OpenRouter's, OpenAI's) as Anthropic's `output_config.effort`: it has no minimal. */
const anthropicEffort: Record<string, Effort> = { xhigh: "xhigh", high: "high", medium: "medium", low: "low", minimal: "low" };

/**
 * `thinking` (and `output_config.effort`) for the body's reasoning ask:
 * OpenRouter's `reasoning` object (which wins), else chat's
 * `reasoning_effort`. `max_tokens` is the budget as given; an effort is,
 * on a model that thinks adaptively, adaptive thinking at that effort, and
 * on an older one a budget of its share of max_tokens; `enabled: true`
 * alone is adaptive thinking (an older model: a medium effort's budget).
 * `enabled: false` or effort "none" asks none. Anthropic needs a budget
 * below max_tokens (`maxTokens`; undefined for a count, which has none):
 * otherwise the client's 400 naming the field, before anything is sent.
 */
function thinkingFrom(body: Json, model: string, maxTokens: number | undefined, effortBase: number): { thinking: ThinkingConfig; effort?: Effort } | undefined {
  let budget: number;
  let param: string;
  let effort: unknown;
  const r = body.reasoning;
  if (r !== undefined && r !== null) {
    if (!isObject(r)) reject("reasoning", "must be an object");
    if (r.enabled === false || r.effort === "none") return undefined;
    if (r.max_tokens !== undefined && r.max_tokens !== null) {
      param = "reasoning.max_tokens";
      if (typeof r.max_tokens !== "number" || !Number.isInteger(r.max_tokens)) reject(param, "must be an integer");
      if (r.max_tokens < MIN_THINKING_BUDGET) reject(param, `Anthropic's thinking budget is at least ${MIN_THINKING_BUDGET} tokens`);
      budget = r.max_tokens;
    } else if (r.effort !== undefined && r.effort !== null) {
      param = "reasoning.effort";
      effort = r.effort;
    } else {
      if (thinksAdaptively(model)) return { thinking: { type: "adaptive" } };
      param = "reasoning";
      effort = "medium";
    }
  } else if (body.reasoning_effort !== undefined && body.reasoning_effort !== null && body.reasoning_effort !== "none") {
    param = "reasoning_effort";
    effort = body.reasoning_effort;
  } else {
    return undefined;
  }
  if (effort !== undefined) {
    if (thinksAdaptively(model)) {
      if (typeof effort !== "string" || !Object.hasOwn(anthropicEffort, effort)) reject(param, `must be one of none, ${Object.keys(effortRatio).join(", ")}`);
      return { thinking: { type: "adaptive" }, effort: anthropicEffort[effort]! };
    }
    budget = effortBudget(effort, param, effortBase);
  }
  if (maxTokens !== undefined && budget! >= maxTokens) {
    reject(param, `Anthropic needs max_tokens above the thinking budget: a budget of ${budget!} tokens with max_tokens ${maxTokens} (the request's, or this deployment's cap on it); raise max_tokens or lower the budget`);
  }
  return { thinking: { type: "enabled", budget_tokens: budget! } };
}

/** Whether the client asked for thinking without its text in the answer (`reasoning.exclude`). */
export function reasoningExcluded(body: Json): boolean {
  return isObject(body.reasoning) && body.reasoning.exclude === true;
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
  return translate(body, upstreamModel, defaults, false);
}

/** toMessagesRequest's work; `forCount`: a count_tokens body, which has no max_tokens to keep a thinking budget under. */
function translate(body: Json, upstreamModel: string, defaults: { maxTokens: number }, forCount: boolean): MessagesRequest {
  rejectInexpressible(body);
  if (!Array.isArray(body.messages)) reject("messages", "must be an array");

  const system: TextBlock[] = [];
  // `reasoning`: a turn's thinking blocks, which Anthropic wants before its text and tool calls.
  const turns: Array<{ role: "user" | "assistant"; reasoning: ReasoningBlock[]; blocks: ContentBlock[] }> = [];
  // Anthropic wants alternating turns: same-role neighbours become one turn,
  // and tool results travel in the user turn that follows the tool calls.
  const push = (role: "user" | "assistant", blocks: ContentBlock[], reasoning: ReasoningBlock[] = []) => {
    if (blocks.length === 0 && reasoning.length === 0) return;
    const last = turns[turns.length - 1];
    if (last?.role === role) {
      last.reasoning.push(...reasoning);
      last.blocks.push(...blocks);
    } else turns.push({ role, reasoning, blocks });
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
        return push("assistant", [...contentBlocks(m.content, `${at}.content`), ...calls], reasoningBlocks(m.reasoning_details, `${at}.reasoning_details`));
      }
      case "tool":
        return push("user", [toolResult(m, at)]);
      default:
        reject(`${at}.role`, `role '${String(m.role)}' cannot be sent to Anthropic`);
    }
  });

  // Both names set: the smaller (the router normalizes bodies to one; this holds for any caller).
  const asked = smaller(num(body.max_completion_tokens), num(body.max_tokens));
  const maxTokens = asked ?? defaults.maxTokens;
  const req: MessagesRequest = {
    model: upstreamModel,
    max_tokens: maxTokens,
    messages: turns.map(({ role, reasoning, blocks }) => {
      const only = blocks[0];
      const plain = reasoning.length === 0 && blocks.length === 1 && only?.type === "text" && only.cache_control === undefined;
      return { role, content: plain ? only.text : [...reasoning, ...blocks] };
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
  const thinking = thinkingFrom(body, upstreamModel, forCount ? undefined : maxTokens, maxTokens);
  if (thinking) {
    req.thinking = thinking.thinking;
    if (thinking.effort) req.output_config = { effort: thinking.effort };
  }
  return req;
}

function smaller(a: number | undefined, b: number | undefined): number | undefined {
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

function num(v: unknown): number | undefined {
  return typeof v === "number" && Number.isFinite(v) ? v : undefined;
}


/**
 * The body of Anthropic's count_tokens: what the Messages request would send
 * that makes its prompt (thinking too: it adds Anthropic's own system
 * prompt), nothing that shapes only the answer.
 */
export type CountTokensRequest = Pick<MessagesRequest, "model" | "messages" | "system" | "tools" | "tool_choice" | "thinking">;

/**
 * The count_tokens request for an OpenAI chat body: the Messages request
 * `toMessagesRequest` would send, so the count is of the prompt a run would
 * carry, less the fields count_tokens refuses as extra inputs (max_tokens,
 * sampling, stop sequences, stream, metadata). An effort's thinking budget
 * is its share of the body's max_tokens, or of `defaults.maxTokens`.
 */
export function toCountTokensRequest(body: Json, upstreamModel: string, defaults: { maxTokens: number }): CountTokensRequest {
  const { model, messages, system, tools, tool_choice, thinking } = translate(body, upstreamModel, defaults, true);
  return {
    model,
    messages,
    ...(system !== undefined ? { system } : {}),
    ...(tools !== undefined ? { tools } : {}),
    ...(tool_choice !== undefined ? { tool_choice } : {}),
    ...(thinking !== undefined ? { thinking } : {}),
  };
}
