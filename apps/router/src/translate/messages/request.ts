// Anthropic Messages request (inbound) → the OpenAI chat body the pipeline
// runs: the inverse of backends/anthropic/request.ts, sharing its wire
// shapes. `system`, content blocks, tool_use/tool_result, custom tools and
// tool_choice become their chat equivalents; extended thinking becomes
// OpenRouter's chat extension (`reasoning`, and an assistant turn's
// `reasoning_details` carrying thinking blocks back with their signatures),
// which backends honour, translate or refuse by the field table; what no
// chat backend can honour (server tools, documents, MCP, containers) is the
// client's 400 naming the field; what only some can (images) is returned as
// a feature for the route to narrow the chain by.
import type { RequestFeature } from "../../backends/types.ts";
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";
import { applyContextEdits, chatReasoning, reasoningDetail, type ThinkingDisplay } from "./thinking.ts";

function reject(param: string, message: string): never {
  throw new ApiError("invalid_request", `${param}: ${message}`, param);
}

/** A field that needs a backend feature, and where the request asked for it. */
export interface NeededFeature {
  feature: RequestFeature;
  param: string;
}

/** The top-level fields Switchyard reads; any other is refused by name (Anthropic refuses extra inputs too). */
const knownFields = new Set([
  "model",
  "max_tokens",
  "messages",
  "system",
  "stop_sequences",
  "stream",
  "temperature",
  "top_p",
  "top_k",
  "metadata",
  "tools",
  "tool_choice",
  "thinking",
  "service_tier",
  "cache_control",
  "output_config",
  "container",
  "mcp_servers",
  "context_management",
  "inference_geo",
  "speed",
]);

/** Anthropic-only fields with no chat equivalent on any backend: a 400 naming them when set. */
function rejectInexpressible(body: Json): void {
  for (const key of Object.keys(body)) if (!knownFields.has(key)) reject(key, "is not supported by Switchyard's Messages API");
  if (body.container != null) reject("container", "containers are not available on Switchyard's backends");
  if (Array.isArray(body.mcp_servers) && body.mcp_servers.length > 0) reject("mcp_servers", "MCP servers are not available on Switchyard's backends");
  if (body.inference_geo != null) reject("inference_geo", "Switchyard cannot pin where inference runs");
  if (body.speed != null && body.speed !== "standard") reject("speed", "only 'standard' is available");
}

/** A text block's chat part, its cache_control kept (the Anthropic backend passes it on; others cache prefixes by themselves). */
function textPart(block: Json, at: string): Json {
  if (typeof block.text !== "string") reject(`${at}.text`, "must be a string");
  return { type: "text", text: block.text, ...(block.cache_control != null ? { cache_control: block.cache_control } : {}) };
}

function imagePart(block: Json, at: string, needs: NeededFeature[]): Json {
  const src = block.source;
  if (!isObject(src)) reject(`${at}.source`, "is required");
  let url: string;
  if (src.type === "base64") {
    if (typeof src.media_type !== "string" || typeof src.data !== "string") reject(`${at}.source`, "base64 images need media_type and data");
    url = `data:${src.media_type};base64,${src.data}`;
  } else if (src.type === "url") {
    if (typeof src.url !== "string") reject(`${at}.source.url`, "must be a string");
    url = src.url;
  } else reject(`${at}.source.type`, `image sources of type '${String(src.type)}' are not supported (base64 or url)`);
  needs.push({ feature: "image_input", param: at });
  return { type: "image_url", image_url: { url }, ...(block.cache_control != null ? { cache_control: block.cache_control } : {}) };
}

/** tool_result content → a chat tool message's content (text only). */
function toolResultContent(block: Json, at: string): string | Json[] {
  const c = block.content;
  if (c === undefined || c === null) return "";
  if (typeof c === "string") return c;
  if (!Array.isArray(c)) reject(`${at}.content`, "must be a string or an array of text blocks");
  return c.map((b, k) => {
    if (!isObject(b) || b.type !== "text") reject(`${at}.content[${k}]`, "only text blocks can be sent in a tool result");
    return textPart(b, `${at}.content[${k}]`);
  });
}

/** Thinking has no place in a user turn: whatever a client echoes there, the model never reads. */
const droppedBlocks = new Set(["thinking", "redacted_thinking"]);

function userTurn(content: unknown, at: string, out: Json[], needs: NeededFeature[]): void {
  if (typeof content === "string") {
    out.push({ role: "user", content });
    return;
  }
  if (!Array.isArray(content)) reject(`${at}.content`, "must be a string or an array of content blocks");
  const parts: Json[] = [];
  content.forEach((b, j) => {
    const bat = `${at}.content[${j}]`;
    if (!isObject(b)) reject(bat, "content blocks must be objects");
    switch (b.type) {
      case "text":
        parts.push(textPart(b, bat));
        return;
      case "image":
        parts.push(imagePart(b, bat, needs));
        return;
      case "tool_result":
        if (typeof b.tool_use_id !== "string" || b.tool_use_id === "") reject(`${bat}.tool_use_id`, "is required");
        // Chat has no error flag on tool results: the model reads it in the text.
        out.push({ role: "tool", tool_call_id: b.tool_use_id, content: b.is_error === true ? prefixError(toolResultContent(b, bat)) : toolResultContent(b, bat) });
        return;
      default:
        if (droppedBlocks.has(String(b.type))) return;
        reject(`${bat}.type`, `content blocks of type '${String(b.type)}' are not supported`);
    }
  });
  if (parts.length === 0) return;
  // Plain text stays a string unless a part needs its own fields.
  const plain = parts.every((p) => p.type === "text" && p.cache_control === undefined);
  out.push({ role: "user", content: plain ? parts.map((p) => p.text).join("\n\n") : parts });
}

function prefixError(content: string | Json[]): string | Json[] {
  if (typeof content === "string") return `Error: ${content}`;
  return [{ type: "text", text: "Error:" }, ...content];
}

function assistantTurn(content: unknown, at: string, out: Json[]): void {
  if (typeof content === "string") {
    out.push({ role: "assistant", content });
    return;
  }
  if (!Array.isArray(content)) reject(`${at}.content`, "must be a string or an array of content blocks");
  let text = "";
  const calls: Json[] = [];
  const details: Json[] = [];
  content.forEach((b, j) => {
    const bat = `${at}.content[${j}]`;
    if (!isObject(b)) reject(bat, "content blocks must be objects");
    if (b.type === "text") {
      if (typeof b.text !== "string") reject(`${bat}.text`, "must be a string");
      text += b.text;
    } else if (b.type === "tool_use") {
      if (typeof b.id !== "string" || typeof b.name !== "string") reject(bat, "tool_use blocks need an id and a name");
      calls.push({ id: b.id, type: "function", function: { name: b.name, arguments: JSON.stringify(b.input ?? {}) } });
    } else if (b.type === "thinking" || b.type === "redacted_thinking") {
      details.push(reasoningDetail(b, bat, details.length));
    } else {
      reject(`${bat}.type`, `content blocks of type '${String(b.type)}' are not supported`);
    }
  });
  // A turn of thinking alone is still a turn: its signatures go back.
  if (text === "" && calls.length === 0 && details.length === 0) return;
  const message: Json = { role: "assistant", content: text === "" && calls.length > 0 ? null : text, ...(calls.length > 0 ? { tool_calls: calls } : {}) };
  if (details.length > 0) {
    // OpenRouter's message carries the readable reasoning beside its details.
    const reasoning = details.map((d) => d.text ?? "").join("");
    if (reasoning !== "") message.reasoning = reasoning;
    message.reasoning_details = details;
  }
  out.push(message);
}

/**
 * Claude Code's first system block: `x-anthropic-billing-header: cc_version=…;
 * cc_entrypoint=…;`, attribution for Anthropic's own accounting, not an
 * instruction to the model. Its value changes from one conversation to the
 * next, and it comes before everything else, so kept it would make every
 * conversation's ~15k-token prompt a cold prefix — on a worker's prefix
 * cache and on a provider's prompt cache alike. Switchyard calls providers
 * with its own key, where the attribution means nothing: the block is left out.
 */
const BILLING_HEADER = "x-anthropic-billing-header:";

function systemMessage(system: unknown, at: string): Json | undefined {
  if (system === undefined || system === null) return undefined;
  if (typeof system === "string") return system === "" ? undefined : { role: "system", content: system };
  if (!Array.isArray(system)) reject(at, "must be a string or an array of text blocks");
  const parts: Json[] = [];
  system.forEach((b, i) => {
    if (!isObject(b) || b.type !== "text") reject(`${at}[${i}]`, "system blocks must be text blocks");
    const part = textPart(b, `${at}[${i}]`);
    if (!(part.text as string).startsWith(BILLING_HEADER)) parts.push(part);
  });
  if (parts.length === 0) return undefined;
  return { role: "system", content: parts.some((p) => p.cache_control !== undefined) ? parts : parts.map((p) => p.text).join("\n\n") };
}

function chatTools(tools: unknown): Json[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) reject("tools", "must be an array");
  return tools.map((t, i) => {
    if (!isObject(t)) reject(`tools[${i}]`, "must be an object");
    // Custom tools have no type (or "custom"); typed ones (web_search_…, bash_…) run on Anthropic's servers.
    if (t.type !== undefined && t.type !== null && t.type !== "custom") reject(`tools[${i}].type`, `server tool '${String(t.type)}' is not available on Switchyard's backends`);
    if (typeof t.name !== "string" || t.name === "") reject(`tools[${i}].name`, "is required");
    if (!isObject(t.input_schema)) reject(`tools[${i}].input_schema`, "is required");
    const fn: Json = { name: t.name, parameters: t.input_schema };
    if (typeof t.description === "string") fn.description = t.description;
    if (typeof t.strict === "boolean") fn.strict = t.strict;
    return { type: "function", function: fn };
  });
}

function chatToolChoice(choice: unknown, chat: Json): void {
  if (choice === undefined || choice === null) return;
  if (!isObject(choice)) reject("tool_choice", "must be an object");
  switch (choice.type) {
    case "auto":
      chat.tool_choice = "auto";
      break;
    case "any":
      chat.tool_choice = "required";
      break;
    case "none":
      chat.tool_choice = "none";
      break;
    case "tool":
      if (typeof choice.name !== "string") reject("tool_choice.name", "is required");
      chat.tool_choice = { type: "function", function: { name: choice.name } };
      break;
    default:
      reject("tool_choice.type", "must be auto, any, tool or none");
  }
  if (choice.disable_parallel_tool_use === true) chat.parallel_tool_calls = false;
}

/** The chat body for a Messages request, the backend features it needs, and how its answer shows thinking. */
export function toChatRequest(body: Json): { chat: Json & { model: string }; needs: NeededFeature[]; thinking: ThinkingDisplay } {
  rejectInexpressible(body);
  if (!Array.isArray(body.messages)) reject("messages", "must be an array");
  const needs: NeededFeature[] = [];
  const messages: Json[] = [];
  const system = systemMessage(body.system, "system");
  if (system) messages.push(system);
  body.messages.forEach((m, i) => {
    const at = `messages[${i}]`;
    if (!isObject(m)) reject(at, "must be an object");
    if (m.role === "user") userTurn(m.content, at, messages, needs);
    else if (m.role === "assistant") assistantTurn(m.content, at, messages);
    else if (m.role === "system") {
      const s = systemMessage(m.content, `${at}.content`);
      if (s) messages.push(s);
    } else reject(`${at}.role`, "must be user or assistant");
  });
  if (!messages.some((m) => m.role === "user" || m.role === "tool")) reject("messages", "at least one user message is required");
  const chat: Json & { model: string } = { model: body.model as string, messages, max_tokens: body.max_tokens };
  if (body.stream === true) {
    chat.stream = true;
    // message_delta reports the answer's usage.
    chat.stream_options = { include_usage: true };
  }
  for (const k of ["temperature", "top_p", "top_k"] as const) if (typeof body[k] === "number") chat[k] = body[k];
  if (Array.isArray(body.stop_sequences) && body.stop_sequences.length > 0) {
    if (body.stop_sequences.length > 4) reject("stop_sequences", "at most 4 stop sequences are supported");
    chat.stop = body.stop_sequences;
  }
  if (isObject(body.metadata) && typeof body.metadata.user_id === "string" && body.metadata.user_id !== "") chat.user = body.metadata.user_id;
  const tools = chatTools(body.tools);
  if (tools && tools.length > 0) {
    chat.tools = tools;
    chatToolChoice(body.tool_choice, chat);
  }
  if (isObject(body.output_config) && isObject(body.output_config.format)) {
    const f = body.output_config.format;
    if (f.type !== "json_schema" || !isObject(f.schema)) reject("output_config.format", "must be {type: 'json_schema', schema}");
    chat.response_format = { type: "json_schema", json_schema: { name: "output", schema: f.schema, strict: true } };
  }
  const thinking = chatReasoning(body, chat);
  applyContextEdits(body, messages, thinking !== "none");
  return { chat, needs, thinking };
}
