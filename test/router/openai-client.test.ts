// The official `openai` npm client against a real router (real Redis
// registry, real Postgres keys) in front of sim workers.
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { waitFor } from "../helpers/env.ts";

let fx: RouterFixture;
let worker: SimWorker;
let client: OpenAI;

beforeAll(async () => {
  fx = await startTestRouter();
  worker = await new SimWorker({ id: "sim-a", models: ["sim-chat", "sim-embed"], registry: fx.registry, behavior: { tokens: 4 } }).start();
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
  await waitFor(() => fx.router.deps.directory.all().length === 1, { what: "worker registered" });
});

afterAll(async () => {
  await worker?.stop();
  await fx?.close();
});

describe("openai client", () => {
  it("lists the models live workers serve", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["sim-chat", "sim-embed"]);
  });

  it("chat completion (non-streaming)", async () => {
    const res = await client.chat.completions.create({ model: "sim-chat", messages: [{ role: "user", content: "hi" }] });
    expect(res.choices[0]?.message.content).toBe("tok0 tok1 tok2 tok3 ");
    expect(res.usage?.completion_tokens).toBe(4);
  });

  it("chat completion (streaming) arrives event by event", async () => {
    const stream = await client.chat.completions.create({
      model: "sim-chat",
      messages: [{ role: "user", content: "hi" }],
      stream: true,
      stream_options: { include_usage: true },
    });
    const pieces: string[] = [];
    let usage: OpenAI.CompletionUsage | undefined | null;
    let finish: string | null | undefined;
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (choice?.delta.content) pieces.push(choice.delta.content);
      if (choice?.finish_reason) finish = choice.finish_reason;
      if (chunk.usage) usage = chunk.usage;
    }
    expect(pieces).toEqual(["tok0 ", "tok1 ", "tok2 ", "tok3 "]);
    expect(finish).toBe("stop");
    expect(usage?.completion_tokens).toBe(4);
  });

  it("legacy completions, streamed and not", async () => {
    const res = await client.completions.create({ model: "sim-chat", prompt: "once upon" });
    expect(res.choices[0]?.text).toBe("tok0 tok1 tok2 tok3 ");
    const stream = await client.completions.create({ model: "sim-chat", prompt: "once upon", stream: true });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    expect(text).toBe("tok0 tok1 tok2 tok3 ");
  });

  it("embeddings", async () => {
    const res = await client.embeddings.create({ model: "sim-embed", input: ["a", "b"], encoding_format: "float" });
    expect(res.data).toHaveLength(2);
    const norm = Math.hypot(...res.data[0]!.embedding);
    expect(norm).toBeCloseTo(1, 5);
    expect(res.data[0]!.embedding).not.toEqual(res.data[1]!.embedding);
  });

  it("maps errors to the SDK's error types", async () => {
    const bad = new OpenAI({ apiKey: "sy_00000000_notarealkeynotarealkeynotarealkey", baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
    await expect(bad.models.list()).rejects.toBeInstanceOf(OpenAI.AuthenticationError);
    const notFound = client.chat.completions.create({ model: "no-such-model", messages: [{ role: "user", content: "x" }] });
    await expect(notFound).rejects.toBeInstanceOf(OpenAI.NotFoundError);
    await expect(notFound).rejects.toMatchObject({ code: "model_not_found", status: 404 });
    const badReq = client.chat.completions.create({ model: "sim-chat", messages: [] });
    await expect(badReq).rejects.toBeInstanceOf(OpenAI.BadRequestError);
    await expect(badReq).rejects.toMatchObject({ param: "messages" });
  });

  it("echoes a request id on every answer", async () => {
    const { response, data } = await client.chat.completions.create({ model: "sim-chat", messages: [{ role: "user", content: "hi" }] }).withResponse();
    expect(data.object).toBe("chat.completion");
    expect(response.headers.get("x-request-id")).toMatch(/^req_[0-9a-f]{32}$/);
    expect(worker.lastRequestHeaders?.["x-request-id"]).toBe(response.headers.get("x-request-id"));
  });
});
