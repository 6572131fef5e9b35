// Chat answers → Gemini's GenerateContentResponse (generativelanguage
// v1beta), shared by the whole answer and the stream translator: parts,
// finishReason, usageMetadata; and Google's error shape with its canonical
// status names.
import { isObject, type Json } from "../boundary.ts";
import { mintThoughtSignature } from "./signature.ts";

/** What of the request shapes its answer. */
export interface GeminiAnswerShape {
  /** generationConfig.thinkingConfig.includeThoughts: whether the reasoning text is shown as thought parts. */
  includeThoughts: boolean;
  responseId: string;
}

/** Google's canonical status name for an HTTP status (google.rpc.Code, as its JSON errors spell it). */
const statusNames: Record<number, string> = {
  400: "INVALID_ARGUMENT",
  401: "UNAUTHENTICATED",
  402: "FAILED_PRECONDITION",
  403: "PERMISSION_DENIED",
  404: "NOT_FOUND",
  409: "ABORTED",
  413: "INVALID_ARGUMENT",
  429: "RESOURCE_EXHAUSTED",
  499: "CANCELLED",
  500: "INTERNAL",
  501: "UNIMPLEMENTED",
  502: "UNAVAILABLE",
  503: "UNAVAILABLE",
  504: "DEADLINE_EXCEEDED",
};

export function geminiStatus(httpStatus: number): string {
  if (Object.hasOwn(statusNames, httpStatus)) return statusNames[httpStatus]!;
  return httpStatus >= 400 && httpStatus < 500 ? "FAILED_PRECONDITION" : "INTERNAL";
}

/** `{"error":{code,message,status}}`, Google's one error shape (@google/genai raises by `code`). */
export function geminiErrorBody(httpStatus: number, message: string): Json {
  return { error: { code: httpStatus, message, status: geminiStatus(httpStatus) } };
}

/**
 * Chat finish_reason → Gemini's finishReason. Gemini reports an answer that
 * ends in function calls with STOP. No finish_reason at all (a backend that
 * names none) is STOP: the answer came whole, since a stream cut short fails
 * instead of ending; a reason Gemini has no name for is OTHER.
 */
export function finishReason(finish: unknown): string {
  switch (finish) {
    case undefined:
    case null:
    case "stop":
    case "tool_calls":
    case "function_call":
      return "STOP";
    case "length":
      return "MAX_TOKENS";
    case "content_filter":
      return "SAFETY";
    default:
      return "OTHER";
  }
}

/**
 * The finishReason of an answer some of whose calls were dropped
 * (callArgs): the limit cut the last one (MAX_TOKENS, from `finish`
 * already), else the model wrote arguments that are not a JSON object —
 * MALFORMED_FUNCTION_CALL, Gemini's own reason for exactly that.
 */
export function finishWithCalls(finish: unknown, dropped: boolean): string {
  const reason = finishReason(finish);
  return dropped && reason !== "MAX_TOKENS" ? "MALFORMED_FUNCTION_CALL" : reason;
}

/**
 * A tool call's arguments as Gemini's `args` object; undefined when they are
 * not one (unfinished JSON from a call the output limit cut, or a model's
 * malformed JSON). Such a call is not sent: Gemini never returns a partial
 * call, and a client would run it with arguments the model did not give
 * (`{}`) — with no status on a part to say it is unfinished, leaving it out
 * is the only way to keep it from running. The finishReason says why
 * (finishWithCalls). Empty arguments are a call with none.
 */
export function callArgs(args: unknown): Json | undefined {
  if (isObject(args)) return args;
  if (args === undefined || args === null || (typeof args === "string" && args.trim() === "")) return {};
  if (typeof args !== "string") return undefined;
  try {
    const v = JSON.parse(args) as unknown;
    return isObject(v) ? v : undefined;
  } catch {
    return undefined;
  }
}

/** A functionCall part (the chat call's id as Gemini's optional `id`, which a client echoes on its functionResponse). */
export function functionCallPart(id: string, name: string, args: Json): Json {
  return { functionCall: id === "" ? { name, args } : { id, name, args } };
}

const count = (v: unknown) => (typeof v === "number" && Number.isFinite(v) && v > 0 ? Math.floor(v) : 0);

/**
 * Chat usage → usageMetadata. Gemini counts thinking apart from the answer
 * (candidatesTokenCount excludes thoughtsTokenCount; the total has both);
 * the optional counts are left out when zero, as Gemini does. No usage
 * reads as zeros (the ledger bills an estimate and says so).
 */
export function usageMetadata(reported: unknown): Json {
  const u = isObject(reported) ? reported : {};
  const prompt = count(u.prompt_tokens);
  const completion = count(u.completion_tokens);
  const thoughts = Math.min(completion, count(isObject(u.completion_tokens_details) ? u.completion_tokens_details.reasoning_tokens : undefined));
  const cached = count(isObject(u.prompt_tokens_details) ? u.prompt_tokens_details.cached_tokens : undefined);
  return {
    promptTokenCount: prompt,
    candidatesTokenCount: completion - thoughts,
    ...(thoughts > 0 ? { thoughtsTokenCount: thoughts } : {}),
    ...(cached > 0 ? { cachedContentTokenCount: cached } : {}),
    totalTokenCount: prompt + completion,
  };
}

/** One GenerateContentResponse (a whole answer, or one stream frame's). */
export function envelope(parts: Json[], model: string, responseId: string, end?: { finishReason: string; usageMetadata: Json }): Json {
  const candidate: Json = { content: { role: "model", parts }, index: 0 };
  if (end) candidate.finishReason = end.finishReason;
  return { candidates: [candidate], ...(end ? { usageMetadata: end.usageMetadata } : {}), modelVersion: model, responseId };
}

/**
 * A whole chat.completion as a GenerateContentResponse, named as the client
 * named the model: the reasoning as a thought part (when asked for), the
 * answer's text, then one functionCall part per call.
 */
export function responseFromCompletion(completion: Json, model: string, opts: GeminiAnswerShape): Json {
  const choice = Array.isArray(completion.choices) && isObject(completion.choices[0]) ? completion.choices[0] : {};
  const message = isObject(choice.message) ? choice.message : {};
  const parts: Json[] = [];
  const reasoning = typeof message.reasoning === "string" ? message.reasoning : "";
  if (opts.includeThoughts && reasoning !== "") parts.push({ text: reasoning, thought: true });
  const text = typeof message.content === "string" ? message.content : "";
  const textAt = text === "" ? -1 : parts.push({ text }) - 1;
  let firstCall = -1;
  let dropped = false;
  for (const c of Array.isArray(message.tool_calls) ? message.tool_calls.filter(isObject) : []) {
    const fn = isObject(c.function) ? c.function : {};
    const args = callArgs(fn.arguments);
    if (!args) {
      dropped = true;
      continue;
    }
    const at = parts.push(functionCallPart(typeof c.id === "string" ? c.id : "", String(fn.name ?? ""), args)) - 1;
    if (firstCall < 0) firstCall = at;
  }
  const details = Array.isArray(message.reasoning_details) ? message.reasoning_details.filter(isObject) : [];
  if (details.length > 0) {
    // Gemini puts the signature on the part that follows its thinking — the
    // first call's, else the answer's first text — and Gemini CLI keeps each
    // part with its signature in the history it sends back; so it goes there
    // whether or not thoughts are shown (a thought part the client may drop
    // would lose it), else on an empty text part of its own.
    const at = firstCall >= 0 ? firstCall : textAt;
    const thoughtSignature = mintThoughtSignature(details);
    if (at >= 0) parts[at]!.thoughtSignature = thoughtSignature;
    else parts.push({ text: "", thoughtSignature });
  }
  // Clients read candidates[0].content.parts: an answer with nothing in it still has one part.
  if (parts.length === 0) parts.push({ text: "" });
  return envelope(parts, model, opts.responseId, { finishReason: finishWithCalls(choice.finish_reason, dropped), usageMetadata: usageMetadata(completion.usage) });
}
