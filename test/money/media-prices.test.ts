// A price row's media rates on the request path, through a real router (real
// Redis budget counters, real Postgres prices) with the fake OpenRouter: a
// model whose row counts images at k× OpenAI's tile tokens, or audio at its own
// price, is held (and refused) at that, and the same request on a model
// without them is not.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deflateSync } from "node:zlib";
import { setPrice, setRateLimit, usdToMicro } from "@switchyard/db";
import { budgetDay } from "@switchyard/state";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { budgetedTenant } from "../helpers/paid.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { promptTokensUpperBound } from "../../apps/router/src/billing/estimate.ts";
import { IMAGE_TOKENS_UNKNOWN_SIZE, imageTokensUpperBound, PDF_PAGE_IMAGE_TOKENS, PDF_PAGE_TEXT_TOKENS, pdfReads } from "../../apps/router/src/billing/media.ts";

let fx: RouterFixture;
let openrouter: FakeOpenRouter;

/** Counts an image at 33.336× OpenAI's tile tokens (gpt-4o-mini's rate, under another name: the row says so, not the name). */
const IMAGE_HEAVY = "vendor/image-heavy";
/** Bills audio input at 16× its text input (gpt-4o-audio-preview's rates). */
const AUDIO = "openai/gpt-4o-audio-preview";
/** Neither. */
const PLAIN = "openai/gpt-4o";

/** 20 micro-cents a prompt token ($0.20 per Mtok), nothing for output: a hold is 20 × its prompt tokens. */
const INPUT = 20_000_000n;

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-test" }).start();
  fx = await startTestRouter({
    "providers.openrouter": { apiKey: "sk-or-test", baseUrl: openrouter.url },
    "billing.refreshMs": 100,
    "rateLimits.refreshMs": 0,
  });
  await setPrice(fx.db.db, { backend: "openrouter", model: IMAGE_HEAVY, inputMicroPerMtok: INPUT, outputMicroPerMtok: 0n, imageTokenMultiplierPermille: 33_336 });
  await setPrice(fx.db.db, { backend: "openrouter", model: AUDIO, inputMicroPerMtok: INPUT, outputMicroPerMtok: 0n, audioInputMicroPerMtok: 16n * INPUT });
  await setPrice(fx.db.db, { backend: "openrouter", model: PLAIN, inputMicroPerMtok: INPUT, outputMicroPerMtok: 0n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("openrouter", PLAIN));
});

afterAll(async () => {
  await fx?.close();
  await openrouter?.stop();
});

const today = () => budgetDay(Date.now(), "UTC");
const post = (key: string, body: Record<string, unknown>) =>
  fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
    body: JSON.stringify(body),
  });

const text = { type: "text", text: "What is in this?" };
/** An image the router cannot size (the provider fetches it): 6,192 tokens, the most any provider's formula gives (Gemini's 24 tiles); 1,445 in OpenAI's tiles (8 at most). */
const image = { type: "image_url", image_url: { url: "https://example.com/cat.png" } };
/** A whole w×h BMP: BITMAPINFOHEADER, 8-bit RLE, one palette colour, the end-of-bitmap escape. */
const bmp = (w: number, h: number) => {
  const u16 = (n: number) => Buffer.from([n & 0xff, n >> 8]);
  const u32 = (n: number) => Buffer.from([n & 0xff, (n >> 8) & 0xff, (n >> 16) & 0xff, n >>> 24]);
  const dib = Buffer.concat([u32(40), u32(w), u32(h), u16(1), u16(8), u32(1), u32(2), u32(2835), u32(2835), u32(1), u32(0)]);
  const bytes = Buffer.concat([Buffer.from("BM", "latin1"), u32(14 + 40 + 4 + 2), u32(0), u32(14 + 40 + 4), dib, u32(0xffffff), Buffer.from([0, 1])]);
  return { type: "image_url", image_url: { url: `data:image/bmp;base64,${bytes.toString("base64")}` } };
};
/** 100,000 bytes of MP3: at most 100 s at its lowest bitrate (8 kbps), 3,200 tokens at 32 a second. */
const clip = { type: "input_audio", input_audio: { data: Buffer.alloc(100_000, 0x55).toString("base64"), format: "mp3" } };
const body = (model: string, media: unknown) => ({ model, max_tokens: 5, messages: [{ role: "user", content: [text, media] }] });
/** The prompt bound's text part: the same message with the media part left out. */
const textTokens = promptTokensUpperBound("/v1/chat/completions", { messages: [{ role: "user", content: [text] }] });

/** The hold a request takes while it runs: streamed slowly, read from the store mid-stream. */
async function holdWhileRunning(key: string, tenantId: number, b: Record<string, unknown>): Promise<bigint> {
  openrouter.enqueue({ kind: "slow", interTokenMs: 150, completionTokens: 4 });
  const r = await post(key, { ...b, stream: true });
  expect(r.status).toBe(200);
  const reader = r.body!.getReader();
  await reader.read(); // the stream has started: the hold is live
  const holds = await fx.router.deps.guard.deps.store.holds(tenantId, today());
  expect(holds).toHaveLength(1);
  while (!(await reader.read()).done);
  await fx.router.deps.guard.flush();
  return holds[0]!.amountMicro;
}

describe("a price row's image multiplier", () => {
  it("holds the images' OpenAI tile tokens × the multiplier on that model only, not the cross-provider bound × it", async () => {
    const t = await budgetedTenant(fx.db, "images-roomy", 100n);
    expect(await holdWhileRunning(t.key, t.tenantId, body(PLAIN, image))).toBe(20n * BigInt(textTokens + 6_192));
    // Unknown size: 8 tiles at most, 1,445 × 33.336 = 48,170.52 → 48,171 tokens (the mini bills 48,169 at most), not 6,192 × 33.336 = 206,417.
    expect(await holdWhileRunning(t.key, t.tenantId, body(IMAGE_HEAVY, image))).toBe(20n * BigInt(textTokens + 48_171));
    // Sized from its header: 1×1 is one tile, 255 × 33.336 → 8,501 (the mini bills 8,500), not 1,120 × 33.336 = 37,337;
    // 1000×400 two tiles, 425 × 33.336 → 14,168, not 2,064 × 33.336 = 68,806.
    expect(await holdWhileRunning(t.key, t.tenantId, body(IMAGE_HEAVY, bmp(1, 1)))).toBe(20n * BigInt(textTokens + 8_501));
    expect(await holdWhileRunning(t.key, t.tenantId, body(IMAGE_HEAVY, bmp(1000, 400)))).toBe(20n * BigInt(textTokens + 14_168));
    expect(await holdWhileRunning(t.key, t.tenantId, body(PLAIN, bmp(1, 1)))).toBe(20n * BigInt(textTokens + 1_120));
    // Text alone: the multiplier changes nothing.
    const words = { model: IMAGE_HEAVY, max_tokens: 5, messages: [{ role: "user", content: [text] }] };
    expect(await holdWhileRunning(t.key, t.tenantId, words)).toBe(20n * BigInt(textTokens));
  });

  it("serves an image a day can pay for at the tile bound: one cent (50,000 tokens) holds 48,171 (it held 206,417 and refused)", async () => {
    const t = await budgetedTenant(fx.db, "images-fit", 1n);
    const served = await post(t.key, body(IMAGE_HEAVY, image));
    expect(served.status).toBe(200);
    await served.text();
  });

  it("refuses (402, nothing sent) where the multiplied images do not fit the day; the same request on a model without it is served", async () => {
    // One cent: 50,000 tokens at 20 micro-cents. Two images: 2 × 6,192 fit; 2 × 1,445 × 33.336 = 96,341.04 → 96,342 do not.
    const t = await budgetedTenant(fx.db, "images-tight", 1n);
    const two = { model: IMAGE_HEAVY, max_tokens: 5, messages: [{ role: "user", content: [text, image, image] }] };
    const seen = openrouter.requests.length;
    const refused = await post(t.key, two);
    expect(refused.status).toBe(402);
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("budget_exceeded");
    expect(openrouter.requests.length).toBe(seen);
    const served = await post(t.key, { ...two, model: PLAIN });
    expect(served.status).toBe(200);
    await served.text();
    expect(openrouter.requests.length).toBe(seen + 1);
  });
});

describe("an image held at the bound from its header's size, in a format sized since BMP, TIFF and HEIF/AVIF were read", () => {
  const picture = bmp(1000, 400);

  it("a BMP data URL on a priced paid model is held at its size's bound, not the unknown-size one", async () => {
    const sizedBound = imageTokensUpperBound({ width: 1000, height: 400 });
    expect(sizedBound).toBeLessThan(IMAGE_TOKENS_UNKNOWN_SIZE);
    const t = await budgetedTenant(fx.db, "bmp-sized", 100n);
    expect(await holdWhileRunning(t.key, t.tenantId, body(PLAIN, picture))).toBe(20n * BigInt(textTokens + sizedBound));
  });
});

describe("a price row's audio input price", () => {
  it("holds the audio part at the audio price on that model only", async () => {
    const t = await budgetedTenant(fx.db, "audio-roomy", 100n);
    expect(await holdWhileRunning(t.key, t.tenantId, body(PLAIN, clip))).toBe(20n * BigInt(textTokens + 3_200));
    expect(await holdWhileRunning(t.key, t.tenantId, body(AUDIO, clip))).toBe(20n * BigInt(textTokens) + 320n * 3_200n);
  });

  it("refuses (402, nothing sent) where the audio at its price does not fit the day; the same request on a model without one is served", async () => {
    // One cent: 3,200 audio tokens at 320 micro-cents are 1,024,000.
    const t = await budgetedTenant(fx.db, "audio-tight", 1n);
    const seen = openrouter.requests.length;
    const refused = await post(t.key, body(AUDIO, clip));
    expect(refused.status).toBe(402);
    expect(openrouter.requests.length).toBe(seen);
    const served = await post(t.key, body(PLAIN, clip));
    expect(served.status).toBe(200);
    await served.text();
    expect(openrouter.requests.length).toBe(seen + 1);
  });
});

describe("a price row's audio input price at the settle", () => {
  const rowOf = async (r: Response) => {
    expect(r.status).toBe(200);
    await r.text();
    await fx.router.deps.guard.flush();
    const [row] = await fx.db.sql`select prompt_tokens, cached_tokens, cost_micro::text, cost_source from spend_ledger where request_id = ${r.headers.get("x-request-id")!}`;
    return row!;
  };
  /** 1,000 prompt tokens as the provider counts them: 300 of its audio, 200 read from its cache, 500 fresh text; 4 output tokens (free here). */
  const answer = { kind: "ok", promptTokens: 1_000, cachedTokens: 200, audioTokens: 300, completionTokens: 4 } as const;

  it("a provider that reports the audio tokens but not its cost: they are billed at the audio price, streamed and not", async () => {
    const t = await budgetedTenant(fx.db, "audio-settle", 100n);
    openrouter.enqueue({ ...answer, omitCost: true }, { ...answer, omitCost: true }, { ...answer, omitCost: true });
    // Micro-cents: 700 text tokens (the row has no cached price: input) × 20 + 300 audio × 320.
    const expected = { prompt_tokens: 1_000, cached_tokens: 200, cost_micro: String(700 * 20 + 300 * 320), cost_source: "price_table" };
    expect(await rowOf(await post(t.key, body(AUDIO, clip)))).toEqual(expected);
    expect(await rowOf(await post(t.key, { ...body(AUDIO, clip), stream: true }))).toEqual(expected);
    // A model without an audio price: all 1,000 at the input price, as before.
    expect(await rowOf(await post(t.key, body(PLAIN, clip)))).toEqual({ ...expected, cost_micro: String(1_000 * 20) });
  });

  it("a provider that reports its cost: the row keeps the provider's figure, the audio price aside", async () => {
    const t = await budgetedTenant(fx.db, "audio-provider-cost", 100n);
    openrouter.enqueue(answer);
    const row = await rowOf(await post(t.key, body(AUDIO, clip)));
    expect(row).toMatchObject({ prompt_tokens: 1_000, cost_source: "provider" });
    expect(BigInt(row.cost_micro)).toBe(usdToMicro(openrouter.reportedCostsUsd.at(-1)!));
    expect(row.cost_micro).not.toBe(String(700 * 20 + 300 * 320));
  });
});

describe("a price row's media rates in the estimate, when the provider reports no usage", () => {
  const estimated = async (key: string, b: Record<string, unknown>) => {
    openrouter.enqueue({ kind: "no_usage" });
    const r = await post(key, b);
    expect(r.status).toBe(200);
    await r.text();
    await fx.router.deps.guard.flush();
    const [row] = await fx.db.sql`select prompt_tokens, cost_micro::text, cost_source from spend_ledger where request_id = ${r.headers.get("x-request-id")!}`;
    return row!;
  };
  /** The estimate's text part: the text's byte bound ÷ 3. */
  const textEstimate = Math.ceil(textTokens / 3);

  it("counts an image at the bound from its size — on a model with a multiplier, its tile tokens times it — not a third of it at 1×", async () => {
    const t = await budgetedTenant(fx.db, "estimate-image", 100n);
    // 1,445 × 33.336 → 48,171, as the hold counts it.
    const heavy = textEstimate + 48_171;
    expect(await estimated(t.key, body(IMAGE_HEAVY, image))).toEqual({ prompt_tokens: heavy, cost_micro: String(20 * heavy), cost_source: "estimate" });
    expect(await estimated(t.key, body(PLAIN, image))).toEqual({ prompt_tokens: textEstimate + 6_192, cost_micro: String(20 * (textEstimate + 6_192)), cost_source: "estimate" });
  });

  it("counts audio at the typical rate (10 tokens a second of the bound's 32) and prices it at the audio price", async () => {
    const t = await budgetedTenant(fx.db, "estimate-audio", 100n);
    // The clip's bound, 3,200 tokens (100 s at 32 a second): 1,000 at 10 a second.
    expect(await estimated(t.key, body(AUDIO, clip))).toEqual({ prompt_tokens: textEstimate + 1_000, cost_micro: String(20 * textEstimate + 320 * 1_000), cost_source: "estimate" });
    expect(await estimated(t.key, body(PLAIN, clip))).toEqual({ prompt_tokens: textEstimate + 1_000, cost_micro: String(20 * (textEstimate + 1_000)), cost_source: "estimate" });
  });
});

describe("a prompt's bound, worked out once a request", () => {
  /** A PDF 1.5 whose 3 page objects sit only in a Flate-coded object stream: counting its pages decodes and inflates it. */
  const pdf = (() => {
    const objects = Buffer.from(Array.from({ length: 3 }, (_, i) => `<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents ${10 + i} 0 R>>`).join("\n"), "latin1");
    const z = deflateSync(objects);
    return Buffer.concat([
      Buffer.from(`%PDF-1.5\n1 0 obj\n<</Type/Catalog/Pages 2 0 R>>\nendobj\n2 0 obj\n<</Type/Pages/Count 3>>\nendobj\n3 0 obj\n<</Type/ObjStm/N 3/First 0/Filter/FlateDecode/Length ${z.length}>>stream\r\n`, "latin1"),
      z,
      Buffer.from("\r\nendstream\nendobj\ntrailer\n<</Root 1 0 R>>\n%%EOF\n", "latin1"),
    ]);
  })();
  const doc = { type: "file", file: { filename: "doc.pdf", file_data: `data:application/pdf;base64,${pdf.toString("base64")}` } };

  it("a request with a PDF under a token rate limit reads the PDF once; the rate limit reserves what the hold holds", async () => {
    const t = await budgetedTenant(fx.db, "bound-once", 100n);
    const LIMIT = 1_000_000;
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, tokensPerMinute: LIMIT });
    const b = body(PLAIN, doc);
    const bound = promptTokensUpperBound("/v1/chat/completions", b);
    // The PDF's 3 pages, not its bytes, bound it.
    expect(bound).toBe(textTokens + 3 * (PDF_PAGE_TEXT_TOKENS + PDF_PAGE_IMAGE_TOKENS));
    const reads = pdfReads.count;
    openrouter.enqueue({ kind: "slow", interTokenMs: 150, completionTokens: 4 });
    const r = await post(t.key, { ...b, stream: true });
    expect(r.status).toBe(200);
    const reader = r.body!.getReader();
    await reader.read(); // the stream has started: the hold is live
    const holds = await fx.router.deps.guard.deps.store.holds(t.tenantId, today());
    while (!(await reader.read()).done);
    await fx.router.deps.guard.flush();
    // One walk of the prompt for the rate limit, the request class and the hold.
    expect(pdfReads.count - reads).toBe(1);
    // The same bound for both: reserved against the window, held at 20 micro-cents a token.
    expect(r.headers.get("x-ratelimit-limit-tokens")).toBe(String(LIMIT));
    expect(Number(r.headers.get("x-ratelimit-remaining-tokens"))).toBe(LIMIT - bound);
    expect(holds.map((h) => h.amountMicro)).toEqual([20n * BigInt(bound)]);
  });

  it("on a model with an image multiplier the rate limit still reserves the cross-provider bound; the hold multiplies the tile tokens, a PDF page's image whole", async () => {
    const t = await budgetedTenant(fx.db, "bound-multiplied", 100n);
    const LIMIT = 1_000_000;
    await setRateLimit(fx.db.db, { tenantId: t.tenantId, tokensPerMinute: LIMIT });
    const b = { model: IMAGE_HEAVY, max_tokens: 5, messages: [{ role: "user", content: [text, image, doc] }] };
    const bound = promptTokensUpperBound("/v1/chat/completions", b);
    expect(bound).toBe(textTokens + 6_192 + 3 * (PDF_PAGE_TEXT_TOKENS + PDF_PAGE_IMAGE_TOKENS));
    openrouter.enqueue({ kind: "slow", interTokenMs: 150, completionTokens: 4 });
    const r = await post(t.key, { ...b, stream: true });
    expect(r.status).toBe(200);
    const reader = r.body!.getReader();
    await reader.read();
    const holds = await fx.router.deps.guard.deps.store.holds(t.tenantId, today());
    while (!(await reader.read()).done);
    await fx.router.deps.guard.flush();
    expect(Number(r.headers.get("x-ratelimit-remaining-tokens"))).toBe(LIMIT - bound);
    // The image's 1,445 tile tokens and the pages' 3 × 4,784 (OpenAI does not say how it bills a page's image: multiplied whole), × 33.336 together, rounded up once.
    const images = Math.ceil(((1_445 + 3 * PDF_PAGE_IMAGE_TOKENS) * 33_336) / 1_000);
    expect(holds.map((h) => h.amountMicro)).toEqual([20n * BigInt(textTokens + 3 * PDF_PAGE_TEXT_TOKENS + images)]);
  });
});
