// Google's Gemini API inbound, through a real router (real Redis and
// Postgres, budgets, ledger): generateContent, streamGenerateContent (SSE
// and the JSON array), countTokens and the embed calls on a worker, an OpenRouter model whose
// vendor/model name takes two path segments, errors in Google's shape, and
// on Claude (the
// Anthropic backend's fake, which signs its thinking and refuses a
// tool-result turn without it) thoughts shown when asked and the signed
// thinking carried back in the thoughtSignature of the call's part.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setBudget, setPrice } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { FAKE_THINKING, FakeAnthropic, thinkingSignature } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

const CLAUDE = "claude-sonnet-4-5";
const WORKER_MODEL = "sim-chat";
/** An OpenRouter model: vendor/model, two path segments as @google/genai writes them. */
const OR_MODEL = "acme/big-model";

let fx: RouterFixture;
let worker: SimWorker;
let anthropic: FakeAnthropic;
let openrouter: FakeOpenRouter;

beforeAll(async () => {
  anthropic = await new FakeAnthropic("sk-ant-gem").start();
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-gem" }).start();
  fx = await startTestRouter({ "providers.anthropic": { apiKey: "sk-ant-gem", baseUrl: anthropic.url }, "providers.openrouter": { apiKey: "sk-or-gem", baseUrl: openrouter.url }, "billing.refreshMs": 100 });
  await setPrice(fx.db.db, { backend: "openrouter", model: OR_MODEL, inputMicroPerMtok: 100_000_000n, outputMicroPerMtok: 200_000_000n });
  await setPrice(fx.db.db, { backend: "anthropic", model: CLAUDE, inputMicroPerMtok: 300_000_000n, outputMicroPerMtok: 1_500_000_000n });
  await setBudget(fx.db.db, { tenantId: fx.tenantId, dailyLimitCents: 100_000n });
  worker = await new SimWorker({ id: "gem-sim", models: [WORKER_MODEL], registry: fx.registry, behavior: { tokens: 4 } }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "worker registered" });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", CLAUDE) && fx.router.deps.guard.deps.prices.price("openrouter", OR_MODEL), { what: "prices loaded" });
}, 120_000);

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
  await anthropic?.stop();
  await openrouter?.stop();
});

type Json = Record<string, unknown>;

const call = (model: string, method: string, body: Json, headers: Record<string, string> = { "x-goog-api-key": fx.key }) =>
  fetch(`${fx.router.url}/v1beta/models/${model}:${method}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });

const hello = { contents: [{ role: "user", parts: [{ text: "hi" }] }] };

/** The `data:` payloads of a Gemini SSE answer. */
async function frames(res: Response): Promise<Json[]> {
  const text = await res.text();
  return text
    .split(/\r?\n\r?\n/)
    .filter((f) => f.startsWith("data: "))
    .map((f) => JSON.parse(f.slice(6)) as Json);
}

const partsOf = (r: Json) => ((r.candidates as Json[])[0]!.content as { parts: Json[] }).parts;

async function ledgerRow(requestId: string) {
  return waitFor(async () => {
    await fx.router.deps.guard.flush();
    const rows = await fx.db.sql`select backend, model, status, prompt_tokens, completion_tokens from spend_ledger where request_id = ${requestId}`;
    return rows[0];
  });
}

describe("Gemini's generateContent on a worker", () => {
  it("answers whole, with its ledger row", async () => {
    const res = await call(WORKER_MODEL, "generateContent", { ...hello, systemInstruction: { parts: [{ text: "be brief" }] }, generationConfig: { temperature: 0.5, maxOutputTokens: 20 } });
    expect(res.status).toBe(200);
    const body = (await res.json()) as Json;
    expect(body).toMatchObject({ candidates: [{ content: { role: "model", parts: [{ text: "tok0 tok1 tok2 tok3 " }] }, finishReason: "STOP", index: 0 }], modelVersion: WORKER_MODEL });
    expect(body.usageMetadata).toMatchObject({ candidatesTokenCount: 4, totalTokenCount: expect.any(Number) });
    expect(worker.lastBody).toMatchObject({ model: WORKER_MODEL, temperature: 0.5, max_tokens: 20, messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }] });
    expect(await ledgerRow(res.headers.get("x-request-id")!)).toMatchObject({ backend: "worker", model: WORKER_MODEL, status: "ok", completion_tokens: 4 });
  });

  it("takes the key as ?key=, as Google's curl examples send it", async () => {
    const res = await fetch(`${fx.router.url}/v1beta/models/${WORKER_MODEL}:generateContent?key=${encodeURIComponent(fx.key)}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(hello) });
    expect(res.status).toBe(200);
    expect(partsOf((await res.json()) as Json)).toEqual([{ text: "tok0 tok1 tok2 tok3 " }]);
  });

  it("streams Google's SSE with alt=sse (the last frame with finishReason and usage), and a JSON array without it", async () => {
    const res = await fetch(`${fx.router.url}/v1beta/models/${WORKER_MODEL}:streamGenerateContent?alt=sse`, { method: "POST", headers: { "content-type": "application/json", "x-goog-api-key": fx.key }, body: JSON.stringify(hello) });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/event-stream");
    const got = await frames(res);
    expect(got.map((f) => partsOf(f).map((p) => p.text).join("")).join("")).toBe("tok0 tok1 tok2 tok3 ");
    expect(got.at(-1)).toMatchObject({ candidates: [{ finishReason: "STOP" }], usageMetadata: { candidatesTokenCount: 4 } });
    const array = await call(WORKER_MODEL, "streamGenerateContent", hello);
    const chunks = (await array.json()) as Json[];
    expect(chunks).toHaveLength(1);
    expect(partsOf(chunks[0]!)).toEqual([{ text: "tok0 tok1 tok2 tok3 " }]);
  });

  it("takes a vendor/model name in two path segments (OpenRouter's)", async () => {
    const res = await call(OR_MODEL, "generateContent", hello);
    expect(res.status).toBe(200);
    expect(partsOf((await res.json()) as Json)).toEqual([{ text: "Hello from the fake OpenRouter." }]);
    expect(openrouter.requests.at(-1)!.body).toMatchObject({ model: OR_MODEL, messages: [{ role: "user", content: "hi" }] });
  });

  it("counts tokens where the request would run, {contents} or a generateContentRequest", async () => {
    const a = await call(WORKER_MODEL, "countTokens", hello);
    expect(a.status).toBe(200);
    const { totalTokens } = (await a.json()) as { totalTokens: number };
    expect(totalTokens).toBeGreaterThan(0);
    const b = await call(WORKER_MODEL, "countTokens", { generateContentRequest: { model: `models/${WORKER_MODEL}`, ...hello } });
    expect(((await b.json()) as { totalTokens: number }).totalTokens).toBe(totalTokens);
  });

  it("embeds as /v1/embeddings does: embedContent and batchEmbedContents, in the requests' order", async () => {
    const native = async (input: string[]) => {
      const r = await fetch(`${fx.router.url}/v1/embeddings`, { method: "POST", headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" }, body: JSON.stringify({ model: WORKER_MODEL, input }) });
      return ((await r.json()) as { data: Array<{ embedding: number[] }> }).data.map((d) => d.embedding);
    };
    const [cat, dog] = await native(["a cat", "a dog"]);
    const one = await call(WORKER_MODEL, "embedContent", { content: { parts: [{ text: "a cat" }] }, taskType: "RETRIEVAL_DOCUMENT", title: "pets" });
    expect(one.status).toBe(200);
    expect(await one.json()).toEqual({ embedding: { values: cat } });
    expect(worker.lastBody).toMatchObject({ model: WORKER_MODEL, input: ["a cat"] });
    const batch = await call(WORKER_MODEL, "batchEmbedContents", { requests: ["a cat", "a dog"].map((text) => ({ model: `models/${WORKER_MODEL}`, content: { parts: [{ text }] } })) });
    expect(await batch.json()).toEqual({ embeddings: [{ values: cat }, { values: dog }] });
    expect(await ledgerRow(batch.headers.get("x-request-id")!)).toMatchObject({ backend: "worker", model: WORKER_MODEL, status: "ok" });
    // A request of the batch naming another model, and a generate field on an embed call: Google's 400s.
    const other = await call(WORKER_MODEL, "batchEmbedContents", { requests: [{ model: "models/other", content: { parts: [{ text: "x" }] } }] });
    expect(other.status).toBe(400);
    expect(((await other.json()) as { error: { message: string } }).error.message).toContain("requests[0].model");
    const mixed = await call(WORKER_MODEL, "embedContent", { content: { parts: [{ text: "x" }] }, contents: [] });
    expect(((await mixed.json()) as { error: { message: string } }).error.message).toContain("contents: embedContent does not take it");
  });

  it("errs in Google's shape: a bad key, an unknown method, an unknown field, a model nothing serves", async () => {
    const expectError = async (res: Response, code: number, status: string, message: string) => {
      expect(res.status).toBe(code);
      const body = (await res.json()) as { error: { code: number; status: string; message: string } };
      expect(body.error).toMatchObject({ code, status });
      expect(body.error.message).toContain(message);
    };
    await expectError(await call(WORKER_MODEL, "generateContent", hello, { "x-goog-api-key": "sy_nope" }), 401, "UNAUTHENTICATED", "invalid API key");
    await expectError(await call(WORKER_MODEL, "generateContent", hello, {}), 401, "UNAUTHENTICATED", "x-goog-api-key: sy_… or ?key=sy_…");
    await expectError(await call(WORKER_MODEL, "predict", hello), 404, "NOT_FOUND", "no method 'predict'");
    await expectError(await call(WORKER_MODEL, "generateContent", { ...hello, temperatur: 1 }), 400, "INVALID_ARGUMENT", "temperatur");
    await expectError(await call("no-such-model", "generateContent", hello), 404, "NOT_FOUND", "no-such-model");
    await expectError(await call(WORKER_MODEL, "generateContent", { ...hello, tools: [{ googleSearch: {} }] }), 400, "INVALID_ARGUMENT", "tools[0].googleSearch");
  });
});

describe("Gemini's generateContent on Claude", () => {
  const tools = [{ functionDeclarations: [{ name: "get_weather", description: "The weather in a city", parameters: { type: "OBJECT", properties: { city: { type: "STRING" } }, required: ["city"] } }] }];
  const thinking = { thinkingConfig: { thinkingBudget: 2048, includeThoughts: true }, maxOutputTokens: 4096 };

  it("shows the thoughts when asked, and the call's thoughtSignature brings the signed thinking back with the function's response", async () => {
    anthropic.enqueue({ kind: "ok", text: 'TOOL: get_weather {"city":"Paris"}' });
    const first = await fetch(`${fx.router.url}/v1beta/models/${CLAUDE}:streamGenerateContent?alt=sse`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-goog-api-key": fx.key },
      body: JSON.stringify({ contents: [{ role: "user", parts: [{ text: "Weather in Paris?" }] }], tools, generationConfig: thinking }),
    });
    expect(first.status).toBe(200);
    const got = await frames(first);
    const parts = got.flatMap(partsOf);
    // The thinking as thought parts, then the call whole, with the signature on it.
    expect(parts.filter((p) => p.thought === true).map((p) => p.text).join("")).toBe(FAKE_THINKING);
    const callPart = parts.find((p) => p.functionCall !== undefined)!;
    expect(callPart.functionCall).toMatchObject({ name: "get_weather", args: { city: "Paris" } });
    expect(typeof callPart.thoughtSignature).toBe("string");
    expect(anthropic.requests.at(-1)!.body).toMatchObject({ thinking: { type: "enabled", budget_tokens: 2048 }, tools: [{ name: "get_weather", input_schema: { type: "object", properties: { city: { type: "string" } } } }] });

    // The client's history as Gemini clients keep it: the model turn's parts with their signature, then the function's response.
    anthropic.enqueue({ kind: "ok", text: "Sunny." });
    const second = await call(CLAUDE, "generateContent", {
      contents: [
        { role: "user", parts: [{ text: "Weather in Paris?" }] },
        { role: "model", parts: parts.filter((p) => p.thought !== true && (p.text === undefined || p.text !== "")) },
        { role: "user", parts: [{ functionResponse: { name: "get_weather", response: { forecast: "sunny" } } }] },
      ],
      tools,
      generationConfig: thinking,
    });
    expect(second.status).toBe(200);
    const answer = (await second.json()) as Json;
    expect(partsOf(answer).filter((p) => p.thought !== true)).toMatchObject([{ text: "Sunny." }]);
    // Anthropic got the assistant turn with its signed thinking first (the fake verified the signature), then the result.
    const sent = anthropic.requests.at(-1)!.body as { messages: Array<{ role: string; content: Array<Json> }> };
    const turn = sent.messages.at(-2)!;
    expect(turn.content[0]).toEqual({ type: "thinking", thinking: FAKE_THINKING, signature: thinkingSignature(FAKE_THINKING) });
    expect(turn.content[1]).toMatchObject({ type: "tool_use", name: "get_weather", input: { city: "Paris" } });
    expect(JSON.stringify(sent.messages.at(-1))).toContain("sunny");
    expect(await ledgerRow(second.headers.get("x-request-id")!)).toMatchObject({ backend: "anthropic", model: CLAUDE, status: "ok" });
  });

  it("without the signature the tool-result turn is Anthropic's 400, in Google's shape", async () => {
    const res = await call(CLAUDE, "generateContent", {
      contents: [
        { role: "user", parts: [{ text: "Weather in Paris?" }] },
        { role: "model", parts: [{ functionCall: { name: "get_weather", args: { city: "Paris" } } }] },
        { role: "user", parts: [{ functionResponse: { name: "get_weather", response: { forecast: "sunny" } } }] },
      ],
      tools,
      generationConfig: thinking,
    });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { status: string; message: string } }).error).toMatchObject({ status: "INVALID_ARGUMENT", message: expect.stringContaining("must start with a thinking block") });
  });
});
