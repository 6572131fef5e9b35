// Gemini GenerateContentRequest (generativelanguage v1beta, camelCase JSON
// as the REST API and @google/genai send it) → the OpenAI chat body the
// pipeline runs. `systemInstruction`, contents and their parts, function
// declarations (Google's OpenAPI-subset Schema made JSON Schema), toolConfig
// and generationConfig become their chat equivalents; thinkingConfig becomes
// OpenRouter's `reasoning`, and a thoughtSignature this router minted gives
// its reasoning_details back to the model turn it rides on. What no chat
// backend can honour (Google's server tools, files, cached content, audio or
// image output) is the client's 400 naming the field, as Google names an
// unknown one.
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";
import type { NeededFeature } from "../messages/request.ts";
import { attachReasoning } from "../responses/reasoning.ts";
import { readThoughtSignature } from "./signature.ts";

function reject(param: string, message: string): never {
  throw new ApiError("invalid_request", `${param}: ${message}`, param);
}

/** Keys of `obj` outside `known` are refused by name, as Google refuses an unknown name. */
function rejectUnknown(obj: Json, known: ReadonlySet<string>, at: string): void {
  for (const key of Object.keys(obj)) if (!known.has(key)) reject(at === "" ? key : `${at}.${key}`, "is not a field Switchyard's Gemini API knows");
}

/** Set, in the sense a JSON client means: present and not null. */
const given = (v: unknown): boolean => v !== undefined && v !== null;

/**
 * The chat fields toChatRequest makes, by the Gemini field the client sent:
 * a backend's refusal of one (a worker's of `reasoning`) names the latter.
 */
export const chatParamsOfGemini: Record<string, string> = {
  reasoning: "generationConfig.thinkingConfig",
  response_format: "generationConfig.responseSchema",
  stop: "generationConfig.stopSequences",
  max_tokens: "generationConfig.maxOutputTokens",
  temperature: "generationConfig.temperature",
  top_k: "generationConfig.topK",
  top_p: "generationConfig.topP",
  seed: "generationConfig.seed",
  presence_penalty: "generationConfig.presencePenalty",
  frequency_penalty: "generationConfig.frequencyPenalty",
  logprobs: "generationConfig.responseLogprobs",
  top_logprobs: "generationConfig.logprobs",
  tool_choice: "toolConfig.functionCallingConfig",
};

// ---------------------------------------------------------------- Schema

/** Google's Schema types (the Type enum; JSON clients may write them in either case). */
const schemaTypes = new Set(["string", "number", "integer", "boolean", "array", "object", "null"]);

/**
 * Google's Schema (an OpenAPI 3.0 subset: uppercase `type`, `nullable`,
 * `propertyOrdering`) as the JSON Schema chat tools and response_format
 * take, recursively. `nullable: true` adds "null" to the type (and to an
 * enum, which would otherwise refuse it); `propertyOrdering` (Gemini's order
 * of generated keys) has no JSON Schema meaning and is dropped, as is
 * `format: "enum"` (Google's marker for an enum string); `example` becomes
 * `examples`. Other fields share JSON Schema's names and are kept as sent.
 */
export function jsonSchemaOf(schema: unknown, at: string): Json {
  if (!isObject(schema)) reject(at, "must be a Schema object");
  const out: Json = {};
  for (const [key, value] of Object.entries(schema)) {
    if (value === undefined || value === null) continue;
    switch (key) {
      case "type": {
        if (typeof value !== "string") reject(`${at}.type`, "must be a string");
        const t = value.toLowerCase();
        if (t === "type_unspecified") break;
        if (!schemaTypes.has(t)) reject(`${at}.type`, `'${value}' is not a Schema type (${[...schemaTypes].map((s) => s.toUpperCase()).join(", ")})`);
        out.type = t;
        break;
      }
      case "properties":
        if (!isObject(value)) reject(`${at}.properties`, "must be an object of Schemas");
        out.properties = Object.fromEntries(Object.entries(value).map(([name, s]) => [name, jsonSchemaOf(s, `${at}.properties.${name}`)]));
        break;
      case "items":
        out.items = jsonSchemaOf(value, `${at}.items`);
        break;
      case "anyOf":
        if (!Array.isArray(value)) reject(`${at}.anyOf`, "must be an array of Schemas");
        out.anyOf = value.map((s, k) => jsonSchemaOf(s, `${at}.anyOf[${k}]`));
        break;
      case "example":
        out.examples = [value];
        break;
      case "format":
        if (value !== "enum") out.format = value;
        break;
      case "minItems":
      case "maxItems":
      case "minLength":
      case "maxLength":
      case "minProperties":
      case "maxProperties":
        // int64 in Google's schema, which proto3 JSON may write as a string ("1"): JSON Schema wants the number.
        out[key] = typeof value === "string" && /^\d+$/.test(value) ? Number(value) : value;
        break;
      case "nullable":
      case "propertyOrdering":
        break;
      default:
        out[key] = value;
    }
  }
  if (schema.nullable === true) {
    if (typeof out.type === "string") out.type = [out.type, "null"];
    else if (Array.isArray(out.anyOf)) out.anyOf = [...(out.anyOf as Json[]), { type: "null" }];
    if (Array.isArray(out.enum) && !out.enum.includes(null)) out.enum = [...out.enum, null];
  }
  return out;
}

// ---------------------------------------------------------------- contents

/** A Part's fields: what it holds (one of the data fields) and what rides along. */
const partFields = new Set([
  "text",
  "inlineData",
  "fileData",
  "functionCall",
  "functionResponse",
  "executableCode",
  "codeExecutionResult",
  "thought",
  "thoughtSignature",
  "videoMetadata",
  // Per-part media resolution only changes how many tokens Gemini spends on an image: nothing a chat backend reads.
  "mediaResolution",
  // Client-side bookkeeping (genai: "custom metadata associated with the Part"): never reaches the model.
  "partMetadata",
]);

/** The Part fields that are its data: one to a part. */
const dataFields = ["text", "inlineData", "fileData", "functionCall", "functionResponse", "executableCode", "codeExecutionResult"];

/** Part fields no chat backend can take, with why. */
const refusedParts: Record<string, string> = {
  fileData: "files are not available on Switchyard (no Files API); send the bytes as inlineData",
  executableCode: "code execution runs inside the Gemini API, not on these backends",
  codeExecutionResult: "code execution runs inside the Gemini API, not on these backends",
  videoMetadata: "video input is not supported",
};

function imagePart(data: unknown, at: string, needs: NeededFeature[]): Json {
  if (!isObject(data)) reject(at, "must be an object with mimeType and data");
  if (typeof data.mimeType !== "string" || !data.mimeType.startsWith("image/")) reject(`${at}.mimeType`, `only images (image/*) can be sent inline, not '${String(data.mimeType)}'`);
  if (typeof data.data !== "string" || data.data === "") reject(`${at}.data`, "must be base64 bytes");
  needs.push({ feature: "image_input", param: at });
  return { type: "image_url", image_url: { url: `data:${data.mimeType};base64,${data.data}` } };
}

/**
 * Text parts of a user turn (or the system instruction), joined: a line
 * break between two pieces unless one side already has it. Gemini CLI sends
 * separate pieces (its session context, then the prompt; a header, then a
 * file's content), each whole in itself: glued they would run into one
 * line, and a blank line added where the client already ended one would
 * change text the client wrote.
 */
function joinPieces(pieces: string[]): string {
  return pieces.reduce((all, p) => (all === "" || p === "" || all.endsWith("\n") || p.startsWith("\n") ? all + p : `${all}\n${p}`), "");
}

/** A content's parts, checked as an array of objects. */
function partsOf(content: Json, at: string): Json[] {
  if (!Array.isArray(content.parts) || content.parts.length === 0) reject(`${at}.parts`, "must hold at least one part");
  content.parts.forEach((p, j) => {
    if (!isObject(p)) reject(`${at}.parts[${j}]`, "must be an object");
    rejectUnknown(p, partFields, `${at}.parts[${j}]`);
    // A Part is a oneof: Google refuses two kinds of data in one.
    if (dataFields.filter((f) => given(p[f])).length > 1) reject(`${at}.parts[${j}]`, `holds more than one of ${dataFields.join(", ")}`);
    for (const [field, why] of Object.entries(refusedParts)) if (given(p[field])) reject(`${at}.parts[${j}].${field}`, why);
  });
  return content.parts as Json[];
}

/** The model turn's calls not yet answered, in order, for functionResponses that carry no id. */
type OpenCall = { id: string; name: string };

/** A model turn as the assistant message: text, tool_calls, and the reasoning_details its thoughtSignatures carry. */
function modelTurn(content: Json, i: number, out: Json[]): OpenCall[] {
  const at = `contents[${i}]`;
  let text = "";
  const calls: Json[] = [];
  const details: Json[][] = [];
  const signatures = new Set<unknown>();
  partsOf(content, at).forEach((p, j) => {
    const pat = `${at}.parts[${j}]`;
    // One signature repeated on several parts (a client that copies it to each piece) is one turn's reasoning, sent once.
    const signed = signatures.has(p.thoughtSignature) ? undefined : readThoughtSignature(p.thoughtSignature, `${pat}.thoughtSignature`);
    signatures.add(p.thoughtSignature);
    if (signed) details.push(signed);
    if (given(p.inlineData)) reject(`${pat}.inlineData`, "a model turn cannot carry inline data on these backends");
    if (given(p.functionResponse)) reject(`${pat}.functionResponse`, "function responses go in a user turn");
    if (given(p.functionCall)) {
      const fc = p.functionCall;
      if (!isObject(fc)) reject(`${pat}.functionCall`, "must be an object");
      if (typeof fc.name !== "string" || fc.name === "") reject(`${pat}.functionCall.name`, "is required");
      if (given(fc.args) && !isObject(fc.args)) reject(`${pat}.functionCall.args`, "must be an object");
      // Without an id (Gemini's own answers have none), one the functionResponse finds by name and order. Numbered by
      // content and call, not by part: the same each time the history is sent, even by a client that drops thought parts.
      const id = typeof fc.id === "string" && fc.id !== "" ? fc.id : `call_${i}_${calls.length}`;
      calls.push({ id, type: "function", function: { name: fc.name, arguments: JSON.stringify(fc.args ?? {}) } });
      return;
    }
    if (!given(p.text)) return;
    if (typeof p.text !== "string") reject(`${pat}.text`, "must be a string");
    // The model's shown thoughts: what it thought travels signed in thoughtSignature, the summary is not sent back.
    if (p.thought === true) return;
    // Pieces of one answer (a stream's chunks): joined as written.
    text += p.text;
  });
  if (text === "" && calls.length === 0 && details.length === 0) return [];
  const turn: Json = { role: "assistant", content: text === "" && calls.length > 0 ? null : text };
  if (calls.length > 0) turn.tool_calls = calls;
  for (const d of details) attachReasoning(turn, "", d);
  out.push(turn);
  return calls.map((c) => ({ id: c.id as string, name: (c.function as Json).name as string }));
}

/** functionResponse.parts (multimodal function results): images join the user turn after the tool messages. */
function functionResponseParts(parts: unknown, at: string, needs: NeededFeature[]): Json[] {
  if (!given(parts)) return [];
  if (!Array.isArray(parts)) reject(at, "must be an array");
  return parts.map((p, k) => {
    if (!isObject(p)) reject(`${at}[${k}]`, "must be an object");
    rejectUnknown(p, new Set(["inlineData", "fileData"]), `${at}[${k}]`);
    if (given(p.fileData)) reject(`${at}[${k}].fileData`, refusedParts.fileData!);
    return imagePart(p.inlineData, `${at}[${k}].inlineData`, needs);
  });
}

const functionResponseFields = new Set(["id", "name", "response", "parts", "willContinue", "scheduling"]);

/**
 * A user (or "function") turn: its functionResponses as tool messages first
 * — chat needs a call's result right after the calls — then its text and
 * images as one user message.
 */
function userTurn(content: Json, i: number, open: OpenCall[], out: Json[], needs: NeededFeature[]): void {
  const at = `contents[${i}]`;
  const pieces: Json[] = [];
  partsOf(content, at).forEach((p, j) => {
    const pat = `${at}.parts[${j}]`;
    if (given(p.functionCall)) reject(`${pat}.functionCall`, "function calls go in a model turn");
    if (given(p.functionResponse)) {
      const fr = p.functionResponse;
      if (!isObject(fr)) reject(`${pat}.functionResponse`, "must be an object");
      rejectUnknown(fr, functionResponseFields, `${pat}.functionResponse`);
      // Live API streaming of one call's results: a generateContent turn answers each call once.
      if (fr.willContinue === true) reject(`${pat}.functionResponse.willContinue`, "is not supported");
      if (typeof fr.name !== "string" || fr.name === "") reject(`${pat}.functionResponse.name`, "is required");
      if (given(fr.response) && !isObject(fr.response)) reject(`${pat}.functionResponse.response`, "must be an object");
      let id: string;
      if (typeof fr.id === "string" && fr.id !== "") {
        id = fr.id;
        const k = open.findIndex((c) => c.id === id);
        if (k >= 0) open.splice(k, 1);
      } else {
        const k = open.findIndex((c) => c.name === fr.name);
        if (k < 0) reject(`${pat}.functionResponse`, `no call of '${fr.name}' in the model turn before it is left to answer`);
        id = open[k]!.id;
        open.splice(k, 1);
      }
      out.push({ role: "tool", tool_call_id: id, content: JSON.stringify(fr.response ?? {}) });
      pieces.push(...functionResponseParts(fr.parts, `${pat}.functionResponse.parts`, needs));
      return;
    }
    if (given(p.inlineData)) {
      pieces.push(imagePart(p.inlineData, `${pat}.inlineData`, needs));
      return;
    }
    if (!given(p.text)) return;
    if (typeof p.text !== "string") reject(`${pat}.text`, "must be a string");
    if (p.thought === true) return;
    const last = pieces[pieces.length - 1];
    if (last?.type === "text") last.text = joinPieces([last.text as string, p.text]);
    else pieces.push({ type: "text", text: p.text });
  });
  if (pieces.length === 0) return;
  // Plain text stays a string (every backend reads that); parts only when an image needs them.
  out.push({ role: "user", content: pieces.length === 1 && pieces[0]!.type === "text" ? pieces[0]!.text : pieces });
}

/** contents[] as chat messages. */
function contentMessages(contents: unknown, needs: NeededFeature[]): Json[] {
  if (!Array.isArray(contents) || contents.length === 0) reject("contents", "must hold at least one content");
  const out: Json[] = [];
  let open: OpenCall[] = [];
  contents.forEach((c, i) => {
    const at = `contents[${i}]`;
    if (!isObject(c)) reject(at, "must be an object");
    rejectUnknown(c, new Set(["role", "parts"]), at);
    const role = c.role ?? "user";
    if (role === "model") open = modelTurn(c, i, out);
    // "function" is the older API's role for a turn of functionResponses.
    else if (role === "user" || role === "function" || role === "") userTurn(c, i, open, out, needs);
    else reject(`${at}.role`, "must be user or model");
  });
  if (!out.some((m) => m.role === "user" || m.role === "tool")) reject("contents", "at least one user turn is required");
  return out;
}

/** systemInstruction ({parts} or {role, parts}, text only) as the system message. */
function systemMessage(instruction: unknown): Json | undefined {
  if (!given(instruction)) return undefined;
  const at = "systemInstruction";
  if (!isObject(instruction)) reject(at, "must be a Content object ({parts: [{text}]})");
  rejectUnknown(instruction, new Set(["role", "parts"]), at);
  if (!Array.isArray(instruction.parts)) reject(`${at}.parts`, "must be an array of text parts");
  const texts = instruction.parts.map((p, j) => {
    if (!isObject(p) || typeof p.text !== "string" || Object.keys(p).some((k) => k !== "text" && p[k] !== undefined && p[k] !== null)) {
      reject(`${at}.parts[${j}]`, "a system instruction holds text parts only");
    }
    return p.text;
  });
  const text = joinPieces(texts);
  return text === "" ? undefined : { role: "system", content: text };
}

// ---------------------------------------------------------------- tools

/** Google's tools that run inside the Gemini API. */
const serverTools = new Set(["googleSearch", "googleSearchRetrieval", "codeExecution", "urlContext", "retrieval", "computerUse", "fileSearch", "googleMaps", "enterpriseWebSearch"]);

const declarationFields = new Set(["name", "description", "parameters", "parametersJsonSchema", "response", "responseJsonSchema", "behavior"]);

function chatTools(tools: unknown): Json[] {
  if (!given(tools)) return [];
  if (!Array.isArray(tools)) reject("tools", "must be an array");
  const out: Json[] = [];
  const seen = new Set<string>();
  tools.forEach((t, i) => {
    const at = `tools[${i}]`;
    if (!isObject(t)) reject(at, "must be an object");
    for (const [kind, value] of Object.entries(t)) {
      if (!given(value)) continue;
      if (serverTools.has(kind)) reject(`${at}.${kind}`, "Google's server tools run inside the Gemini API, not on these backends");
      if (kind !== "functionDeclarations") reject(`${at}.${kind}`, "is not a tool Switchyard's Gemini API knows (function declarations only)");
      if (!Array.isArray(value)) reject(`${at}.functionDeclarations`, "must be an array");
      value.forEach((d, k) => {
        const dat = `${at}.functionDeclarations[${k}]`;
        if (!isObject(d)) reject(dat, "must be an object");
        rejectUnknown(d, declarationFields, dat);
        if (typeof d.name !== "string" || d.name === "") reject(`${dat}.name`, "is required");
        if (seen.has(d.name)) reject(`${dat}.name`, `a second function named '${d.name}'`);
        seen.add(d.name);
        if (given(d.parameters) && given(d.parametersJsonSchema)) reject(`${dat}.parametersJsonSchema`, "set parameters or parametersJsonSchema, not both");
        let parameters: Json;
        if (given(d.parametersJsonSchema)) {
          if (!isObject(d.parametersJsonSchema)) reject(`${dat}.parametersJsonSchema`, "must be a JSON Schema object");
          parameters = d.parametersJsonSchema;
        } else if (given(d.parameters)) parameters = jsonSchemaOf(d.parameters, `${dat}.parameters`);
        // A function without parameters: an empty object, which every backend takes (some refuse none).
        else parameters = { type: "object", properties: {} };
        // response / responseJsonSchema describe what the client's function returns: the model never reads them through chat.
        const fn: Json = { name: d.name, parameters };
        if (typeof d.description === "string" && d.description !== "") fn.description = d.description;
        out.push({ type: "function", function: fn });
      });
    }
  });
  return out;
}

/** toolConfig.functionCallingConfig as chat's tool_choice (undefined: the backend's default, auto). */
function chatToolChoice(toolConfig: unknown): unknown {
  if (!given(toolConfig)) return undefined;
  if (!isObject(toolConfig)) reject("toolConfig", "must be an object");
  // retrievalConfig (a location for Google Maps grounding) serves server tools, which are refused: inert.
  rejectUnknown(toolConfig, new Set(["functionCallingConfig", "retrievalConfig"]), "toolConfig");
  const fcc = toolConfig.functionCallingConfig;
  if (!given(fcc)) return undefined;
  const at = "toolConfig.functionCallingConfig";
  if (!isObject(fcc)) reject(at, "must be an object");
  rejectUnknown(fcc, new Set(["mode", "allowedFunctionNames"]), at);
  const mode = typeof fcc.mode === "string" ? fcc.mode.toUpperCase() : given(fcc.mode) ? reject(`${at}.mode`, "must be a string") : "MODE_UNSPECIFIED";
  let choice: "auto" | "required" | "none";
  switch (mode) {
    case "MODE_UNSPECIFIED":
    case "AUTO":
    // VALIDATED: the model chooses, as with AUTO, and Gemini checks its calls against the schema; chat backends check what they check.
    case "VALIDATED":
      choice = "auto";
      break;
    case "ANY":
      choice = "required";
      break;
    case "NONE":
      choice = "none";
      break;
    default:
      reject(`${at}.mode`, "must be AUTO, ANY, NONE or VALIDATED");
  }
  const names = fcc.allowedFunctionNames;
  if (!given(names) || (Array.isArray(names) && names.length === 0)) return mode === "MODE_UNSPECIFIED" ? undefined : choice;
  if (!Array.isArray(names) || !names.every((n) => typeof n === "string" && n !== "")) reject(`${at}.allowedFunctionNames`, "must be an array of function names");
  if (choice === "none") reject(`${at}.allowedFunctionNames`, "cannot be set with mode NONE");
  if (choice === "required" && names.length === 1) return { type: "function", function: { name: names[0] } };
  return { type: "allowed_tools", allowed_tools: { mode: choice, tools: names.map((name) => ({ type: "function", function: { name } })) } };
}

// ---------------------------------------------------------------- generationConfig

const generationFields = new Set([
  "stopSequences",
  "responseMimeType",
  "responseSchema",
  "responseJsonSchema",
  "responseModalities",
  "candidateCount",
  "maxOutputTokens",
  "temperature",
  "topP",
  "topK",
  "seed",
  "presencePenalty",
  "frequencyPenalty",
  "responseLogprobs",
  "logprobs",
  "enableEnhancedCivicAnswers",
  "speechConfig",
  "imageConfig",
  "thinkingConfig",
  "mediaResolution",
]);

/** thinkingConfig → chat `reasoning`; whether the answer shows thoughts. */
function chatReasoning(config: unknown, chat: Json): boolean {
  if (!given(config)) return false;
  const at = "generationConfig.thinkingConfig";
  if (!isObject(config)) reject(at, "must be an object");
  rejectUnknown(config, new Set(["includeThoughts", "thinkingBudget", "thinkingLevel"]), at);
  const budget = config.thinkingBudget;
  const level = config.thinkingLevel;
  if (given(budget) && given(level)) reject(`${at}.thinkingLevel`, "set thinkingBudget or thinkingLevel, not both");
  if (given(budget)) {
    if (typeof budget !== "number" || !Number.isInteger(budget) || budget < -1) reject(`${at}.thinkingBudget`, "must be an integer: a token budget, 0 (off) or -1 (dynamic)");
    // 0 is thinking off: nothing asked, so any backend serves it.
    if (budget > 0) chat.reasoning = { max_tokens: budget };
    else if (budget === -1) chat.reasoning = { enabled: true };
  } else if (given(level)) {
    if (typeof level !== "string") reject(`${at}.thinkingLevel`, "must be a string");
    const effort = level.toLowerCase();
    if (effort === "low" || effort === "medium" || effort === "high" || effort === "minimal") chat.reasoning = { effort };
    else if (effort !== "thinking_level_unspecified") reject(`${at}.thinkingLevel`, "must be MINIMAL, LOW, MEDIUM or HIGH");
  }
  if (given(config.includeThoughts) && typeof config.includeThoughts !== "boolean") reject(`${at}.includeThoughts`, "must be a boolean");
  return config.includeThoughts === true;
}

function responseFormat(g: Json): Json | undefined {
  const mime = g.responseMimeType;
  const hasSchema = given(g.responseSchema) || given(g.responseJsonSchema);
  if (given(g.responseSchema) && given(g.responseJsonSchema)) reject("generationConfig.responseJsonSchema", "set responseSchema or responseJsonSchema, not both");
  if (!given(mime) || mime === "text/plain") {
    if (hasSchema) reject("generationConfig.responseMimeType", "a response schema needs responseMimeType 'application/json'");
    return undefined;
  }
  if (mime !== "application/json") reject("generationConfig.responseMimeType", `must be 'text/plain' or 'application/json', not '${String(mime)}'`);
  if (!hasSchema) return { type: "json_object" };
  let schema: Json;
  if (given(g.responseJsonSchema)) {
    if (!isObject(g.responseJsonSchema)) reject("generationConfig.responseJsonSchema", "must be a JSON Schema object");
    schema = g.responseJsonSchema;
  } else schema = jsonSchemaOf(g.responseSchema, "generationConfig.responseSchema");
  // Not strict: OpenAI's strict mode refuses a schema unless every property is required and additionalProperties is false, which Gemini's schemas seldom say.
  return { type: "json_schema", json_schema: { name: "response", schema, strict: false } };
}

function applyGenerationConfig(config: unknown, chat: Json): boolean {
  if (!given(config)) return false;
  const at = "generationConfig";
  if (!isObject(config)) reject(at, "must be an object");
  rejectUnknown(config, generationFields, at);
  const g = config;
  const numeric: Array<[string, string]> = [
    ["temperature", "temperature"],
    ["topP", "top_p"],
    ["topK", "top_k"],
    ["maxOutputTokens", "max_tokens"],
    ["seed", "seed"],
    ["presencePenalty", "presence_penalty"],
    ["frequencyPenalty", "frequency_penalty"],
  ];
  for (const [field, key] of numeric) {
    if (!given(g[field])) continue;
    if (typeof g[field] !== "number") reject(`${at}.${field}`, "must be a number");
    chat[key] = g[field];
  }
  if (given(g.candidateCount) && g.candidateCount !== 1) reject(`${at}.candidateCount`, "only 1 candidate is supported");
  if (given(g.stopSequences)) {
    if (!Array.isArray(g.stopSequences) || !g.stopSequences.every((s) => typeof s === "string")) reject(`${at}.stopSequences`, "must be an array of strings");
    if (g.stopSequences.length > 0) chat.stop = g.stopSequences;
  }
  const format = responseFormat(g);
  if (format) chat.response_format = format;
  if (given(g.responseModalities)) {
    const m = g.responseModalities;
    if (!Array.isArray(m) || m.some((x) => typeof x !== "string" || x.toUpperCase() !== "TEXT")) reject(`${at}.responseModalities`, "only TEXT answers are available on these backends");
  }
  // Audio and image output change what the answer is: no chat backend here makes them.
  if (given(g.speechConfig)) reject(`${at}.speechConfig`, "audio answers are not available on these backends");
  if (given(g.imageConfig)) reject(`${at}.imageConfig`, "image answers are not available on these backends");
  // Inert: mediaResolution only changes how many tokens Gemini spends on an input image;
  // enableEnhancedCivicAnswers is a Gemini-side answer policy no backend here has.
  if (g.responseLogprobs === true) {
    chat.logprobs = true;
    if (given(g.logprobs)) {
      if (typeof g.logprobs !== "number" || !Number.isInteger(g.logprobs) || g.logprobs < 0) reject(`${at}.logprobs`, "must be a non-negative integer");
      if (g.logprobs > 0) chat.top_logprobs = g.logprobs;
    }
  } else if (given(g.logprobs)) reject(`${at}.logprobs`, "needs responseLogprobs: true");
  return chatReasoning(g.thinkingConfig, chat);
}

// ---------------------------------------------------------------- request

/**
 * The GenerateContentRequest fields Switchyard reads. `model` is the path's
 * (the body's, when sent, is not read); `safetySettings` is taken and inert
 * (no backend here filters by harm category, so there is nothing to loosen
 * or tighten); `labels` (Vertex billing labels) is inert; `cachedContent`
 * is refused below.
 */
const requestFields = new Set(["model", "contents", "systemInstruction", "tools", "toolConfig", "generationConfig", "safetySettings", "cachedContent", "labels"]);

/**
 * The chat body for a Gemini GenerateContentRequest for `model`; whether the
 * answer shows thoughts (thinkingConfig.includeThoughts); and the backend
 * features it needs (images), for the route to narrow the chain by.
 */
export function toChatRequest(body: Json, model: string, stream: boolean): { chat: Json & { model: string }; includeThoughts: boolean; needs: NeededFeature[] } {
  rejectUnknown(body, requestFields, "");
  if (given(body.cachedContent)) reject("cachedContent", "cached contents are not available on Switchyard; send the contents");
  if (given(body.safetySettings) && !Array.isArray(body.safetySettings)) reject("safetySettings", "must be an array");
  const needs: NeededFeature[] = [];
  const system = systemMessage(body.systemInstruction);
  const messages = [...(system ? [system] : []), ...contentMessages(body.contents, needs)];
  const chat: Json & { model: string } = { model, messages };
  if (stream) {
    chat.stream = true;
    // The last chunk's usageMetadata.
    chat.stream_options = { include_usage: true };
  }
  const tools = chatTools(body.tools);
  const choice = chatToolChoice(body.toolConfig);
  if (tools.length > 0) {
    chat.tools = tools;
    if (choice !== undefined) chat.tool_choice = choice;
  }
  const includeThoughts = applyGenerationConfig(body.generationConfig, chat);
  return { chat, includeThoughts, needs };
}

/** The fields of a chat body that make its prompt: what countTokens counts. */
const promptFields = ["messages", "tools", "tool_choice"] as const;

/**
 * The chat body a `:countTokens` request's run would send, prompt only:
 * `{contents}` alone, or a whole `{generateContentRequest}` (its errors
 * named under `generateContentRequest.`), with the same 400s as a run.
 */
export function toCountChatRequest(body: Json, model: string): Json & { model: string } {
  rejectUnknown(body, new Set(["model", "contents", "generateContentRequest"]), "");
  if (given(body.contents) && given(body.generateContentRequest)) reject("generateContentRequest", "send contents or generateContentRequest, not both");
  let chat: Json & { model: string };
  if (given(body.generateContentRequest)) {
    const inner = body.generateContentRequest;
    if (!isObject(inner)) reject("generateContentRequest", "must be an object");
    try {
      chat = toChatRequest(inner, model, false).chat;
    } catch (err) {
      if (!(err instanceof ApiError) || err.param === null) throw err;
      throw new ApiError(err.code, `generateContentRequest.${err.message}`, `generateContentRequest.${err.param}`, err.headers);
    }
  } else chat = toChatRequest({ contents: body.contents }, model, false).chat;
  const prompt: Json & { model: string } = { model };
  for (const k of promptFields) if (chat[k] !== undefined) prompt[k] = chat[k];
  return prompt;
}
