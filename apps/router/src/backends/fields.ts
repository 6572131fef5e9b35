// The request fields each kind of backend honours, translates or refuses:
// one catalogue (what a field is, when a body asks for it) and each backend
// folder's own declaration of what it does with it (worker/fields.ts, and
// <provider>/fields.ts, which its provider.ts declares). Dispatch passes
// over a backend that refuses a field the body asks for; when no candidate
// can honour it the client gets a 400 naming the field, never a 200 that
// quietly dropped it. The README's field table is rendered from here
// (renderFieldTable) and a test holds it equal.
import type { InferencePath } from "./types.ts";
import { providerRegistry, type ProviderKey } from "./registry.ts";
import { workerChecksItself, workerFields } from "./worker/fields.ts";

/**
 * honoured: sent on and done as asked · translated: done as asked through
 * the upstream's own equivalent · per model: honoured where the worker's
 * model can (its tokenizer has FIM tokens, it was trained for truncated
 * embeddings, it reads images), refused otherwise by the worker ·
 * refused: 400 naming the field · unserved: the backend has no such route.
 */
export type Support = "honoured" | "translated" | "per model" | "refused" | "unserved";

type Json = Record<string, unknown>;
type Route = "chat" | "completions" | "embeddings";

export interface RequestField {
  /** How the README names it. */
  readonly label: string;
  readonly routes: readonly Route[];
  /** The param to name when this body asks for it (a value other than the default), else undefined. */
  asks(body: Json, route: Route): string | undefined;
  /** A body fragment that asks for it, for the tests that hold each backend to its declaration. */
  readonly sample: Json;
  /** The body keys it covers (the sample's, when not given). */
  readonly keys?: readonly string[];
  /** The sample where a route spells the field otherwise. */
  readonly samples?: Partial<Record<Route, Json>>;
  /** Why it is refused, where "cannot be honoured" would mislead. */
  readonly refusal?: string;
}

/** The body fragment that asks for `field` on `route`. */
export const sampleOf = (field: RequestField, route: Route): Json => field.samples?.[route] ?? field.sample;

const gen: readonly Route[] = ["chat", "completions"];
const num = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);
const when = (cond: boolean, param: string) => (cond ? param : undefined);
const isObj = (v: unknown): v is Json => typeof v === "object" && v !== null && !Array.isArray(v);
const isTokenArray = (v: unknown) => Array.isArray(v) && v.length > 0 && (v.every((t) => typeof t === "number") || v.every((t) => Array.isArray(t) && t.every((x) => typeof x === "number")));

/** The first content part of `type` among the messages, as its param path. */
function part(body: Json, types: readonly string[]): string | undefined {
  if (!Array.isArray(body.messages)) return undefined;
  for (const [i, m] of body.messages.entries()) {
    if (!isObj(m) || !Array.isArray(m.content)) continue;
    for (const [j, p] of m.content.entries()) if (isObj(p) && types.includes(String(p.type))) return `messages[${i}].content[${j}]`;
  }
  return undefined;
}

const all: readonly Route[] = ["chat", "completions", "embeddings"];

/** OpenRouter's own fields that choose another model or add fees. */
const otherModelKeys = ["models", "route", "plugins", "web_search_options"] as const;
const cheapOrNarrowing = new Set(["data_collection", "zdr", "require_parameters", "allow_fallbacks", "max_price"]);
/**
 * OpenRouter's provider preferences that neither pick another model nor a
 * dearer provider of it: they only narrow (privacy, parameters, fallbacks,
 * a price ceiling) or sort by price. Anything else in `provider` (order,
 * only, ignore, quantizations, sort by throughput) lets a tenant choose what
 * OpenRouter bills, above the price its hold was taken at. Returns the
 * first such key as its param path.
 */
function providerChoice(p: Json): string | undefined {
  for (const k of Object.keys(p)) {
    if (cheapOrNarrowing.has(k) || (k === "sort" && p.sort === "price")) continue;
    return `provider.${k}`;
  }
  return undefined;
}

/** A function tool for the tool rows' samples. */
const sampleTool = { type: "function", function: { name: "get_weather", description: "The weather in a city", parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] } } };

export const requestFields = {
  temperature: { label: "temperature", routes: gen, asks: (b) => when(num(b.temperature), "temperature"), sample: { temperature: 0.5 } },
  top_p: { label: "top_p", routes: gen, asks: (b) => when(num(b.top_p) && b.top_p < 1, "top_p"), sample: { top_p: 0.9 } },
  max_tokens: {
    label: "max_tokens / max_completion_tokens",
    routes: gen,
    asks: (b) => (num(b.max_tokens) ? "max_tokens" : num(b.max_completion_tokens) ? "max_completion_tokens" : undefined),
    sample: { max_tokens: 3 },
    keys: ["max_tokens", "max_completion_tokens"],
  },
  stop: { label: "stop", routes: gen, asks: (b) => when(typeof b.stop === "string" || (Array.isArray(b.stop) && b.stop.length > 0), "stop"), sample: { stop: ["\n\n\n"] } },
  stream: { label: "stream, stream_options.include_usage", routes: gen, asks: (b) => when(b.stream === true, "stream"), sample: { stream: true, stream_options: { include_usage: true } } },
  seed: { label: "seed", routes: gen, asks: (b) => when(num(b.seed), "seed"), sample: { seed: 7 } },
  n: { label: "n (up to 8)", routes: gen, asks: (b) => when(num(b.n) && b.n > 1, "n"), sample: { n: 2 } },
  logprobs: {
    label: "logprobs, top_logprobs",
    routes: gen,
    asks: (b) => (b.logprobs === true || num(b.logprobs) ? "logprobs" : num(b.top_logprobs) && b.top_logprobs > 0 ? "top_logprobs" : undefined),
    sample: { logprobs: true },
    samples: { completions: { logprobs: 2 } },
    keys: ["logprobs", "top_logprobs"],
  },
  logit_bias: { label: "logit_bias", routes: gen, asks: (b) => when(isObj(b.logit_bias) && Object.keys(b.logit_bias).length > 0, "logit_bias"), sample: { logit_bias: { "42": 1 } } },
  frequency_penalty: { label: "frequency_penalty", routes: gen, asks: (b) => when(num(b.frequency_penalty) && b.frequency_penalty !== 0, "frequency_penalty"), sample: { frequency_penalty: 0.5 } },
  presence_penalty: { label: "presence_penalty", routes: gen, asks: (b) => when(num(b.presence_penalty) && b.presence_penalty !== 0, "presence_penalty"), sample: { presence_penalty: 0.5 } },
  top_k: { label: "top_k (extension)", routes: gen, asks: (b) => when(num(b.top_k) && b.top_k > 0, "top_k"), sample: { top_k: 40 } },
  min_p: { label: "min_p (extension)", routes: gen, asks: (b) => when(num(b.min_p) && b.min_p > 0, "min_p"), sample: { min_p: 0.05 } },
  repetition_penalty: {
    label: "repetition_penalty (extension)",
    routes: gen,
    asks: (b) => when(num(b.repetition_penalty) && b.repetition_penalty !== 1 && b.repetition_penalty !== 0, "repetition_penalty"),
    sample: { repetition_penalty: 1.1 },
  },
  response_format: {
    label: "response_format json_object / json_schema",
    routes: ["chat"],
    asks: (b) => when(isObj(b.response_format) && b.response_format.type !== "text", "response_format"),
    sample: { response_format: { type: "json_object" } },
  },
  tools: { label: "tools (function)", routes: ["chat"], asks: (b) => when(Array.isArray(b.tools) && b.tools.length > 0, "tools"), sample: { tools: [sampleTool] } },
  tool_choice: { label: "tool_choice", routes: ["chat"], asks: (b) => when(b.tool_choice != null, "tool_choice"), sample: { tools: [sampleTool], tool_choice: "required" }, keys: ["tool_choice"] },
  parallel_tool_calls: {
    label: "parallel_tool_calls false",
    routes: ["chat"],
    asks: (b) => when(b.parallel_tool_calls === false, "parallel_tool_calls"),
    sample: { tools: [sampleTool], parallel_tool_calls: false },
    keys: ["parallel_tool_calls"],
  },
  image_parts: { label: "image_url content parts", routes: ["chat"], asks: (b) => part(b, ["image_url"]), sample: { messages: [{ role: "user", content: [{ type: "text", text: "What is this?" }, { type: "image_url", image_url: { url: "data:image/png;base64,iVBORw0KGgo=" } }] }] } },
  audio_parts: { label: "input_audio / file content parts", routes: ["chat"], asks: (b) => part(b, ["input_audio", "file"]), sample: { messages: [{ role: "user", content: [{ type: "input_audio", input_audio: { data: "UklGRg==", format: "wav" } }] }] } },
  modalities: {
    label: "modalities (other than text), audio",
    routes: ["chat"],
    asks: (b) => (b.audio != null ? "audio" : Array.isArray(b.modalities) && b.modalities.some((m) => m !== "text") ? "modalities" : undefined),
    sample: { modalities: ["text", "audio"] },
    keys: ["modalities", "audio"],
  },
  reasoning_effort: {
    label: "reasoning_effort (/v1/responses: reasoning.effort)",
    routes: ["chat"],
    asks: (b) => when(typeof b.reasoning_effort === "string" && b.reasoning_effort !== "none", "reasoning_effort"),
    // Its max_tokens (here and in reasoning's) leaves room for the thinking budget, which Anthropic needs below max_tokens.
    sample: { reasoning_effort: "low", max_tokens: 4096 },
    keys: ["reasoning_effort"],
  },
  // OpenRouter's reasoning object (effort, max_tokens, exclude, enabled); enabled: false or effort "none" asks nothing.
  reasoning: {
    label: "reasoning (OpenRouter's object; /v1/messages: thinking)",
    routes: ["chat"],
    asks: (b) => when(isObj(b.reasoning) && b.reasoning.enabled !== false && b.reasoning.effort !== "none", "reasoning"),
    sample: { reasoning: { max_tokens: 2048 }, max_tokens: 4096 },
    keys: ["reasoning"],
  },
  // OpenAI's GPT-5 verbosity; "medium" is its default, so asking it changes nothing.
  verbosity: {
    label: "verbosity (/v1/responses: text.verbosity)",
    routes: ["chat"],
    asks: (b) => when(typeof b.verbosity === "string" && b.verbosity !== "medium", "verbosity"),
    sample: { verbosity: "low" },
  },
  echo: { label: "echo", routes: ["completions"], asks: (b) => when(b.echo === true, "echo"), sample: { echo: true } },
  best_of: { label: "best_of", routes: ["completions"], asks: (b) => when(num(b.best_of) && b.best_of > 1, "best_of"), sample: { best_of: 2 } },
  suffix: { label: "suffix", routes: ["completions"], asks: (b) => when(typeof b.suffix === "string" && b.suffix !== "", "suffix"), sample: { suffix: " return x" } },
  prompt_tokens: { label: "prompt as token ids", routes: ["completions"], asks: (b) => when(isTokenArray(b.prompt), "prompt"), sample: { prompt: [504, 3458, 282] } },
  prompt_list: { label: "prompt as a list of prompts", routes: ["completions"], asks: (b) => when(Array.isArray(b.prompt) && b.prompt.length > 1 && b.prompt.every((p) => typeof p === "string"), "prompt"), sample: { prompt: ["Hello", "Goodbye"] } },
  dimensions: { label: "dimensions", routes: ["embeddings"], asks: (b) => when(num(b.dimensions), "dimensions"), sample: { dimensions: 128 } },
  encoding_format: { label: "encoding_format base64", routes: ["embeddings"], asks: (b) => when(b.encoding_format === "base64", "encoding_format"), sample: { encoding_format: "base64" } },
  input_tokens: { label: "input as token ids", routes: ["embeddings"], asks: (b) => when(isTokenArray(b.input), "input"), sample: { input: [[101, 7592, 2088, 102]] } },
  provider_preferences: {
    label: "provider (data_collection, zdr, require_parameters, allow_fallbacks, max_price, sort: price)",
    routes: all,
    asks: (b) => when(isObj(b.provider) && providerChoice(b.provider) === undefined, "provider"),
    sample: { provider: { data_collection: "deny" } },
    keys: ["provider"],
  },
  other_model: {
    label: "models, route, plugins, web_search_options, provider's other keys (order, only, ignore, sort, …)",
    routes: all,
    asks: (b) => (isObj(b.provider) ? providerChoice(b.provider) : undefined) ?? otherModelKeys.find((k) => b[k] != null),
    sample: { models: ["openai/gpt-4o"] },
    keys: otherModelKeys,
    refusal: "refused: it lets the provider bill for another model or added fees, past the price the tenant's budget held",
  },
  unknown: {
    label: "fields outside this table",
    routes: all,
    asks: (b, route) => Object.keys(b).find((k) => !knownKeys(route).has(k)),
    sample: { best_answer_only: true },
    keys: [],
  },
} satisfies Record<string, RequestField>;

export type FieldName = keyof typeof requestFields;

/** What one kind of backend does with each field: declared in its own folder. */
export type FieldSupport = Record<FieldName, Support>;

/**
 * Keys no row covers that are not "unknown" either: the inputs themselves,
 * fields that do not change the answer (attribution, storage, priority
 * hints) and the router's own fields to its workers.
 */
const inputs: Record<Route, readonly string[]> = { chat: ["messages"], completions: ["prompt"], embeddings: ["input"] };
export const inert = ["model", "user", "metadata", "store", "service_tier", "prompt_cache_key", "safety_identifier"] as const;
const internal = ["switchyard_prefix", "switchyard_cache_scope", "continue_final_message", "add_generation_prompt"];
function known(route: Route): Set<string> {
  const covered = Object.values(requestFields as Record<string, RequestField>)
    .filter((f) => f.routes.includes(route))
    .flatMap((f) => f.keys ?? Object.keys(f.sample));
  const extra = route === "embeddings" ? [] : internal;
  return new Set([...inputs[route], ...inert, ...extra, ...covered]);
}
let knownCache: Record<Route, Set<string>> | undefined;
const knownKeys = (route: Route) => (knownCache ??= { chat: known("chat"), completions: known("completions"), embeddings: known("embeddings") })[route];

export type DeclaredKind = "worker" | ProviderKey;

/** Each backend kind's declaration, in the README's column order: workers, then the providers in registry order. */
export const fieldSupport: Readonly<Record<DeclaredKind, FieldSupport>> = {
  worker: workerFields,
  ...(Object.fromEntries(providerRegistry.map((p) => [p.key, p.fields])) as Record<ProviderKey, FieldSupport>),
};

/** Refusals a kind's backends make themselves (answering 400 naming the field), so dispatch leaves them be. */
const checkedUpstream: Partial<Record<string, readonly FieldName[]>> = { worker: workerChecksItself };

const routeOf: Partial<Record<InferencePath, Route>> = { "/v1/chat/completions": "chat", "/v1/completions": "completions", "/v1/embeddings": "embeddings" };

/** The first field this body asks for that `kind` refuses, with the 400's message. */
export function refusedField(kind: string, path: InferencePath, body: Json): { param: string; message: string } | undefined {
  const checks = refusalChecks(kind, path);
  if (!checks) return undefined;
  for (const { name, f, route } of checks) {
    const param = f.asks(body, route);
    if (param === undefined) continue;
    const by = kind === "worker" ? "self-hosted workers" : kind;
    if (f.refusal) return { param, message: `${param}: ${f.refusal} (${by})` };
    const what = name === "unknown" ? `'${param}' is not a field Switchyard knows; it would be ignored` : `${f.label} cannot be honoured`;
    return { param, message: `${param}: ${what} by ${by}` };
  }
  return undefined;
}

type RefusalCheck = { name: FieldName; f: RequestField; route: Route };
/** The fields a backend kind refuses on a route, listed once per (kind, path): every request runs this check on every candidate. */
const refusalLists = new Map<string, RefusalCheck[] | null>();

function refusalChecks(kind: string, path: InferencePath): RefusalCheck[] | null {
  const key = `${kind} ${path}`;
  let list = refusalLists.get(key);
  if (list === undefined) {
    const route = routeOf[path];
    const support = (fieldSupport as Record<string, FieldSupport>)[kind];
    list = null;
    if (route && support) {
      list = [];
      for (const [name, f] of Object.entries(requestFields) as Array<[FieldName, RequestField]>) {
        if (!f.routes.includes(route) || support[name] !== "refused" || checkedUpstream[kind]?.includes(name)) continue;
        list.push({ name, f, route });
      }
    }
    refusalLists.set(key, list);
  }
  return list;
}

/** The README table: one row per field, one column per backend kind. */
export function renderFieldTable(): string {
  const kinds = Object.keys(fieldSupport) as DeclaredKind[];
  const rows = (Object.entries(requestFields) as Array<[FieldName, RequestField]>).map(
    ([name, f]) => `| ${f.label} | ${f.routes.join(", ")} | ${kinds.map((k) => (fieldSupport[k][name] === "unserved" ? "—" : fieldSupport[k][name])).join(" | ")} |`,
  );
  return [`| field | routes | ${kinds.join(" | ")} |`, `|---|---|${kinds.map(() => "---|").join("")}`, ...rows].join("\n");
}
