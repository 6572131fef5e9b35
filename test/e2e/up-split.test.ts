// `switchyard up --split 2`: the router and two local shard workers of
// SmolLM2 (blocks 0-15 and 15-30, cut evenly from the GGUF's block count),
// served through the pipeline the router places from their heartbeats.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { parseSplit } from "../../apps/cli/src/commands/up.ts";
import { engineBinary } from "../helpers/worker.ts";
import { waitFor } from "../helpers/env.ts";

const bin = path.resolve(import.meta.dirname, "../../apps/cli/bin/switchyard.mjs");
const greedy = JSON.parse(readFileSync(path.resolve(import.meta.dirname, "../../workers/engine/tests/fixtures/greedy_reference.json"), "utf8")) as {
  cases: { messages?: { role: string; content: string }[]; completion_text: string; stable_prefix_len: number }[];
};
const home = mkdtempSync(path.join(tmpdir(), "sy-up-split-"));
let child: ReturnType<typeof spawn>;
let stderr = "";
let url = "";

beforeAll(async () => {
  engineBinary();
  child = spawn(process.execPath, [bin, "up", "--split", "2", "--model", "smollm2-135m-instruct"], {
    env: { ...process.env, SWITCHYARD_HOME: home, SWITCHYARD_PORT: "0", SWITCHYARD_ROUTER__ADMIN_PORT: "0", DATABASE_URL: "", REDIS_URL: "" },
    stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  await waitFor(() => /» pipeline: /.test(stderr), { timeoutMs: 150_000, intervalMs: 100, what: () => `up --split to finish starting:\n${stderr.slice(-2000)}` });
  url = /Switchyard router: (http:\/\/\S+)/.exec(stderr)![1]!;
}, 180_000);

afterAll(() => {
  if (child && child.exitCode === null) child.kill("SIGKILL");
  rmSync(home, { recursive: true, force: true });
});

describe("switchyard up --split N", () => {
  it("starts N shards with ranges of equal compute and answers through their pipeline", async () => {
    // 19 + 11 blocks: the last shard also runs the output head (8 blocks' worth of matmul on SmolLM2).
    expect(stderr).toContain("into 2 local shards: 0-19, 19-30");
    expect(stderr).toContain("» pipeline: 2 shards");
    const key = readFileSync(path.join(home, "api-key"), "utf8").trim();
    const auth = { authorization: `Bearer ${key}`, "content-type": "application/json" };
    const models = (await (await fetch(`${url}/v1/models`, { headers: auth })).json()) as { data: { id: string }[] };
    expect(models.data.map((m) => m.id)).toEqual(["smollm2-135m-instruct"]);
    const ref = greedy.cases.find((c) => c.messages?.[0]?.content === "List three primary colors.")!;
    const res = await fetch(`${url}/v1/chat/completions`, {
      method: "POST",
      headers: { ...auth, "x-switchyard-debug": "route" },
      body: JSON.stringify({ model: "smollm2-135m-instruct", messages: ref.messages, temperature: 0, max_tokens: 8 }),
    });
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-route")).toMatch(/^pipeline\[local-shard-0 0-19 > local-shard-1 19-30\]/);
    const text = ((await res.json()) as { choices: { message: { content: string } }[] }).choices[0]!.message.content;
    expect(ref.completion_text.startsWith(text)).toBe(true);
  });

  it("refuses a split below 2 shards; exits cleanly on SIGTERM", async () => {
    expect(() => parseSplit("1")).toThrow(/2 or more/);
    expect(() => parseSplit("two")).toThrow(/number of shards/);
    expect(parseSplit("3")).toBe(3);
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
    child.kill("SIGTERM");
    expect(await exited).toBe(0);
  });
});
