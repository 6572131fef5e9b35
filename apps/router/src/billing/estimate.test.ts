import { describe, expect, it } from "vitest";
import { toChatRequest } from "../translate/messages/request.ts";
import { deflateSync } from "node:zlib";
import { promptBound, promptTokensUpperBound } from "./estimate.ts";
import { base64Bytes, GEMINI3_IMAGE_TOKENS, GEMINI_TOKENS_MAX, geminiTokens, IMAGE_TOKENS_UNKNOWN_SIZE, imageSize, imageTokensUpperBound, imageUrlBound, OPENAI_TILE_TOKENS_UNKNOWN_SIZE, openaiPatchTokens, openaiTileTokens, PDF_INFLATE_PER_PROMPT, PDF_PAGE_IMAGE_TOKENS, PDF_PAGE_TEXT_TOKENS, PDF_PAGES_UNKNOWN, pdfPages } from "./media.ts";

describe("a prompt's token bound", () => {
  // Byte-level BPE makes at most one token per UTF-8 byte: the bound counts the bytes a worker or provider is sent.
  const utf8 = (s: string) => new TextEncoder().encode(s).length;
  const chat = (content: string) => promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content }] });
  const framing = chat("");

  for (const [name, text] of [
    ["ASCII", "plain words, digits 0123 and punctuation!"],
    ["two-byte characters", "café crème, naïve façade"],
    ["three-byte characters", "€ 20 — 東京 へ"],
    ["surrogate pairs (four bytes each)", "ship it 🚢📦 now"],
    ["a lone surrogate (sent as U+FFFD, three bytes)", "broken \ud800 half"],
  ] as const) {
    it(`counts ${name} as their UTF-8 bytes`, () => {
      expect(chat(text) - framing).toBe(utf8(text));
    });
  }

  it("counts every message and its framing", () => {
    const two = promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: "é" }, { role: "assistant", content: [{ type: "text", text: "€" }] }] });
    expect(two - promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: "" }, { role: "assistant", content: [{ type: "text", text: "" }] }] })).toBe(2 + 3);
  });
});

describe("an image's and an audio clip's token bound", () => {
  const chatParts = (...parts: unknown[]) => promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: parts }] });
  const partTokens = (part: unknown) => chatParts(part) - chatParts();
  const image = (bytes: Buffer, type = "image/png") => ({ type: "image_url", image_url: { url: `data:${type};base64,${bytes.toString("base64")}` } });
  /** The old flat count per image or clip, which these must go above. */
  const OLD_FLAT = 2_000;

  // Headers built by hand, as the formats lay them out (the rest of the file is never read).
  const u16be = (n: number) => Buffer.from([n >> 8, n & 0xff]);
  const u16le = (n: number) => Buffer.from([n & 0xff, n >> 8]);
  const u24le = (n: number) => Buffer.from([n & 0xff, (n >> 8) & 0xff, n >> 16]);
  const u32le = (n: number) => {
    const b = Buffer.alloc(4);
    b.writeUInt32LE(n);
    return b;
  };
  const png = (w: number, h: number) => {
    const ihdr = Buffer.alloc(25);
    ihdr.writeUInt32BE(13, 0);
    ihdr.write("IHDR", 4, "latin1");
    ihdr.writeUInt32BE(w, 8);
    ihdr.writeUInt32BE(h, 12);
    ihdr.set([8, 6, 0, 0, 0], 16); // 8-bit RGBA; CRC left zero
    return Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), ihdr, Buffer.alloc(64)]);
  };
  const segment = (marker: number, body: Buffer) => Buffer.concat([Buffer.from([0xff, marker]), u16be(body.length + 2), body]);
  /** SOI, a JFIF APP0, an EXIF APP1 of `exifBytes` (pushes the frame header far past the first bytes decoded), a DQT, then SOFn. */
  const jpeg = (w: number, h: number, sof = 0xc0, exifBytes = 40_000) =>
    Buffer.concat([
      Buffer.from([0xff, 0xd8]),
      segment(0xe0, Buffer.from("JFIF\0\x01\x01\0\0\x01\0\x01\0\0", "latin1")),
      segment(0xe1, Buffer.concat([Buffer.from("Exif\0\0", "latin1"), Buffer.alloc(exifBytes - 6, 0x2a)])),
      segment(0xdb, Buffer.alloc(65)),
      segment(sof, Buffer.concat([Buffer.from([8]), u16be(h), u16be(w), Buffer.from([3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1])])),
      Buffer.from([0xff, 0xda]),
    ]);
  /** A whole GIF: a 2-colour table, one frame the size of the screen (LZW: clear, end), the trailer. */
  const gif = (w: number, h: number) =>
    Buffer.concat([Buffer.from("GIF89a", "latin1"), u16le(w), u16le(h), Buffer.from([0x80, 0, 0, 0, 0, 0, 255, 255, 255, 0x2c, 0, 0, 0, 0]), u16le(w), u16le(h), Buffer.from([0, 2, 1, 0x2c, 0, 0x3b])]);
  const riff = (kind: string, chunk: Buffer) => Buffer.concat([Buffer.from("RIFF", "latin1"), u32le(4 + chunk.length), Buffer.from(kind, "latin1"), chunk]);
  const webpLossy = (w: number, h: number) =>
    riff("WEBP", Buffer.concat([Buffer.from("VP8 ", "latin1"), u32le(30), Buffer.from([0x50, 0x02, 0x00, 0x9d, 0x01, 0x2a]), u16le(w), u16le(h), Buffer.alloc(20)]));
  const webpLossless = (w: number, h: number) =>
    riff("WEBP", Buffer.concat([Buffer.from("VP8L", "latin1"), u32le(20), Buffer.from([0x2f]), u32le((w - 1) | ((h - 1) << 14)), Buffer.alloc(15)]));
  const webpExtended = (w: number, h: number) =>
    riff("WEBP", Buffer.concat([Buffer.from("VP8X", "latin1"), u32le(10), Buffer.from([0x10, 0, 0, 0]), u24le(w - 1), u24le(h - 1), Buffer.alloc(16)]));

  it("reads the pixel size of PNG, JPEG (baseline and progressive, behind a 40 kB EXIF segment), GIF and WebP (VP8, VP8L, VP8X) headers", () => {
    const want = { width: 3000, height: 2000 };
    for (const bytes of [png(3000, 2000), jpeg(3000, 2000), jpeg(3000, 2000, 0xc2), gif(3000, 2000), webpLossy(3000, 2000), webpLossless(3000, 2000), webpExtended(3000, 2000)]) {
      expect(imageSize(bytes.toString("base64"))).toEqual(want);
    }
    // Cut off before the frame header: unknown, never a small guess.
    expect(imageSize(jpeg(3000, 2000).subarray(0, 30_000).toString("base64"))).toBeUndefined();
  });

  it("bounds a large image by the dearest provider formula, far above the old flat 2,000", () => {
    // 4000×3000: Anthropic's cap (4,784), above Gemini's 16 tiles of 258 once it fits 3072 px (4,128),
    // OpenAI's patches (3,779) and its tiles (2048×1536 → 1024×768: 2 × 2, 85 + 4 × 170).
    for (const bytes of [png(4000, 3000), jpeg(4000, 3000), gif(4000, 3000), webpLossy(4000, 3000), webpExtended(4000, 3000)]) {
      expect(partTokens(image(bytes))).toBe(4_784);
    }
    expect(geminiTokens({ width: 4000, height: 3000 })).toBe(16 * 258);
    expect(openaiTileTokens({ width: 4000, height: 3000 })).toBe(85 + 4 * 170);
    // A very wide image is 2 × 4 OpenAI tiles once it fits 2048 px.
    expect(openaiTileTokens({ width: 6000, height: 2000 })).toBe(85 + 8 * 170);
    expect(partTokens(image(png(6000, 2000)))).toBe(4_784);
    // 12,000 × 12,000 fits Gemini's box as 3072 × 3072: 4 × 4 tiles, not 16 × 16.
    expect(geminiTokens({ width: 12_000, height: 12_000 })).toBe(16 * 258);
    expect(partTokens(image(png(12_000, 12_000)))).toBe(4_784);
    expect(partTokens(image(png(4000, 3000)))).toBeGreaterThan(OLD_FLAT);
  });

  it("counts Gemini's tiles as Vertex cuts them: a side of the shorter side ÷ 1.5, between 256 and 768 px", () => {
    // 1000×400: tiles of 266.7 px, 4 × 2 of them (768-px tiles would be 2 × 1): above every other formula.
    expect(geminiTokens({ width: 1000, height: 400 })).toBe(8 * 258);
    expect(partTokens(image(png(1000, 400)))).toBe(8 * 258);
    // Both sides ≤ 384: one image, 258; one side over: tiles of at least 256 px.
    expect(geminiTokens({ width: 384, height: 384 })).toBe(258);
    expect(geminiTokens({ width: 385, height: 10 })).toBe(2 * 258);
    // The most of all: 3072 × 385, tiles of 256.7 px, 12 × 2.
    expect(geminiTokens({ width: 3072, height: 385 })).toBe(24 * 258);
    expect(GEMINI_TOKENS_MAX).toBe(24 * 258);
    // Fitted into the box, a long thin image may be padded to any shorter side up to 3072: its worst, 24 tiles.
    expect(geminiTokens({ width: 100_000, height: 1 })).toBe(24 * 258);
    // Nowhere in the box more: every size, every side 1..3072.
    let most = 0;
    for (let w = 1; w <= 3072; w++) for (let h = 1; h <= 3072; h++) most = Math.max(most, geminiTokens({ width: w, height: h }));
    expect(most).toBe(GEMINI_TOKENS_MAX);
  });

  it("small images cost what Gemini 3 allots any image (1,120 at its default media resolution), above Gemini 2.x's 258 and the formulas by size", () => {
    expect(partTokens(image(png(1, 1)))).toBe(GEMINI3_IMAGE_TOKENS);
    expect(imageTokensUpperBound({ width: 1, height: 1 })).toBe(1_120);
    expect(geminiTokens({ width: 1, height: 1 })).toBe(258);
    // Until a formula by size passes it: 1000×400 is Gemini 2.x's 8 tiles, 2,064.
    expect(imageTokensUpperBound({ width: 1000, height: 400 })).toBe(8 * 258);
    // 500×500: OpenAI's one tile (255), patches (256 × 2.46 = 630), Anthropic (334), Gemini's 2 × 2 tiles (1,032): all below 1,120.
    expect(imageTokensUpperBound({ width: 500, height: 500 })).toBe(1_120);
  });

  it("keeps the images' and the audio's share of the bound apart, in the same walk (a price row may count them apart)", () => {
    const clip = { type: "input_audio", input_audio: { data: Buffer.alloc(100_000).toString("base64"), format: "mp3" } };
    const body = { messages: [{ role: "user", content: [{ type: "text", text: "hi" }, image(png(4000, 3000)), { type: "image_url", image_url: { url: "https://example.com/a.png" } }, clip] }] };
    const bound = promptBound("/v1/chat/completions", body);
    expect(bound.imageTokens).toBe(4_784 + IMAGE_TOKENS_UNKNOWN_SIZE);
    // The same images in OpenAI's tiles (what an image multiplier multiplies): 4000×3000 is 1024×768 once fitted, 4 tiles (765); the unknown one 8 tiles at most (1,445).
    expect(bound.imageTileTokens).toBe(765 + 1_445);
    expect(bound.audioTokens).toBe(100 * 32);
    // The total is the model-independent bound (rate limits reserve it), text and framing included.
    expect(bound.promptTokens).toBe(promptTokensUpperBound("/v1/chat/completions", body));
    expect(bound.promptTokens - bound.imageTokens - bound.audioTokens).toBe(chatParts({ type: "text", text: "hi" }));
    // Without media: nothing apart, and nothing left over from the walk before.
    expect(promptBound("/v1/chat/completions", { messages: [{ role: "user", content: "no media" }] })).toMatchObject({ imageTokens: 0, imageTileTokens: 0, audioTokens: 0 });
  });

  it("an image it cannot size (an http URL, an unknown header, a data: URL not in base64) counts the most any size can after the providers' downscaling", () => {
    expect(IMAGE_TOKENS_UNKNOWN_SIZE).toBe(6_192);
    for (const url of ["https://example.com/cat.png", "data:image/bmp;base64,Qk0AAAAA", "data:image/svg+xml,<svg/>"]) {
      expect(partTokens({ type: "image_url", image_url: { url } })).toBe(IMAGE_TOKENS_UNKNOWN_SIZE);
    }
    // That bound is above every formula at every size, Gemini's included (each is capped by its provider's downscaling).
    for (let w = 1; w <= 20_000; w += 97) {
      for (let h = 1; h <= 20_000; h += 89) {
        expect(imageTokensUpperBound({ width: w, height: h })).toBeLessThanOrEqual(IMAGE_TOKENS_UNKNOWN_SIZE);
      }
    }
    expect(imageTokensUpperBound({ width: 2 ** 32 - 1, height: 2 ** 32 - 1 })).toBeLessThanOrEqual(IMAGE_TOKENS_UNKNOWN_SIZE);
    // A PDF page's image is not cut into Gemini's tiles (it counts a page as 258): the other formulas' most, Anthropic's cap.
    expect(PDF_PAGE_IMAGE_TOKENS).toBe(4_784);
  });

  it("keeps an image's OpenAI tile tokens beside its cross-provider bound: at most 1,445 (8 tiles) at any size, never above the bound", () => {
    expect(OPENAI_TILE_TOKENS_UNKNOWN_SIZE).toBe(85 + 8 * 170);
    for (const url of ["https://example.com/cat.png", "data:image/bmp;base64,Qk0AAAAA", "data:image/svg+xml,<svg/>", 42]) {
      expect(imageUrlBound(url)).toEqual({ tokens: IMAGE_TOKENS_UNKNOWN_SIZE, tileTokens: OPENAI_TILE_TOKENS_UNKNOWN_SIZE });
    }
    // Sized: a small image is one tile (255; OpenAI does not scale it up — gpt-4o-mini bills a 128×64 one 2,833 + 5,667), 1000×400 two.
    expect(imageUrlBound(image(png(1, 1)).image_url.url)).toEqual({ tokens: 1_120, tileTokens: 255 });
    expect(imageUrlBound(image(png(500, 500)).image_url.url)).toEqual({ tokens: 1_120, tileTokens: 255 });
    expect(imageUrlBound(image(png(1000, 400)).image_url.url)).toEqual({ tokens: 8 * 258, tileTokens: 85 + 2 * 170 });
    // Every size up to 20,000 px (and the largest a header can state): at most the unknown-size tiles, and within the cross-provider bound.
    let over: string | undefined;
    for (let w = 1; w <= 20_000 && !over; w += 97) {
      for (let h = 1; h <= 20_000; h += 89) {
        const tiles = openaiTileTokens({ width: w, height: h });
        if (tiles > OPENAI_TILE_TOKENS_UNKNOWN_SIZE || tiles > imageTokensUpperBound({ width: w, height: h })) over = `${w}×${h}`;
      }
    }
    expect(over).toBeUndefined();
    // Exhaustively where the tiles change (every side to 2,048 by 1 px, one side's step coarser): the most is 8 tiles.
    let most = 0;
    for (let w = 1; w <= 2_048; w++) for (let h = 1; h <= 4_096; h += 7) most = Math.max(most, openaiTileTokens({ width: w, height: h }));
    expect(most).toBe(OPENAI_TILE_TOKENS_UNKNOWN_SIZE);
    expect(openaiTileTokens({ width: 2 ** 32 - 1, height: 1 })).toBeLessThanOrEqual(OPENAI_TILE_TOKENS_UNKNOWN_SIZE);
  });

  it("counts an Anthropic image block (translated to a data: URL) the same way", () => {
    const data = png(4000, 3000).toString("base64");
    const { chat } = toChatRequest({ model: "m", max_tokens: 10, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data } }] }] });
    expect(promptTokensUpperBound("/v1/chat/completions", chat)).toBeGreaterThanOrEqual(4_784);
  });

  /** A WAV header (PCM) and `seconds` of silence. */
  const wav = (sampleRate: number, bytesPerSample: number, seconds: number, byteRate = sampleRate * bytesPerSample, format = 1) => {
    const data = Buffer.alloc(sampleRate * bytesPerSample * seconds, 0x80);
    const fmt = Buffer.concat([Buffer.from("fmt ", "latin1"), u32le(16), u16le(format), u16le(1), u32le(sampleRate), u32le(byteRate), u16le(bytesPerSample), u16le(bytesPerSample * 8)]);
    return riff("WAVE", Buffer.concat([fmt, Buffer.from("data", "latin1"), u32le(data.length), data]));
  };
  const audio = (bytes: Buffer, format: string) => ({ type: "input_audio", input_audio: { data: bytes.toString("base64"), format } });

  it("bounds a WAV clip by its header's byte rate: two minutes of 8 kHz 8-bit audio at 32 tokens a second", () => {
    const clip = wav(8_000, 1, 120);
    const tokens = partTokens(audio(clip, "wav"));
    expect(tokens).toBe(Math.ceil((clip.length / 8_000) * 32)); // the header's 44 bytes count as audio: a bound
    expect(tokens).toBeGreaterThan(120 * 32);
    expect(tokens).toBeGreaterThan(OLD_FLAT);
    // A byte rate claiming more than the samples make is not believed (PCM plays by sample rate × block size).
    expect(partTokens(audio(wav(8_000, 1, 120, 1_000_000), "wav"))).toBe(tokens);
    // A coded format (0x55, MP3 in a WAV) claiming a huge byte rate is held at the MP3 floor, 1,000 bytes a second.
    const coded = wav(8_000, 1, 120, 1_000_000, 0x55);
    expect(partTokens(audio(coded, "wav"))).toBe(Math.ceil((coded.length / 1_000) * 32));
  });

  it("bounds an MP3 at its lowest frame bitrate (8 kbps) and other formats at a 1 kbps floor, from the base64 length alone", () => {
    const bytes = Buffer.alloc(100_000, 0x55);
    expect(partTokens(audio(bytes, "mp3"))).toBe(100 * 32);
    expect(partTokens(audio(bytes, "ogg"))).toBe(800 * 32);
    // A "wav" that is not RIFF: the floor, not a guess.
    expect(partTokens(audio(bytes, "wav"))).toBe(800 * 32);
    expect(base64Bytes(bytes.toString("base64"))).toBe(100_000);
    expect(base64Bytes(Buffer.alloc(100_001).toString("base64"))).toBe(100_001);
    expect(base64Bytes(Buffer.alloc(100_002).toString("base64").replace(/=+$/, ""))).toBe(100_002);
  });

  /** A PDF with `pages` page objects (each written as `style` writes `/Type /Page`), a page tree and a font: bytes as a writer lays them out. */
  const pdf = (pages: number, style = "/Type /Page") => {
    const objs = [`<< /Type /Catalog /Pages 2 0 R /PageLabels << /Nums [0 << /Type /PageLabel /S /D >>] >> >>`, `<< /Type /Pages /Kids [] /Count ${pages} >>`];
    for (let i = 0; i < pages; i++) objs.push(`<< ${style} /Parent 2 0 R /MediaBox [0 0 612 792] /Contents ${i + 10} 0 R >>`);
    return Buffer.from(`%PDF-1.4\n${objs.map((o, i) => `${i + 1} 0 obj\n${o}\nendobj\n`).join("")}trailer\n<< /Root 1 0 R >>\n%%EOF\n`, "latin1");
  };
  /** A PDF 1.5 whose page objects sit only in a Flate-coded object stream (the raw bytes show none), after `padding` spaces in it. */
  const pdfObjStm = (pages: number, data?: Buffer, padding = 0) => {
    const inner = Buffer.from(" ".repeat(padding) + Array.from({ length: pages }, (_, i) => `<</Type/Page/Parent 2 0 R/Contents ${i + 10} 0 R>>`).join("\n"), "latin1");
    const z = data ?? deflateSync(inner);
    return Buffer.concat([
      Buffer.from(`%PDF-1.5\n%\xe2\xe3\n1 0 obj\n<</Type/Catalog/Pages 2 0 R>>\nendobj\n2 0 obj\n<</Type/Pages/Count ${pages}>>\nendobj\n3 0 obj\n<</Type/ObjStm/N ${pages}/First 0/Filter/FlateDecode/Length ${z.length}>>stream\r\n`, "latin1"),
      z,
      Buffer.from("\r\nendstream\nendobj\n%%EOF\n", "latin1"),
    ]);
  };
  const file = (bytes: Buffer, type = "application/pdf") => ({ type: "file", file: { filename: "doc.pdf", file_data: `data:${type};base64,${bytes.toString("base64")}` } });
  const PER_PAGE = PDF_PAGE_TEXT_TOKENS + PDF_PAGE_IMAGE_TOKENS;

  it("counts a PDF's pages by its page objects — not the page tree (/Pages) nor page labels (/PageLabel) — however the name is spaced", () => {
    expect(pdfPages(pdf(7))).toBe(7);
    expect(pdfPages(pdf(3, "/Type/Page"))).toBe(3);
    expect(pdfPages(pdf(2, "/Type\n/Page"))).toBe(2);
    // Page objects inside a compressed object stream are counted too.
    expect(pdfPages(pdfObjStm(12))).toBe(12);
    // Unknown rather than short: no page objects, an object stream it cannot inflate, not a PDF at all.
    expect(pdfPages(pdf(0))).toBeUndefined();
    expect(pdfPages(pdfObjStm(12, Buffer.from("not zlib data at all")))).toBeUndefined();
    expect(pdfPages(Buffer.from("hello, plain text /Type /Page"))).toBeUndefined();
  });

  it("reads each object stream once, however many markers precede it: one pass over the file, not one per marker", () => {
    // 100,000 markers, then a single stream: read per marker, it would be inflated (and its pages counted) 100,001 times.
    const stream = pdfObjStm(1);
    const hostile = Buffer.concat([Buffer.from("%PDF-1.5\n" + "/Type/ObjStm ".repeat(100_000), "latin1"), stream.subarray(stream.indexOf("1 0 obj"))]);
    expect(pdfPages(hostile)).toBe(1);
  });

  it("bounds a PDF by its pages × (text + page image), never under its bytes; its page images count as images", () => {
    const doc = pdf(7);
    // The part's bytes, which bounded it before: far less than 7 pages.
    const bytesBound = Buffer.byteLength(JSON.stringify(file(doc)));
    expect(partTokens(file(doc))).toBe(7 * PER_PAGE);
    expect(partTokens(file(doc))).toBeGreaterThan(bytesBound);
    // A page's image is multiplied whole on a model with an image multiplier: its tile tokens are its image tokens (OpenAI does not say how it bills one).
    expect(promptBound("/v1/chat/completions", { messages: [{ role: "user", content: [file(doc)] }] })).toMatchObject({ imageTokens: 7 * PDF_PAGE_IMAGE_TOKENS, imageTileTokens: 7 * PDF_PAGE_IMAGE_TOKENS });
    // One page padded with a megabyte (an embedded font, say): its bytes bound it, above a page's worth.
    const padded = Buffer.concat([pdf(1), Buffer.alloc(1_000_000, 0x20)]);
    const bytesOfPart = Buffer.byteLength(JSON.stringify(file(padded)));
    expect(partTokens(file(padded))).toBe(bytesOfPart);
    expect(bytesOfPart).toBeGreaterThan(PER_PAGE);
    // Pages only in an object stream: counted once inflated.
    expect(partTokens(file(pdfObjStm(40)))).toBe(40 * PER_PAGE);
  });

  it("a PDF whose pages it cannot count, or one the provider fetches (URL, file id), is held at the most pages any provider takes", () => {
    const unknown = PDF_PAGES_UNKNOWN * PER_PAGE;
    expect(partTokens(file(pdf(0)))).toBe(unknown);
    expect(partTokens(file(pdfObjStm(5, Buffer.from("garbage"))))).toBe(unknown);
    expect(partTokens({ type: "file", file: { filename: "a.pdf", file_data: "https://example.com/a.pdf" } })).toBe(unknown);
    expect(partTokens({ type: "file", file: { file_id: "file-abc" } })).toBe(unknown);
    // A file that is not a PDF (plain text): its bytes, as before.
    const txt = { type: "file", file: { filename: "a.txt", file_data: `data:text/plain;base64,${Buffer.from("hello world").toString("base64")}` } };
    expect(partTokens(txt)).toBe(Buffer.byteLength(JSON.stringify(txt)));
  });

  it("inflates at most PDF_INFLATE_PER_PROMPT of a prompt's object streams, all its PDFs together: past it, pages count as unknown", () => {
    // Two PDFs of 2 pages behind 3 MiB of inflated padding each (a few kB coded): each alone fits, both do not.
    const padded = pdfObjStm(2, undefined, 3 * 1024 * 1024);
    expect(padded.length).toBeLessThan(64 * 1024);
    expect(2 * 3 * 1024 * 1024).toBeGreaterThan(PDF_INFLATE_PER_PROMPT);
    expect(partTokens(file(padded))).toBe(2 * PER_PAGE);
    expect(chatParts(file(padded), file(padded)) - chatParts()).toBe(2 * PER_PAGE + PDF_PAGES_UNKNOWN * PER_PAGE);
    // The next prompt starts with the whole allowance again.
    expect(partTokens(file(padded))).toBe(2 * PER_PAGE);
  });
});
