// Gemini's embedContent and batchEmbedContents → the OpenAI embeddings body
// the pipeline runs (/v1/embeddings: the same admission, chain, budgets and
// ledger), and its answer back: `{embedding: {values}}`, or
// `{embeddings: [{values}, …]}` in the requests' order.
import { ApiError } from "../../errors.ts";
import { isObject, type Json } from "../boundary.ts";

export type EmbedMethod = "embedContent" | "batchEmbedContents";

function reject(param: string, message: string): never {
  throw new ApiError("invalid_request", `${param}: ${message}`, param);
}

/** The fields of one EmbedContentRequest; `taskType` and `title` tune Gemini's own embedding models, which no backend here runs: taken, inert. */
const EMBED_FIELDS = new Set(["model", "content", "taskType", "title", "outputDimensionality"]);

/** One request's text (its parts' texts, one per line) and its output dimensionality. */
function oneInput(req: Json, at: string, model: string): { text: string; dimensions: number | undefined } {
  for (const k of Object.keys(req)) if (!EMBED_FIELDS.has(k)) reject(at === "" ? k : `${at}.${k}`, "is not a field Switchyard's Gemini API knows");
  // A batch's requests each name the model, as Google requires: the path's.
  if (req.model !== undefined && req.model !== model && req.model !== `models/${model}`) reject(`${at === "" ? "" : `${at}.`}model`, `must be models/${model}, the model the path names`);
  const content = req.content;
  const where = at === "" ? "content" : `${at}.content`;
  if (!isObject(content) || !Array.isArray(content.parts) || content.parts.length === 0) reject(where, "a content with at least one text part is required");
  const texts = content.parts.map((p, j) => {
    if (!isObject(p) || typeof p.text !== "string") reject(`${where}.parts[${j}]`, "only text parts can be embedded here");
    return p.text;
  });
  const dims = req.outputDimensionality;
  if (dims !== undefined && dims !== null && (typeof dims !== "number" || !Number.isInteger(dims) || dims <= 0)) reject(`${at === "" ? "" : `${at}.`}outputDimensionality`, "must be a positive integer");
  return { text: texts.join("\n"), dimensions: typeof dims === "number" ? dims : undefined };
}

/** The embeddings body for an embed call on `model`. */
export function toEmbeddingsRequest(method: EmbedMethod, body: Json, model: string): Json & { model: string } {
  let inputs: Array<{ text: string; dimensions: number | undefined }>;
  if (method === "embedContent") inputs = [oneInput(body, "", model)];
  else {
    for (const k of Object.keys(body)) if (k !== "requests") reject(k, "batchEmbedContents takes `requests` only");
    if (!Array.isArray(body.requests) || body.requests.length === 0) reject("requests", "at least one request is required");
    inputs = body.requests.map((r, i) => {
      if (!isObject(r)) reject(`requests[${i}]`, "must be an object");
      return oneInput(r, `requests[${i}]`, model);
    });
  }
  const dims = inputs[0]!.dimensions;
  // One embeddings request has one `dimensions`: a batch asking several is refused rather than answered at one.
  inputs.forEach((x, i) => {
    if (x.dimensions !== dims) reject(`requests[${i}].outputDimensionality`, "every request of a batch must ask the same outputDimensionality");
  });
  return { model, input: inputs.map((x) => x.text), ...(dims !== undefined ? { dimensions: dims } : {}) };
}

/** The OpenAI embeddings answer as Gemini's. */
export function embedAnswer(method: EmbedMethod, answer: Json): Json {
  const data = Array.isArray(answer.data) ? answer.data.filter(isObject) : [];
  const values = data
    .slice()
    .sort((a, b) => Number(a.index ?? 0) - Number(b.index ?? 0))
    .map((d) => ({ values: Array.isArray(d.embedding) ? d.embedding : [] }));
  return method === "embedContent" ? { embedding: values[0] ?? { values: [] } } : { embeddings: values };
}

/** The embeddings fields a backend's refusal may name, by the Gemini field sent. */
export const embedParamsOfGemini: Record<string, string> = {
  input: "content",
  dimensions: "outputDimensionality",
};
