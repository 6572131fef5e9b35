// OpenAI Responses request → the OpenAI chat body the pipeline runs: input
// items as chat messages (after the stored conversation it continues),
// `instructions` as the system message, function tools (and namespaces of
// them: namespaces.ts), tool_choice and
// text.format as the chat fields that carry them. What the chat path cannot
// express is the client's 400, naming the field.
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";
import { chatToolName, NAMESPACE_SEPARATOR, namespaceTools } from "./namespaces.ts";
import { attachReasoning, readEncryptedContent } from "./reasoning.ts";

function reject(param: string, message: string): never {
  throw new ApiError("invalid_request", `${param}: ${message}`, param);
}

/** The include value that asks for output text log probabilities. */
export const LOGPROBS_INCLUDE = "message.output_text.logprobs";

/** One content part of an input message as a chat content part. */
function inputPart(part: unknown, at: string, role: string): Json {
  if (!isObject(part)) reject(at, "content parts must be objects");
  switch (part.type) {
    case "input_text":
    case "output_text":
      if (typeof part.text !== "string") reject(`${at}.text`, "must be a string");
      return { type: "text", text: part.text };
    case "refusal":
      if (typeof part.refusal !== "string") reject(`${at}.refusal`, "must be a string");
      return { type: "text", text: part.refusal };
    case "input_image": {
      if (role !== "user") reject(at, "images can only be sent in user messages");
      if (typeof part.image_url !== "string" || part.image_url === "") {
        reject(`${at}.image_url`, "an image_url (an http(s) or data: URL) is required; file_id images are not supported");
      }
      const detail = typeof part.detail === "string" && part.detail !== "original" ? { detail: part.detail } : {};
      return { type: "image_url", image_url: { url: part.image_url, ...detail } };
    }
    default:
      reject(`${at}.type`, `content part type '${String(part.type)}' is not supported`);
  }
}

/** Text-only content of system, developer and assistant turns, joined. */
function textOf(parts: Json[]): string {
  return parts.map((p) => (typeof p.text === "string" ? p.text : "")).join("");
}

function messageItem(item: Json, at: string): Json {
  const role = item.role;
  if (role !== "user" && role !== "assistant" && role !== "system" && role !== "developer") reject(`${at}.role`, "must be one of user, assistant, system, developer");
  if (typeof item.content === "string") return { role: role === "developer" ? "system" : role, content: item.content };
  if (!Array.isArray(item.content)) reject(`${at}.content`, "must be a string or an array of content parts");
  const parts = item.content.map((p, j) => inputPart(p, `${at}.content[${j}]`, role));
  if (role === "user") {
    // Plain text stays a string (every backend reads that); parts only when an image needs them.
    return { role, content: parts.every((p) => p.type === "text") ? textOf(parts) : parts };
  }
  return { role: role === "developer" ? "system" : role, content: textOf(parts) };
}

function functionOutput(item: Json, at: string): Json {
  if (typeof item.call_id !== "string" || item.call_id === "") reject(`${at}.call_id`, "is required");
  let content: string;
  if (typeof item.output === "string") content = item.output;
  else if (Array.isArray(item.output)) {
    content = item.output
      .map((p, j) => {
        if (!isObject(p) || p.type !== "input_text" || typeof p.text !== "string") reject(`${at}.output[${j}]`, "only input_text parts are supported in function call output");
        return p.text;
      })
      .join("");
  } else reject(`${at}.output`, "must be a string or an array of input_text parts");
  return { role: "tool", tool_call_id: item.call_id, content };
}

function functionCall(item: Json, at: string): Json {
  if (typeof item.call_id !== "string" || item.call_id === "") reject(`${at}.call_id`, "is required");
  if (typeof item.name !== "string" || item.name === "") reject(`${at}.name`, "is required");
  if (typeof item.arguments !== "string") reject(`${at}.arguments`, "must be a string (JSON)");
  if (item.namespace !== undefined && item.namespace !== null && typeof item.namespace !== "string") reject(`${at}.namespace`, "must be a string");
  // A namespaced function's call, under the chat name its tool runs as (namespaces.ts).
  const name = chatToolName(item.name, typeof item.namespace === "string" && item.namespace !== "" ? item.namespace : undefined);
  return { id: item.call_id, type: "function", function: { name, arguments: item.arguments } };
}

/** A reasoning item's summary text, joined. */
function summaryText(item: Json): string {
  return Array.isArray(item.summary) ? item.summary.map((p) => (isObject(p) && typeof p.text === "string" ? p.text : "")).join("") : "";
}

/**
 * The request's input as chat messages: consecutive function calls join one
 * assistant turn. A reasoning item this router returned (its
 * encrypted_content minted by reasoning.ts) gives its reasoning to the
 * assistant turn the next message or function_call item makes or joins —
 * Claude's signed thinking, which a tool-use turn must carry back.
 */
export function inputMessages(input: unknown): Json[] {
  if (typeof input === "string") return [{ role: "user", content: input }];
  if (!Array.isArray(input)) reject("input", "must be a string or an array of input items");
  const out: Json[] = [];
  /** Reasoning items read since the last assistant turn, waiting for the next. */
  let pending: Array<{ text: string; details: Json[] }> = [];
  const take = (turn: Json) => {
    for (const r of pending) attachReasoning(turn, r.text, r.details);
    pending = [];
  };
  input.forEach((raw, i) => {
    const at = `input[${i}]`;
    if (!isObject(raw)) reject(at, "input items must be objects");
    const type = raw.type ?? "message";
    switch (type) {
      case "message": {
        const m = messageItem(raw, at);
        if (m.role === "assistant") take(m);
        else pending = [];
        out.push(m);
        return;
      }
      case "function_call": {
        const call = functionCall(raw, at);
        let last = out[out.length - 1];
        // The model's own text and its calls are one assistant turn in chat.
        if (last?.role === "assistant") last.tool_calls = [...((last.tool_calls as Json[] | undefined) ?? []), call];
        else out.push((last = { role: "assistant", content: null, tool_calls: [call] }));
        take(last);
        return;
      }
      case "function_call_output":
        pending = [];
        out.push(functionOutput(raw, at));
        return;
      case "reasoning": {
        const details = readEncryptedContent(raw.encrypted_content, `${at}.encrypted_content`);
        // Another provider's reasoning (OpenAI's encrypted state, or a summary alone): nothing a chat backend can take back.
        if (details) pending.push({ text: summaryText(raw), details });
        return;
      }
      default:
        reject(`${at}.type`, `input items of type '${String(type)}' are not supported`);
    }
  });
  return out;
}

/** A function tool as chat's, under `name` (a namespaced one's chat name), its description after `lead` (its namespace's). */
function chatFunction(t: Json, _at: string, name: string, lead: string | undefined): Json {
  const fn: Json = { name };
  const description = typeof t.description === "string" && t.description !== "" ? t.description : undefined;
  if (lead !== undefined || description !== undefined) fn.description = [lead, description].filter((d) => d !== undefined).join("\n\n");
  if (isObject(t.parameters)) fn.parameters = t.parameters;
  if (typeof t.strict === "boolean") fn.strict = t.strict;
  return { type: "function", function: fn };
}

function chatTools(tools: unknown): Json[] | undefined {
  if (tools === undefined || tools === null) return undefined;
  if (!Array.isArray(tools)) reject("tools", "must be an array");
  const out: Json[] = [];
  const seen = new Set<string>();
  tools.forEach((t, i) => {
    const at = `tools[${i}]`;
    let made: Json[];
    if (isObject(t) && t.type === "namespace") made = namespaceTools(t, at, chatFunction);
    else {
      if (!isObject(t) || t.type !== "function") {
        reject(`${at}.type`, `only function tools (and namespaces of them) are supported (got '${String(isObject(t) ? t.type : t)}'; server tools such as web_search run inside OpenAI's API, not on these backends)`);
      }
      if (typeof t.name !== "string" || t.name === "") reject(`${at}.name`, "is required");
      made = [chatFunction(t, at, t.name, undefined)];
    }
    for (const m of made) {
      const name = (m.function as Json).name as string;
      // A function named like a namespaced one's chat name would take its calls.
      if (seen.has(name)) reject(at, `a second tool named '${name}' (a namespace's functions are named <namespace>${NAMESPACE_SEPARATOR}<name>)`);
      seen.add(name);
      out.push(m);
    }
  });
  return out;
}

function chatToolChoice(choice: unknown): unknown {
  if (choice === undefined || choice === null) return undefined;
  if (choice === "auto" || choice === "none" || choice === "required") return choice;
  if (isObject(choice) && choice.type === "function" && typeof choice.name === "string") return { type: "function", function: { name: choice.name } };
  if (isObject(choice) && choice.type === "allowed_tools" && (choice.mode === "auto" || choice.mode === "required") && Array.isArray(choice.tools) && choice.tools.length > 0) {
    const tools = choice.tools.map((t, i) => {
      if (!isObject(t) || t.type !== "function" || typeof t.name !== "string") reject(`tool_choice.tools[${i}]`, "must be a function ({type:'function', name})");
      return { type: "function", function: { name: t.name } };
    });
    return { type: "allowed_tools", allowed_tools: { mode: choice.mode, tools } };
  }
  reject("tool_choice", "must be 'auto', 'none', 'required', a function ({type:'function', name}) or allowed_tools ({type:'allowed_tools', mode, tools})");
}

function responseFormat(text: unknown): Json | undefined {
  if (!isObject(text) || !isObject(text.format)) return undefined;
  const f = text.format;
  if (f.type === "text") return undefined;
  if (f.type === "json_object") return { type: "json_object" };
  if (f.type === "json_schema") {
    if (typeof f.name !== "string" || f.name === "") reject("text.format.name", "is required for json_schema");
    if (!isObject(f.schema)) reject("text.format.schema", "must be a JSON schema object");
    const schema: Json = { name: f.name, schema: f.schema };
    if (typeof f.description === "string") schema.description = f.description;
    if (typeof f.strict === "boolean") schema.strict = f.strict;
    return { type: "json_schema", json_schema: schema };
  }
  reject("text.format.type", "must be text, json_object or json_schema");
}

/** Fields of the Responses API that need something Switchyard does not run. */
function rejectUnsupported(body: Json): void {
  if (body.background === true) reject("background", "background responses are not supported");
  if (body.conversation !== undefined && body.conversation !== null) reject("conversation", "conversations are not supported; continue with previous_response_id");
  if (body.prompt !== undefined && body.prompt !== null) reject("prompt", "prompt templates are not supported");
  if (Array.isArray(body.context_management) && body.context_management.length > 0) reject("context_management", "is not supported");
  if (body.truncation === "auto") reject("truncation", "'auto' truncation is not supported; the conversation is sent whole");
  if (body.moderation !== undefined && body.moderation !== null) reject("moderation", "is not supported: no backend moderates here");
}

/**
 * The chat body for a Responses request continuing `history` (the chat
 * messages of the response it continues, or none). Returns the input as
 * chat messages too: they, with the answer, are the next stored history.
 */
export function toChatRequest(body: Json, history: Json[]): { chat: Json & { model: string }; input: Json[] } {
  rejectUnsupported(body);
  if (body.input === undefined || body.input === null) reject("input", "is required");
  const input = inputMessages(body.input);
  // Instructions are this request's alone: a continuation does not inherit them.
  const system = typeof body.instructions === "string" && body.instructions !== "" ? [{ role: "system", content: body.instructions }] : [];
  const messages = [...system, ...history, ...input];
  if (messages.length === 0) reject("input", "must hold at least one message");
  const chat: Json & { model: string } = { model: body.model as string, messages };
  if (body.stream === true) {
    chat.stream = true;
    // The answer's usage goes in response.completed.
    chat.stream_options = { include_usage: true };
  }
  for (const k of ["temperature", "top_p", "parallel_tool_calls"] as const) if (body[k] !== undefined && body[k] !== null) chat[k] = body[k];
  if (typeof body.max_output_tokens === "number") chat.max_tokens = body.max_output_tokens;
  const user = body.safety_identifier ?? body.user;
  if (typeof user === "string" && user !== "") chat.user = user;
  const tools = chatTools(body.tools);
  if (tools && tools.length > 0) {
    chat.tools = tools;
    const choice = chatToolChoice(body.tool_choice);
    if (choice !== undefined) chat.tool_choice = choice;
  }
  const format = responseFormat(body.text);
  if (format) chat.response_format = format;
  if (isObject(body.reasoning) && typeof body.reasoning.effort === "string" && body.reasoning.effort !== "none") chat.reasoning_effort = body.reasoning.effort;
  // Applied, not only echoed: a backend that cannot honour it refuses `text.verbosity` by name. "medium" is OpenAI's default.
  if (isObject(body.text) && typeof body.text.verbosity === "string" && body.text.verbosity !== "medium") chat.verbosity = body.text.verbosity;
  const include = Array.isArray(body.include) ? body.include : [];
  const top = typeof body.top_logprobs === "number" ? body.top_logprobs : 0;
  if (include.includes(LOGPROBS_INCLUDE) || top > 0) {
    chat.logprobs = true;
    if (top > 0) chat.top_logprobs = top;
  }
  return { chat, input };
}
