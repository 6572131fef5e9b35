// The most prompt tokens an image, an audio clip or a PDF can cost, from what
// the request carries: an image's pixel size read from its header, a clip's
// length from its byte count, a PDF's page count from its page objects. For
// the budget hold (estimate.ts): the max over every provider formula we route
// to, never a guess. Only the first bytes of an image's or a clip's base64
// payload are decoded; its length comes from the string's. A PDF is decoded
// whole (its pages are anywhere in it), only when a request carries one.
import { inflateSync } from "node:zlib";
import { ascii, base64Bytes, Head, le16 } from "./base64-head.ts";
import { imageSize, type PixelSize } from "./image-size.ts";

export { base64Bytes } from "./base64-head.ts";
export { imageSize, type PixelSize } from "./image-size.ts";

/** The base64 payload of a `data:…;base64,` URL, or undefined (an http(s) URL, or data not in base64). */
export function dataUrlBase64(url: string): string | undefined {
  if (url.length < 5 || url.slice(0, 5).toLowerCase() !== "data:") return undefined;
  // The media type is short: never scan a long payload for a comma that is not there.
  const comma = url.lastIndexOf(",", 256);
  if (comma < 0 || !/;base64$/i.test(url.slice(5, comma))) return undefined;
  return url.slice(comma + 1);
}

// ---- Image token formulas, one per provider family we route to. Each is an
// upper bound of what that family bills for an image of the given size.

/**
 * OpenAI's tile models (GPT-4o, GPT-4.1, o1/o3, GPT-5 — platform.openai.com/docs/guides/images-vision,
 * "Calculating costs"): the image is scaled to fit 2048×2048, then down so its
 * shortest side is 768 px, and each 512-px tile costs 170 tokens plus a base
 * of 85. Scaled sizes are not rounded down before the tiles are counted:
 * never fewer tiles.
 */
export function openaiTileTokens(size: PixelSize): number {
  return 85 + 170 * openaiTiles(size);
}

function openaiTiles({ width, height }: PixelSize): number {
  let w = width;
  let h = height;
  const fit = Math.min(1, 2048 / Math.max(w, h, 1));
  // Clamped as well as scaled: a float a hair over 2048 (or 768) must not count one tile more than any size can.
  w = Math.min(2048, w * fit);
  h = Math.min(2048, h * fit);
  const shortest = Math.min(w, h);
  if (shortest > 768) {
    w = Math.min(w === shortest ? 768 : 2048, (w * 768) / shortest);
    h = Math.min(h === shortest ? 768 : 2048, (h * 768) / shortest);
  }
  return Math.ceil(w / 512) * Math.ceil(h / 512);
}

/**
 * OpenAI's patch models (gpt-4.1-mini/nano, o4-mini, gpt-5-mini/nano; same
 * guide): one token per 32×32 patch, at most 1,536 (larger images are scaled
 * down to fit), times the model's multiplier — the largest, 2.46, is gpt-4.1-nano's and gpt-5-nano's.
 */
export function openaiPatchTokens({ width, height }: PixelSize): number {
  return Math.ceil(Math.min(1_536, Math.ceil(width / 32) * Math.ceil(height / 32)) * 2.46);
}

/**
 * Anthropic (docs.anthropic.com/en/docs/build-with-claude/vision): about
 * width × height / 750 tokens, an image over 1,568 px on its long edge or
 * ~1,600 tokens scaled down first. Newer models read up to 2,576 px, at
 * ⌈w/28⌉ × ⌈h/28⌉ tokens, at most 4,784. Unscaled, the larger of the two
 * counts, capped at 4,784, is above either.
 */
export function anthropicTokens({ width, height }: PixelSize): number {
  return Math.min(4_784, Math.max(Math.ceil((width * height) / 750), Math.ceil(width / 28) * Math.ceil(height / 28)));
}

/**
 * Gemini fits an image larger than this box into it before counting tiles:
 * "larger images are scaled down and padded to fit a maximum resolution of
 * 3072 x 3072 while preserving their original aspect ratio"
 * (firebase.google.com/docs/ai-logic/input-file-requirements, for the Gemini
 * API and Vertex AI; cloud.google.com/vertex-ai/generative-ai/docs/multimodal/send-multimodal-prompts#image-requirements).
 */
const GEMINI_BOX = 3_072;

/**
 * Gemini's tiles for an image inside its box (sides 1..3,072), one of them
 * over 384 px (same pages, "Tokenization"): "the image is cropped into
 * tiles. Each tile size defaults to the smallest dimension (width or height)
 * divided by 1.5 … adjusted so that it's not smaller than 256 pixels and not
 * greater than 768 pixels", 258 tokens a tile. Counted whole (a part tile is
 * a tile): never fewer than Gemini cuts. ai.google.dev/gemini-api/docs/tokens
 * says 768-px tiles, which are never more than these.
 */
function geminiTiles(width: number, height: number): number {
  const shortest = Math.min(width, height);
  // Tile side = shortest / 1.5, so a side over it is ⌈side × 3 / (2 × shortest)⌉ tiles: integers, no float to round.
  if (shortest <= 384) return Math.ceil(width / 256) * Math.ceil(height / 256);
  if (shortest >= 1_152) return Math.ceil(width / 768) * Math.ceil(height / 768);
  return Math.ceil((3 * width) / (2 * shortest)) * Math.ceil((3 * height) / (2 * shortest));
}

/**
 * For an image Gemini scales into its box, the most tiles it can make there,
 * indexed by its shorter side once scaled (rounded down): its longer side is
 * the box's 3,072, and the padding (how much, the docs do not say) can only
 * lengthen the shorter side, up to 3,072 — so the max over every shorter
 * side from there up. Tiles are not monotonic in the sides (a 3,072 × 385
 * image is 24 tiles, a 3,072 × 1,152 one 8), hence a table, not one size.
 */
const GEMINI_FITTED_TILES = (() => {
  const most = new Uint8Array(GEMINI_BOX + 1);
  for (let side = GEMINI_BOX; side >= 1; side--) most[side] = Math.max(side < GEMINI_BOX ? most[side + 1]! : 0, geminiTiles(GEMINI_BOX, side));
  return most;
})();

/**
 * Gemini 2.x, through OpenRouter (Google AI Studio or Vertex AI): an image
 * with both sides ≤ 384 px is 258 tokens; a larger one is cut into tiles
 * (geminiTiles) of 258 tokens each, after one larger than 3,072 px is fitted
 * into that box (GEMINI_BOX). At most GEMINI_TOKENS_MAX, whatever the size.
 */
export function geminiTokens({ width, height }: PixelSize): number {
  if (width <= 384 && height <= 384) return 258;
  const longest = Math.max(width, height);
  const shortest = Math.max(1, Math.min(width, height));
  if (longest <= GEMINI_BOX) return 258 * geminiTiles(width, height);
  return 258 * GEMINI_FITTED_TILES[Math.max(1, Math.floor((shortest * GEMINI_BOX) / longest))]!;
}

/** The most Gemini counts for one image of any size: 24 tiles (3,072 × 385 px, tiles of 256 px), 6,192 tokens. */
export const GEMINI_TOKENS_MAX = 258 * GEMINI_FITTED_TILES[1]!;

/**
 * Gemini 3 does not count tiles: its media resolution sets "the maximum
 * number of tokens allocated" to an image (ai.google.dev/gemini-api/docs/media-resolution),
 * 1,120 at its default for images (Vertex AI's model table: "Default
 * resolution tokens: 1120"; high, the most a request-wide setting asks for).
 * Whatever the size, so a small image costs more there than Gemini 2.x's
 * 258. The per-part "ultra high" level is Google's own API's, which an
 * OpenAI-shaped image part does not carry.
 */
export const GEMINI3_IMAGE_TOKENS = 1_120;

/**
 * No model we route to takes a prompt this long (the longest context windows
 * are a few million tokens), so no provider bills more for one part; it keeps
 * a header claiming 4-billion-pixel sides a safe integer.
 */
export const PART_TOKENS_MAX = 100_000_000;

/**
 * The most an image of this size costs on any provider we route to: every
 * request's bound, rate limits' included. A model that counts images at many
 * times OpenAI's tile formula (gpt-4o-mini: 2,833 + 5,667 a tile, 33×
 * gpt-4o's 85 + 170, at 1/33 of its price) says so on its price row
 * (image_token_multiplier_permille), and its hold multiplies the image's
 * openaiTileTokens, the count that multiplier is relative to — not this
 * maximum over other providers' formulas (ImageBound).
 */
export function imageTokensUpperBound(size: PixelSize): number {
  return Math.min(PART_TOKENS_MAX, Math.max(openaiTileTokens(size), openaiPatchTokens(size), anthropicTokens(size), geminiTokens(size), GEMINI3_IMAGE_TOKENS));
}

/**
 * An image whose size we cannot read (an http(s) URL: the provider fetches
 * it; a header we do not parse). The most any formula gives at any size,
 * after the providers' own downscaling: Gemini's 24 tiles (6,192 tokens,
 * GEMINI_TOKENS_MAX), above Anthropic's 4,784, OpenAI's tiles (at most
 * 2 × 4 once the image fits 2048 px with its shortest side at 768: 85 +
 * 8 × 170 = 1,445) and the patch models' 1,536 × 2.46 ≈ 3,779. A bound for
 * every provider we route to, each formula being capped by its provider's
 * documented downscaling.
 */
export const IMAGE_TOKENS_UNKNOWN_SIZE = Math.max(
  openaiTileTokens({ width: 768, height: 2048 }),
  openaiPatchTokens({ width: 2048, height: 2048 }),
  anthropicTokens({ width: 8000, height: 8000 }),
  GEMINI_TOKENS_MAX,
  GEMINI3_IMAGE_TOKENS,
);

/**
 * OpenAI's tile formula for an image whose size we cannot read: its most at
 * any size. Fitted into 2048 px with its shortest side at 768 at most, an
 * image is at most 4 × 2 tiles: 85 + 8 × 170 = 1,445 (× 33.336 on
 * gpt-4o-mini: 48,171, above its 2,833 + 8 × 5,667 = 48,169).
 */
export const OPENAI_TILE_TOKENS_UNKNOWN_SIZE = openaiTileTokens({ width: 768, height: 2048 });

/**
 * An image part's bound two ways: `tokens`, the most any provider we route
 * to counts (imageTokensUpperBound: every request's, rate limits' too); and
 * `tileTokens`, OpenAI's tile formula alone (85 + 170 a tile, never above
 * `tokens`), which a price row's image multiplier multiplies. `detail: "low"`
 * is OpenAI's base alone (85; gpt-4o-mini's 2,833), below any image's tiles
 * here: the bound need not read it.
 */
export interface ImageBound {
  tokens: number;
  tileTokens: number;
}

const UNKNOWN_SIZE_BOUND: ImageBound = { tokens: IMAGE_TOKENS_UNKNOWN_SIZE, tileTokens: OPENAI_TILE_TOKENS_UNKNOWN_SIZE };

function urlSize(url: unknown): PixelSize | undefined {
  if (typeof url !== "string") return undefined;
  const b64 = dataUrlBase64(url);
  return b64 === undefined ? undefined : imageSize(b64);
}

/** The most an image content part's URL can cost (ImageBound): by its header's size for a data: URL, else the unknown-size bounds. */
export function imageUrlBound(url: unknown): ImageBound {
  const size = urlSize(url);
  return size ? { tokens: imageTokensUpperBound(size), tileTokens: openaiTileTokens(size) } : UNKNOWN_SIZE_BOUND;
}

/** imageUrlBound's cross-provider `tokens` alone. */
export function imageUrlTokens(url: unknown): number {
  return imageUrlBound(url).tokens;
}

// ---- Audio.

/**
 * Audio tokens per second of input, the most any provider we route to
 * counts: Gemini represents a second of audio as 32 tokens
 * (ai.google.dev/gemini-api/docs/tokens); OpenAI's gpt-4o audio counts 1
 * token per 100 ms of user audio (10 a second, its Realtime cost guide).
 */
export const AUDIO_TOKENS_PER_SECOND = 32;

/**
 * Bytes per second at least, where the header says nothing we read. MP3: the
 * smallest bitrate a frame can declare is 8 kbps (MPEG-2.5 Layer III), and a
 * frame's size follows from its bitrate (free-format streams aside). Raw
 * pcm16/pcm24: 8 kHz mono, the lowest rate telephony audio uses. Any other
 * format (aac, ogg, flac, m4a, aiff, a wav we cannot read): 1 kbps, below the
 * bitrate any codec codes speech or music at — a conservative floor, not a
 * proof (coded silence can go lower).
 */
const MIN_BYTES_PER_SECOND: Record<string, number> = { mp3: 1_000, pcm16: 16_000, pcm24: 24_000 };
const FLOOR_BYTES_PER_SECOND = 125;

/**
 * A WAV's bytes per second from its `fmt ` chunk: the header's byte rate, or
 * for PCM the rate its samples make if that is lower (decoders play PCM by
 * sample rate × block size, not by the byte-rate field).
 */
function wavBytesPerSecond(b64: string): number | undefined {
  const head = new Head(b64);
  const b = head.bytes;
  if (!(ascii(b, 0, "RIFF") && ascii(b, 8, "WAVE"))) return undefined;
  let i = 12;
  for (let chunks = 0; chunks < 16; chunks++) {
    if (!head.has(i + 8)) return undefined;
    const size = head.bytes.readUInt32LE(i + 4);
    if (ascii(head.bytes, i, "fmt ")) {
      if (!head.has(i + 24)) return undefined;
      const f = head.bytes;
      const format = le16(f, i + 8);
      const byteRate = f.readUInt32LE(i + 16);
      const sampled = f.readUInt32LE(i + 12) * le16(f, i + 20);
      const pcm = format === 1 || format === 3 || format === 6 || format === 7 || format === 0xfffe;
      // A coded format (MP3 or ADPCM in a WAV) plays at whatever rate its
      // frames say, not the header's field, which a client could set to
      // anything: its rate is held at most at the MP3 floor (8 kbps).
      const rate = pcm && sampled > 0 ? Math.min(byteRate, sampled) : pcm ? byteRate : Math.min(byteRate, MIN_BYTES_PER_SECOND.mp3!);
      return rate > 0 ? rate : undefined;
    }
    i += 8 + size + (size & 1);
  }
  return undefined;
}

/** The most an `input_audio` part (base64 `data`, `format`) can cost: its longest duration × the dearest token rate. */
export function audioTokensUpperBound(data: unknown, format: unknown): number {
  if (typeof data !== "string") return 0;
  const bytes = base64Bytes(data);
  if (bytes === 0) return 0;
  const fmt = typeof format === "string" ? format.toLowerCase() : "";
  const rate = (fmt === "wav" || fmt === "" ? wavBytesPerSecond(data) : undefined) ?? MIN_BYTES_PER_SECOND[fmt] ?? FLOOR_BYTES_PER_SECOND;
  return Math.min(PART_TOKENS_MAX, Math.ceil((bytes / rate) * AUDIO_TOKENS_PER_SECOND));
}

// ---- PDFs (`file` parts).

/**
 * Text tokens held per PDF page. Anthropic puts each page in the context as
 * its extracted text plus an image of the page: "typically 1,500-3,000
 * tokens per page" of text, plus the image's tokens
 * (docs.anthropic.com/en/docs/build-with-claude/pdf-support, "Estimate your
 * costs"). OpenAI does the same, each page's text and an image of it
 * (platform.openai.com/docs/guides/pdf-files); Gemini counts a page as 258
 * tokens in all (ai.google.dev/gemini-api/docs/document-processing). The top
 * of Anthropic's range: a documented figure, not a proof (a page of tiny type
 * holds more), which the part's byte bound backs where the text is not
 * compressed.
 */
export const PDF_PAGE_TEXT_TOKENS = 3_000;

/**
 * The image of a page: the most OpenAI's or Anthropic's formula gives an
 * image of any size (Anthropic's 4,784). Gemini does not cut a page into
 * tiles: Gemini 2.x counts a whole page as 258 tokens, Gemini 3 a page at
 * its media resolution (GEMINI3_IMAGE_TOKENS at most), so its tiles' 6,192
 * for an image of unknown size do not apply here. A price row's image
 * multiplier multiplies all of it, not OpenAI's tile count (1,445 at most):
 * OpenAI's PDF guide says only that each page's image goes into the context
 * — not at what size or detail, nor how gpt-4o-mini bills it — so a page is
 * held on such a model at 4,784 × the multiplier, the larger guess.
 */
export const PDF_PAGE_IMAGE_TOKENS = Math.max(
  openaiTileTokens({ width: 768, height: 2048 }),
  openaiPatchTokens({ width: 2048, height: 2048 }),
  anthropicTokens({ width: 8000, height: 8000 }),
  GEMINI3_IMAGE_TOKENS,
);

/**
 * Pages held for a PDF whose pages we cannot count (a URL or file id the
 * provider fetches itself; page objects only in object streams we cannot
 * read — encrypted, another filter, cut short): the most pages any provider
 * we route to takes in one document, Gemini's 1,000 (Anthropic's and
 * OpenAI's limit is 100). Large, and meant to be: a smaller guess would let
 * a long document through on a hold it overruns.
 */
export const PDF_PAGES_UNKNOWN = 1_000;

/**
 * Bytes inflated at most from the object streams of all of a prompt's PDFs
 * together (page dictionaries are ~100 bytes: this is 10,000s of objects).
 * Past it a PDF's pages count as unknown: held high, never short. The
 * inflating is synchronous, on the request path: a body of zip bombs costs
 * one prompt at most this much (about 8 ms of the event loop, measured on
 * this box; 16 MiB was 30 ms for every other request here to wait behind).
 */
export const PDF_INFLATE_PER_PROMPT = 4 * 1024 * 1024;

/** What a prompt's walk may still inflate (PDF_INFLATE_PER_PROMPT at its start): shared by all its PDFs. */
export interface InflateBudget {
  bytes: number;
}

/** `/Type /Page` (any whitespace, none too), not `/Pages` or `/PageLabel`: the name must end at a delimiter. */
const PAGE_OBJECT = /\/Type\s*\/Page(?![^\s()<>[\]{}/%])/g;
const OBJECT_STREAM = /\/Type\s*\/ObjStm(?![^\s()<>[\]{}/%])/g;

function countMatches(text: string, re: RegExp): number {
  re.lastIndex = 0;
  let n = 0;
  while (re.exec(text) !== null) n++;
  return n;
}

/** Whether bytes are a PDF: its header may follow a little junk (readers look in the first 1,024 bytes). */
function isPdf(bytes: Buffer): boolean {
  return bytes.subarray(0, 1024).indexOf("%PDF-", 0, "latin1") >= 0;
}

/**
 * PDFs this process has read for their pages (pdfPages), for the tests: the
 * reading is real work on the request path (decoding, inflating), and a
 * request's prompt is walked once (pipeline/inference.ts), so its PDFs are
 * read once whoever needs its bound.
 */
export const pdfReads = { count: 0 };

/**
 * The pages of a PDF: its page objects (`/Type /Page`), in the file and in
 * its Flate-coded object streams (PDF 1.5+ keeps page dictionaries there,
 * where the raw bytes do not show them). Undefined when it is not a PDF, has
 * no page object we can see, or has an object stream we cannot read: a
 * count missing pages must not pass for the page count. Pages left over from
 * earlier revisions (incremental updates) count too: more, so still a bound.
 */
export function pdfPages(pdf: Buffer, budget: InflateBudget = { bytes: PDF_INFLATE_PER_PROMPT }): number | undefined {
  if (!isPdf(pdf)) return undefined;
  pdfReads.count++;
  const text = pdf.toString("latin1");
  let pages = countMatches(text, PAGE_OBJECT);
  OBJECT_STREAM.lastIndex = 0;
  for (let m = OBJECT_STREAM.exec(text); m !== null; m = OBJECT_STREAM.exec(text)) {
    // The stream's data follows the first `stream` keyword after its dictionary (EOL: CRLF or LF).
    const kw = text.indexOf("stream", m.index);
    if (kw < 0) return undefined;
    let start = kw + 6;
    if (text.charCodeAt(start) === 13) start++;
    if (text.charCodeAt(start) === 10) start++;
    const end = text.indexOf("endstream", start);
    let inflated: Buffer;
    try {
      // Bytes after the zlib stream's end (the EOL before `endstream`) are ignored.
      inflated = inflateSync(pdf.subarray(start, end < 0 ? pdf.length : end), { maxOutputLength: Math.max(1, budget.bytes) });
    } catch {
      return undefined;
    }
    budget.bytes -= inflated.length;
    pages += countMatches(inflated.toString("latin1"), PAGE_OBJECT);
    // The next object stream starts after this one's data: each byte is scanned once, however many markers a file holds.
    if (end < 0) break;
    OBJECT_STREAM.lastIndex = end + 9;
  }
  return pages > 0 ? pages : undefined;
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null;

/**
 * The most a `file` part can cost, split into its text and its page images
 * (a model may count images apart: its price row's multiplier, which
 * multiplies `image` whole: PDF_PAGE_IMAGE_TOKENS), from its
 * `file.file_data`: a base64 PDF by its pages × (PDF_PAGE_TEXT_TOKENS +
 * PDF_PAGE_IMAGE_TOKENS), never less than `byteBound` (the part's bytes,
 * which is all any other base64 file is bounded by); a PDF we cannot count
 * the pages of, or a file the provider fetches (a URL, a file id), by
 * PDF_PAGES_UNKNOWN pages. `budget`: what the prompt's walk may still inflate.
 */
export function fileTokensUpperBound(part: Record<string, unknown>, byteBound: number, budget: InflateBudget): { text: number; image: number } {
  const file = isRecord(part.file) ? part.file : {};
  const data = file.file_data;
  const b64 = typeof data === "string" ? dataUrlBase64(data) : undefined;
  let pages: number;
  if (b64 !== undefined) {
    // Not a PDF (a text file, say): its bytes bound it, as they bound any text. Only its head is decoded to tell.
    if (!isPdf(Buffer.from(b64.slice(0, 1_400), "base64"))) return { text: byteBound, image: 0 };
    pages = pdfPages(Buffer.from(b64, "base64"), budget) ?? PDF_PAGES_UNKNOWN;
  } else if ((typeof data === "string" && data.slice(0, 5).toLowerCase() !== "data:") || (data === undefined && file.file_id !== undefined)) {
    // A URL or an uploaded file's id: the provider reads a document we cannot see.
    pages = PDF_PAGES_UNKNOWN;
  } else {
    return { text: byteBound, image: 0 };
  }
  const perPage = PDF_PAGE_TEXT_TOKENS + PDF_PAGE_IMAGE_TOKENS;
  pages = Math.min(pages, Math.floor(PART_TOKENS_MAX / perPage));
  const image = pages * PDF_PAGE_IMAGE_TOKENS;
  return { text: Math.max(pages * PDF_PAGE_TEXT_TOKENS, byteBound - image), image };
}
