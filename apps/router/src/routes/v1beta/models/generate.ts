// POST /v1beta/models/{model}:generateContent, :streamGenerateContent,
// :countTokens, :embedContent and :batchEmbedContents — Google's Gemini API
// inbound, so code written for Gemini
// (@google/genai, Gemini CLI with GOOGLE_GEMINI_BASE_URL) runs on any
// backend: a Switchyard key in x-goog-api-key, ?key= or Authorization: Bearer,
// the request translated to a chat request at one boundary
// (translate/gemini/) and run through the same pipeline, budgets and ledger
// as /v1/chat/completions (embeddings: as /v1/embeddings); a count goes
// where the same request would run (pipeline/count.ts). Errors leave in
// Google's shape.
//
// The model and the method share the last path segment (`gemini-2.5-flash:
// generateContent`), as Google's paths do; a model named vendor/model
// (OpenRouter's) takes two segments, as @google/genai writes it unescaped.
import type { Context, MiddlewareHandler } from "hono";
import * as z from "zod";
import type { AppDeps, AppEnv } from "../../../deps.ts";
import type { RouteTable } from "../../../route-table.ts";
import { ApiError, toApiError } from "../../../errors.ts";
import { authenticate, jsonBody } from "../../../middleware.ts";
import { countHeaders, countPrompt, type PromptCount } from "../../../pipeline/count.ts";
import { handleInference, type InferenceBody } from "../../../pipeline/inference.ts";
import { clientParam, runTranslated, type Json } from "../../../translate/boundary.ts";
import { embedAnswer, embedParamsOfGemini, toEmbeddingsRequest, type EmbedMethod } from "../../../translate/gemini/embed.ts";
import { chatParamsOfGemini, toChatRequest, toCountChatRequest } from "../../../translate/gemini/request.ts";
import { geminiErrorBody, responseFromCompletion } from "../../../translate/gemini/response.ts";
import { GeminiStreamTranslator } from "../../../translate/gemini/stream.ts";
import { describeError } from "../../../translate/messages/response.ts";
import { embeddingsSchemaFor } from "../../v1/embeddings/create.ts";
import { narrowByFeatures } from "../../v1/messages/create.ts";
import { documented } from "../../../openapi/marks.ts";
import { completionAnswer, inferenceErrors } from "../../../openapi/common.ts";

/** Google's error body, these routes' one error shape. */
export const geminiErrorSchema = z.object({ error: z.object({ code: z.number().int(), message: z.string(), status: z.string() }) });

/** The answer's documented shape (GenerateContentResponse; streamed, one per SSE `data:`; a count is {totalTokens}). */
export const geminiAnswer = z.looseObject({
  candidates: z.array(z.looseObject({ content: z.looseObject({ role: z.string(), parts: z.array(z.looseObject({})) }) })).optional(),
  totalTokens: z.number().int().optional(),
  embedding: z.looseObject({ values: z.array(z.number()) }).optional(),
  embeddings: z.array(z.looseObject({ values: z.array(z.number()) })).optional(),
});

const part = z.looseObject({});
const content = z.looseObject({ role: z.string().optional(), parts: z.array(part) });

/**
 * GenerateContentRequest as far as the routes read it (translate/gemini/
 * request.ts checks each field's inside and refuses what no backend can
 * honour by name), and countTokens' `generateContentRequest`. Google refuses
 * an unknown field; so does Switchyard, naming it.
 */
const generateFields = {
  contents: z.array(content).optional(),
  systemInstruction: z.union([z.looseObject({ parts: z.array(part) }), z.string()]).optional(),
  tools: z.array(z.looseObject({})).optional(),
  toolConfig: z.looseObject({}).optional(),
  generationConfig: z.looseObject({}).optional(),
  safetySettings: z.array(z.looseObject({})).optional(),
  cachedContent: z.string().optional(),
  labels: z.record(z.string(), z.string()).optional(),
  // Google's name for the model inside a countTokens' generateContentRequest (the path names it).
  model: z.string().optional(),
};
/** EmbedContentRequest's fields, and batchEmbedContents' `requests` of them (translate/gemini/embed.ts checks each). */
const embedFields = {
  content: z.looseObject({ parts: z.array(part) }).optional(),
  taskType: z.string().optional(),
  title: z.string().optional(),
  outputDimensionality: z.number().int().positive().optional(),
  requests: z.array(z.looseObject({})).optional(),
};
export const generateContentSchema = z.object({ ...generateFields, ...embedFields, generateContentRequest: z.object(generateFields).optional() }).catchall(z.never());

type Method = "generateContent" | "streamGenerateContent" | "countTokens" | EmbedMethod;
const METHODS = new Set<string>(["generateContent", "streamGenerateContent", "countTokens", "embedContent", "batchEmbedContents"]);
const EMBED_ONLY = Object.keys(embedFields);
// `model` is both kinds' (a countTokens' generateContentRequest and a batch's requests name it).
const GENERATE_ONLY = [...Object.keys(generateFields).filter((k) => k !== "model"), "generateContentRequest"];

/** A field of the other kind of call (`content` on generateContent, `contents` on embedContent) is the 400 Google answers for an unknown name. */
function refuseOthers(body: Json, others: readonly string[], method: Method): void {
  for (const k of others) if (body[k] !== undefined) throw new ApiError("invalid_request", `${k}: ${method} does not take it`, k);
}

/** The model and method the path names: `models/{model}:{method}`, the model possibly vendor/model. */
function target(c: Context<AppEnv>): { model: string; method: Method } {
  const vendor = c.req.param("vendor");
  const last = c.req.param("target") ?? "";
  const colon = last.lastIndexOf(":");
  const method = colon < 0 ? "" : last.slice(colon + 1);
  const name = colon < 0 ? last : last.slice(0, colon);
  if (!METHODS.has(method) || name === "") {
    throw new ApiError("not_found", `no method '${method}' for models/${vendor ? `${vendor}/` : ""}${name}: POST models/{model}:generateContent, :streamGenerateContent, :countTokens, :embedContent or :batchEmbedContents`);
  }
  return { model: vendor ? `${vendor}/${name}` : name, method: method as Method };
}

/**
 * Every error of these routes in Google's shape (`{"error":{code,message,
 * status}}`), whatever raised it: auth, body checks, admission, routing,
 * the upstream. The HTTP status and headers (Retry-After) stay.
 */
export const geminiErrors: MiddlewareHandler<AppEnv> = async (c, next) => {
  await next();
  if (!c.error) return;
  const { status, message } = describeError(toApiError(c.error));
  const headers = new Headers(c.res.headers);
  headers.set("content-type", "application/json");
  headers.delete("content-length");
  c.res = new Response(JSON.stringify(geminiErrorBody(status, message)), { status, headers });
};

async function generate(c: Context<AppEnv>, deps: AppDeps, model: string, body: Json, stream: boolean): Promise<Response> {
  const { chat, includeThoughts, needs } = toChatRequest(body, model, stream);
  // An image runs only where a backend takes images, as on /v1/messages; none left is the client's 400 naming the part.
  const narrow = narrowByFeatures(needs, model);
  const opts = { includeThoughts, responseId: c.get("requestId") };
  return runTranslated(
    c,
    deps,
    chat,
    {
      whole: async (completion) => responseFromCompletion(completion, model, opts),
      stream: () => new GeminiStreamTranslator(model, opts),
    },
    { params: chatParamsOfGemini, ...(narrow ? { narrow } : {}) },
  );
}

async function count(c: Context<AppEnv>, deps: AppDeps, model: string, body: Json): Promise<Response> {
  const chat = toCountChatRequest(body, model);
  let counted: PromptCount;
  try {
    counted = await countPrompt(c, deps, chat as InferenceBody);
  } catch (err) {
    throw clientParam(err, chatParamsOfGemini);
  }
  return c.json({ totalTokens: counted.tokens }, 200, countHeaders(counted));
}

/** An embed call run as /v1/embeddings (its limits, admission, budgets and ledger), answered in Gemini's shape. */
async function embed(c: Context<AppEnv>, deps: AppDeps, model: string, method: EmbedMethod, body: Json): Promise<Response> {
  const embeddings = toEmbeddingsRequest(method, body, model);
  const checked = embeddingsSchemaFor(deps.config.embeddings).safeParse(embeddings);
  if (!checked.success) {
    const where = method === "embedContent" ? "content" : "requests";
    throw new ApiError("invalid_request", `${where}: ${checked.error.issues[0]?.message ?? "invalid"}`, where);
  }
  let res: Response;
  try {
    res = await handleInference(c, deps, "/v1/embeddings", { body: embeddings as InferenceBody, detached: true });
  } catch (err) {
    throw clientParam(err, embedParamsOfGemini);
  }
  const headers = new Headers(res.headers);
  headers.delete("content-length");
  headers.set("content-type", "application/json");
  return new Response(JSON.stringify(embedAnswer(method, (await res.json()) as Json)), { status: res.status, headers });
}

export async function geminiModelCall(c: Context<AppEnv>, deps: AppDeps): Promise<Response> {
  const { model, method } = target(c);
  const body = c.get("body") as Json;
  if (method === "embedContent" || method === "batchEmbedContents") {
    refuseOthers(body, GENERATE_ONLY, method);
    return embed(c, deps, model, method, body);
  }
  refuseOthers(body, EMBED_ONLY, method);
  if (method === "countTokens") return count(c, deps, model, body);
  if (body.generateContentRequest !== undefined) throw new ApiError("invalid_request", `generateContentRequest: only countTokens takes it`, "generateContentRequest");
  if (method === "generateContent") return generate(c, deps, model, body, false);
  // Google's stream is SSE with alt=sse (what @google/genai asks); without it, a JSON array of the chunks: here the whole answer as one.
  if (c.req.query("alt") === "sse") return generate(c, deps, model, body, true);
  const res = await generate(c, deps, model, body, false);
  return new Response(`[${await res.text()}]`, { status: res.status, headers: res.headers });
}

/** The query parameters Google's paths take here. */
const geminiQuery = z.object({
  alt: z.string().optional().describe("`sse`: :streamGenerateContent streams SSE (what @google/genai asks); otherwise a JSON array"),
  key: z.string().optional().describe("the API key, as Google's curl examples send it (x-goog-api-key keeps it out of access logs)"),
});

const doc = {
  summary: "Generate content, stream it, count its tokens, or embed it (Google's Gemini API)",
  description:
    "POST models/{model}:generateContent, :streamGenerateContent (?alt=sse: SSE of GenerateContentResponse chunks; without it a JSON array) or :countTokens ({totalTokens}, counted where the request would run); :embedContent ({embedding: {values}}) and :batchEmbedContents ({embeddings}) run as /v1/embeddings. The key in x-goog-api-key, ?key= (as Google's curl examples send it) or Authorization: Bearer. Translated to a chat request and run like one on any backend (docs/APIS.md); errors in Google's shape.",
  tag: "inference",
  query: geminiQuery,
  responses: completionAnswer(geminiAnswer, "a GenerateContentResponse (a JSON array of them for :streamGenerateContent without alt=sse; SSE with it), or {totalTokens} for :countTokens"),
  errors: [...inferenceErrors, "not_found" as const],
  errorShape: { name: "GeminiError", schema: geminiErrorSchema },
};

export function registerGeminiModels(app: RouteTable, deps: AppDeps): void {
  for (const [path, operationId] of [
    ["/v1beta/models/:target", "geminiModelCall"],
    ["/v1beta/models/:vendor/:target", "geminiVendorModelCall"],
  ] as const) {
    app.post(path, geminiErrors, authenticate(deps, { apiKeyHeader: "x-goog-api-key", apiKeyQuery: "key" }), jsonBody(deps, generateContentSchema), documented({ ...doc, operationId }, (c) => geminiModelCall(c, deps)));
  }
}
