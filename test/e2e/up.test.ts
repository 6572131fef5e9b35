// `switchyard up` as a user runs it: one command, embedded Postgres, the
// in-process registry, a router and a local worker with the real models.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { engineBinary } from "../helpers/worker.ts";
import { waitFor } from "../helpers/env.ts";

const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const greedy = JSON.parse(readFileSync(path.resolve(import.meta.dirname, "../../workers/engine/tests/fixtures/greedy_reference.json"), "utf8")) as {
  cases: { messages?: { role: string; content: string }[]; completion_text: string; stable_prefix_len: number }[];
};
const home = mkdtempSync(path.join(tmpdir(), "sy-up-"));
let child: ReturnType<typeof spawn>;
let stderr = "";
let url = "";

beforeAll(async () => {
  engineBinary(); // prepared by scripts/prepare.ts
  child = spawn(process.execPath, [bin, "up"], {
    env: { ...process.env, SWITCHYARD_HOME: home, SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0", DATABASE_URL: "", REDIS_URL: "" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  await waitFor(() => /local worker ready/.test(stderr), { timeoutMs: 150_000, intervalMs: 100, what: () => `up to finish starting:\n${stderr.slice(-2000)}` });
  url = /Switchyard router: (http:\/\/\S+)/.exec(stderr)![1]!;
}, 180_000);

afterAll(async () => {
  if (child && child.exitCode === null) {
    child.kill("SIGKILL");
  }
  rmSync(home, { recursive: true, force: true });
});

describe("switchyard up", () => {
  it("creates tenant 'local' and saves its key under the data directory", () => {
    const key = readFileSync(path.join(home, "api-key"), "utf8").trim();
    expect(key).toMatch(/^sy_[0-9a-f]{8}_/);
    expect(stderr).toContain(key);
  });

  it("serves health, models, chat (streamed and not) and embeddings from the real models", async () => {
    expect((await fetch(`${url}/healthz`)).status).toBe(200);
    expect(((await (await fetch(`${url}/readyz`)).json()) as { status: string }).status).toBe("ready");
    const client = new OpenAI({ apiKey: readFileSync(path.join(home, "api-key"), "utf8").trim(), baseURL: `${url}/v1`, maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual(["all-minilm-l6-v2", "smollm2-135m-instruct"]);
    // A prompt whose first 8 llama.cpp tokens are not near-ties (see the fixture).
    const ref = greedy.cases.find((c) => c.messages?.[0]?.content === "List three primary colors.")!;
    expect(ref.stable_prefix_len).toBeGreaterThanOrEqual(8);
    const messages = ref.messages as OpenAI.ChatCompletionMessageParam[];
    const res = await client.chat.completions.create({ model: "smollm2-135m-instruct", messages, temperature: 0, max_tokens: 8 });
    expect(ref.completion_text.startsWith(res.choices[0]!.message.content!)).toBe(true);
    const stream = await client.chat.completions.create({ model: "smollm2-135m-instruct", messages, temperature: 0, max_tokens: 8, stream: true });
    let text = "";
    for await (const ch of stream) text += ch.choices[0]?.delta.content ?? "";
    expect(text).toBe(res.choices[0]!.message.content);
    const emb = await client.embeddings.create({ model: "all-minilm-l6-v2", input: "hello", encoding_format: "float" });
    expect(emb.data[0]!.embedding).toHaveLength(384);
  });

  it("shuts down cleanly on SIGTERM, and a second start reuses the saved key", async () => {
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
    const key = readFileSync(path.join(home, "api-key"), "utf8").trim();
    let again = "";
    const second = spawn(process.execPath, [bin, "up", "--no-worker"], {
      env: { ...process.env, SWITCHYARD_HOME: home, SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0", DATABASE_URL: "", REDIS_URL: "" },
      stdio: ["ignore", "ignore", "pipe"],
    });
    second.stderr!.on("data", (d: Buffer) => (again += d.toString()));
    try {
      await waitFor(() => /Try: curl/.test(again), { timeoutMs: 60_000, what: () => `second start:\n${again.slice(-1500)}` });
      expect(again).toContain(`API key for tenant 'local': ${key}`);
      expect(again).not.toContain("(new)");
      const u = /Switchyard router: (http:\/\/\S+)/.exec(again)![1]!;
      const models = await fetch(`${u}/v1/models`, { headers: { authorization: `Bearer ${key}` } });
      expect(((await models.json()) as { data: unknown[] }).data).toEqual([]);
    } finally {
      const done = new Promise((r) => second.once("exit", r));
      second.kill("SIGTERM");
      await done;
    }
  });
});
