// Tool namespaces (a Responses `tools` entry of type "namespace": function
// tools grouped under a name, called back as a function_call with a
// `namespace`; Codex CLI sends its sub-agent tools so). Chat tools have no
// namespaces: a namespaced function runs as the chat function
// `<namespace>__<name>`, and a call of one comes back split again. The
// stored conversation keeps the chat names, which the next turn's tools
// flatten to the same.
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";

/** Between a namespace and its function's name in the chat function's name. */
export const NAMESPACE_SEPARATOR = "__";

/** A tool or namespace name every backend's function names allow (OpenAI's and Anthropic's rule), once joined. */
const NAME = /^[a-zA-Z0-9_-]+$/;
const MAX_CHAT_NAME = 64;

/** A function call's Responses name, and its namespace when it has one. */
export interface CallName {
  name: string;
  namespace?: string;
}

/** The chat function name of `name` in `namespace` (the name itself without one). */
export function chatToolName(name: string, namespace: string | undefined): string {
  return namespace === undefined ? name : `${namespace}${NAMESPACE_SEPARATOR}${name}`;
}

/**
 * A namespace tool's functions as chat tools, each named chatToolName's way
 * (the namespace's description ahead of the function's, the one place chat
 * has for it); `at` is the tool's place for the 400s.
 */
export function namespaceTools(ns: Json, at: string, chatTool: (t: Json, at: string, name: string, lead: string | undefined) => Json): Json[] {
  if (typeof ns.name !== "string" || !NAME.test(ns.name)) reject(`${at}.name`, "a namespace's name is required: letters, digits, '_' and '-'");
  if (!Array.isArray(ns.tools) || ns.tools.length === 0) reject(`${at}.tools`, "a namespace holds at least one function tool");
  const lead = typeof ns.description === "string" && ns.description !== "" ? ns.description : undefined;
  return ns.tools.map((t, j) => {
    const where = `${at}.tools[${j}]`;
    if (!isObject(t) || t.type !== "function") reject(`${where}.type`, `only function tools are supported in a namespace (got '${String(isObject(t) ? t.type : t)}')`);
    if (typeof t.name !== "string" || !NAME.test(t.name)) reject(`${where}.name`, "is required: letters, digits, '_' and '-'");
    const name = chatToolName(t.name, ns.name as string);
    if (name.length > MAX_CHAT_NAME) reject(`${where}.name`, `'${name}' (the namespace and the name) is longer than ${MAX_CHAT_NAME} characters`);
    return chatTool(t, where, name, lead);
  });
}

/**
 * The request's namespaced functions by chat name, for splitting the
 * answer's calls (undefined when it has none: most requests).
 */
export function namespacedNames(tools: unknown): Map<string, CallName> | undefined {
  if (!Array.isArray(tools)) return undefined;
  let out: Map<string, CallName> | undefined;
  for (const t of tools) {
    if (!isObject(t) || t.type !== "namespace" || typeof t.name !== "string" || !Array.isArray(t.tools)) continue;
    for (const f of t.tools) {
      if (isObject(f) && typeof f.name === "string") (out ??= new Map()).set(chatToolName(f.name, t.name), { name: f.name, namespace: t.name });
    }
  }
  return out;
}

/** A call's Responses name from the chat name it came back as. */
export function callName(chatName: string, names: Map<string, CallName> | undefined): CallName {
  return names?.get(chatName) ?? { name: chatName };
}

function reject(param: string, message: string): never {
  throw new ApiError("invalid_request", `${param}: ${message}`, param);
}
