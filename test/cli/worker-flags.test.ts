// `switchyard worker`'s sizing flags reach the agent: --max-seq-len bounds
// the context a sequence may fill (a prompt past it is a 400, an answer
// without max_tokens stops at it), --memory-budget-mb is what the plan check
// holds the models to, --engine-stall-ms is checked like the config's
// engineStallMs, and a malformed value is a usage error (exit 2).
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";
import { engineBinary } from "../helpers/worker.ts";
import { REDIS_URL, uniqueName, waitFor } from "../helpers/env.ts";

const MODEL = "smollm2-135m-instruct";
const TOKEN = "worker-flags-token-0123456789";
const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");

let fx: RouterFixture;
let worker: ChildProcess | undefined;
const id = uniqueName("wf").slice(-12);
const args = (...extra: string[]) => [bin, "worker", "--redis", REDIS_URL, "--key-prefix", fx.redis.prefix, "--token", TOKEN, "--model", MODEL, "--host", "127.0.0.1", "--port", "0", "--device", "cpu", "--engine", engineBinary(), "--max-batch", "2", ...extra];

beforeAll(async () => {
  fx = await startTestRouter({ "workers.token": TOKEN, "registry.pollMs": 50 });
}, 60_000);

afterAll(async () => {
  if (worker && worker.exitCode === null) worker.kill("SIGKILL");
  await fx?.close();
});

const chat = async (body: Record<string, unknown>) => {
  const r = await fetch(`${fx.router.url}/v1/chat/completions`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json" },
    body: JSON.stringify({ model: MODEL, ...body }),
  });
  return { status: r.status, json: (await r.json()) as { error?: { message: string }; usage?: { prompt_tokens: number; completion_tokens: number }; choices?: Array<{ finish_reason: string }> } };
};

describe("switchyard worker sizing flags", () => {
  it("--max-seq-len: a prompt past it is a 400; an answer without max_tokens fills no more than it", async () => {
    worker = spawn(process.execPath, args("--id", id, "--max-seq-len", "96"), { stdio: ["ignore", "ignore", "pipe"] });
    let tail = "";
    worker.stderr!.on("data", (d: Buffer) => (tail = (tail + d.toString()).slice(-3000)));
    await waitFor(() => fx.router.deps.directory.candidates(MODEL).some((w) => w.id === id && w.state === "ready"), { timeoutMs: 120_000, intervalMs: 100, what: `worker ready (${tail})` });
    const long = await chat({ messages: [{ role: "user", content: "word ".repeat(200) }] });
    expect(long.status).toBe(400);
    expect(long.json.error?.message).toMatch(/max_seq_len 96/);
    const open = await chat({ messages: [{ role: "user", content: "Tell me a long story about a lighthouse." }], temperature: 0 });
    expect(open.status).toBe(200);
    const { prompt_tokens, completion_tokens } = open.json.usage!;
    expect(prompt_tokens + completion_tokens).toBeLessThanOrEqual(96);
    if (open.json.choices![0]!.finish_reason === "length") expect(prompt_tokens + completion_tokens).toBe(96);
  }, 180_000);

  it("--memory-budget-mb: models that do not fit are refused at start, with the numbers", () => {
    const r = spawnSync(process.execPath, args("--memory-budget-mb", "1"), { encoding: "utf8", timeout: 60_000 });
    expect(r.status).not.toBe(0);
    expect(r.stderr).toMatch(/memory budget is 1 MiB .*raise --memory-budget-mb/);
  }, 90_000);

  it("a malformed value is a usage error", () => {
    const r = spawnSync(process.execPath, args("--max-seq-len", "lots"), { encoding: "utf8", timeout: 60_000 });
    expect([r.status, r.stderr]).toEqual([2, expect.stringMatching(/maxSeqLen|max-seq-len/)]);
  }, 90_000);

  it("--engine-stall-ms reaches the config: below 1 s (other than 0) is a usage error naming it", () => {
    const r = spawnSync(process.execPath, args("--engine-stall-ms", "5"), { encoding: "utf8", timeout: 60_000 });
    expect([r.status, r.stderr]).toEqual([2, expect.stringMatching(/engineStallMs.*1000 to 3600000/)]);
  }, 90_000);
});
