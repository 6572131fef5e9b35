// Upper bounds for a request's tokens before it runs, for the budget hold.
// No provider tokenizer is at hand for every paid model, but byte-level BPE
// never makes more tokens than UTF-8 bytes, so bytes (+ per-message framing)
// bound the prompt from above. Images, audio and PDFs are bounded by the
// providers' own formulas, from the size their headers give (media.ts); the
// bound keeps their share apart (promptBound), for models that bill them apart.
import type { InferencePath } from "../backends/types.ts";
import { bodyEdited } from "../body-text.ts";
import { audioTokensUpperBound, fileTokensUpperBound, imageUrlBound, PDF_INFLATE_PER_PROMPT, type InflateBudget } from "./media.ts";

/** Per-message framing tokens (role markers, separators) — generous for every chat template. */
const MESSAGE_OVERHEAD = 8;
/**
 * A string's UTF-8 length (a lone surrogate counts as the 3 bytes of the
 * U+FFFD it is sent as), counted natively without encoding it: an ASCII
 * test by regex first cost 4× as much on a conversation's messages (issue 14).
 */
function bytes(s: string): number {
  return Buffer.byteLength(s, "utf8");
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

/** A prompt's token bound and, of it, what its images (PDF pages' images included) and its audio count. */
export interface PromptBound {
  promptTokens: number;
  imageTokens: number;
  /**
   * The same images in OpenAI's tile formula (media.ts ImageBound), the
   * count a price row's image multiplier is relative to; a PDF page's image
   * at its imageTokens (PDF_PAGE_IMAGE_TOKENS). Never above imageTokens; not
   * part of promptTokens beside them.
   */
  imageTileTokens: number;
  audioTokens: number;
}

// The media tokens of the walk in progress: a walk is synchronous, so one
// set serves every walk, and a prompt without media pays for nothing but
// setting them to 0.
let imageTokens = 0;
let imageTileTokens = 0;
let audioTokens = 0;
/** What the walk in progress may still inflate of its PDFs' object streams, all together. */
const inflate: InflateBudget = { bytes: 0 };

/**
 * One content part. Images, audio and `file` parts (PDFs) by media.ts; any
 * other part (text, …) by the bytes of its text or JSON.
 */
function partTokens(part: Record<string, unknown> | null | undefined): number {
  switch (part?.type) {
    case "image_url": {
      const b = imageUrlBound(isRecord(part.image_url) ? part.image_url.url : part.image_url);
      imageTokens += b.tokens;
      imageTileTokens += b.tileTokens;
      return b.tokens;
    }
    case "input_audio": {
      const audio = isRecord(part.input_audio) ? part.input_audio : {};
      const n = audioTokensUpperBound(audio.data, audio.format);
      audioTokens += n;
      return n;
    }
    case "file": {
      const f = fileTokensUpperBound(part, bytes(JSON.stringify(part)), inflate);
      imageTokens += f.image;
      // A page's image is multiplied whole on a model with an image multiplier (media.ts PDF_PAGE_IMAGE_TOKENS).
      imageTileTokens += f.image;
      return f.text + f.image;
    }
    default:
      return bytes(typeof part?.text === "string" ? part.text : JSON.stringify(part ?? ""));
  }
}

function contentTokens(content: unknown): number {
  if (typeof content === "string") return bytes(content);
  if (Array.isArray(content)) {
    let n = 0;
    for (const part of content as Array<Record<string, unknown>>) {
      n += partTokens(part);
    }
    return n;
  }
  return content == null ? 0 : bytes(JSON.stringify(content));
}

/**
 * At most this many prompt tokens, whatever the tokenizer and the model
 * (the bound rate limits reserve, and the request class's size), with its
 * images' and audio's share of it: one walk of the body. A hold prices
 * those shares by the model's price row (an image multiplier, which
 * multiplies the images' tile tokens, an audio price); the total is the
 * model-independent bound.
 */
export function promptBound(path: InferencePath, body: Record<string, unknown>): PromptBound {
  imageTokens = 0;
  imageTileTokens = 0;
  audioTokens = 0;
  inflate.bytes = PDF_INFLATE_PER_PROMPT;
  let n = 16;
  // Hidden states take a chat's messages or a text input.
  if (path === "/v1/chat/completions" || (path === "/v1/hidden_states" && Array.isArray(body.messages))) {
    for (const m of (body.messages as Array<Record<string, unknown>>) ?? []) {
      n += MESSAGE_OVERHEAD + contentTokens(m.content);
      if (m.tool_calls) n += bytes(JSON.stringify(m.tool_calls));
    }
    if (body.tools) n += bytes(JSON.stringify(body.tools));
    if (body.response_format) n += bytes(JSON.stringify(body.response_format));
  } else {
    const input = path === "/v1/completions" ? body.prompt : body.input;
    if (Array.isArray(input)) for (const x of input) n += MESSAGE_OVERHEAD + contentTokens(typeof x === "string" ? x : JSON.stringify(x));
    else n += contentTokens(input);
  }
  return { promptTokens: n, imageTokens, imageTileTokens, audioTokens };
}

/** promptBound's total alone. */
export function promptTokensUpperBound(path: InferencePath, body: Record<string, unknown>): number {
  return promptBound(path, body).promptTokens;
}

const limitOf = (v: unknown): number | undefined => (typeof v === "number" && Number.isFinite(v) && v >= 0 ? Math.floor(v) : undefined);

/** The completion length the client asked for at most — the smaller of its two fields — or undefined when it set none (embeddings: 0). */
export function requestedMaxOutput(path: InferencePath, body: Record<string, unknown>): number | undefined {
  if (path === "/v1/embeddings" || path === "/v1/hidden_states") return 0;
  const a = limitOf(body.max_tokens);
  const b = limitOf(body.max_completion_tokens);
  return a === undefined ? b : b === undefined ? a : Math.min(a, b);
}

/** The one field a normalized body carries its output limit in. */
export function outputLimitField(path: InferencePath, body: Record<string, unknown>): "max_tokens" | "max_completion_tokens" {
  return path === "/v1/chat/completions" && body.max_completion_tokens != null && body.max_tokens == null ? "max_completion_tokens" : "max_tokens";
}

/**
 * One output limit per request. OpenAI names it twice (`max_tokens`,
 * `max_completion_tokens`); a client sending both must not get the larger
 * one past the cap through the other. The rule: the smaller of the two when
 * both are set (null is unset); the body keeps one field — on chat the one
 * the client used, `max_tokens` when it used both; on text completions
 * always `max_tokens` — and loses the other. The budget hold is computed
 * from that value (capped at billing.maxOutputTokens), and the capped value
 * is what a paid upstream receives, in that one field.
 */
export function normalizeMaxOutput(path: InferencePath, body: Record<string, unknown>): void {
  if (path !== "/v1/chat/completions" && path !== "/v1/completions") return;
  // The common shapes are already normal (and a delete costs the object its fast layout).
  if (body.max_completion_tokens === undefined) return;
  if (body.max_tokens === undefined && path === "/v1/chat/completions") return;
  const limit = requestedMaxOutput(path, body);
  const field = outputLimitField(path, body);
  bodyEdited(body);
  delete body.max_tokens;
  delete body.max_completion_tokens;
  if (limit !== undefined) body[field] = limit;
}
