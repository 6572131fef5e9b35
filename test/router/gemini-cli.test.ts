// Gemini CLI itself — Google's coding agent, the pinned npm release
// (scripts/agent-clis.ts) — pointed at a real router with
// GOOGLE_GEMINI_BASE_URL and a Switchyard key as its Gemini API key, run
// headless (`gemini -p`): /v1beta/models/{model}:streamGenerateContent has
// to take its requests (system instruction, function declarations, thinking
// config) and stream what @google/genai reads. On a worker model the worker
// answers; on Claude (the Anthropic backend's faithful fake) it runs the
// shell call the model asks for, and its next request carries the call and
// the output back.
// Every answer has its ledger row.
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureGeminiCli } from "../../scripts/agent-clis.ts";
import { runTool } from "../../scripts/pyvenv.ts";
import { waitFor } from "../helpers/env.ts";
import { AGENT_CLAUDE as CLAUDE, startAgentCliFixture, type AgentCliFixture } from "../helpers/agent-cli.ts";

let f: AgentCliFixture;
let gemini: string;

beforeAll(async () => {
  gemini = await ensureGeminiCli((s) => process.stderr.write(`${s}\n`));
  f = await startAgentCliFixture("gemini");
  mkdirSync(path.join(f.home, ".gemini"));
  // A Gemini API key (the Switchyard key), as docs/APIS.md tells Gemini CLI users to set it.
  writeFileSync(path.join(f.home, ".gemini", "settings.json"), JSON.stringify({ security: { auth: { selectedType: "gemini-api-key" } } }));
}, 600_000);

afterAll(async () => {
  await f?.close();
});

/** `gemini -p PROMPT -m MODEL` against the router, in a fresh home and an empty (trusted) project, every tool allowed: its JSON result. */
async function runGemini(prompt: string, model: string): Promise<{ response: string; out: string }> {
  const run = await runTool(process.execPath, [gemini, "-p", prompt, "-m", model, "-o", "json", "--approval-mode", "yolo"], {
    cwd: f.project,
    timeoutMs: 120_000,
    env: {
      HOME: f.home,
      GEMINI_API_KEY: f.fx.key,
      GOOGLE_GEMINI_BASE_URL: f.fx.router.url,
      GEMINI_CLI_TRUST_WORKSPACE: "true",
      // Nothing but the model calls leaves.
      GEMINI_TELEMETRY_ENABLED: "false",
    },
  });
  const json = run.out.slice(run.out.indexOf("{"));
  let parsed: { response?: string; error?: unknown };
  try {
    parsed = JSON.parse(json) as { response?: string };
  } catch {
    throw new Error(`gemini exited ${String(run.code)}:\n${run.out.slice(-3000)}`);
  }
  if (run.code !== 0 || parsed.error || typeof parsed.response !== "string") throw new Error(`gemini exited ${String(run.code)}:\n${run.out.slice(-3000)}`);
  return { response: parsed.response, out: run.out };
}

type Sent = { model: string; system?: unknown; temperature?: number; top_p?: number; top_k?: number; thinking?: { type: string; budget_tokens?: number }; tools?: Array<{ name: string }>; messages: Array<{ role: string; content: unknown }> };

describe("Gemini CLI through Switchyard", () => {
  it("on a worker model: answered by the worker, with Gemini CLI's tools in its request", async () => {
    const start = new Date();
    const { response } = await runGemini("Say hello", "sim-chat");
    expect(response.trim()).toBe("tok0 tok1 tok2 tok3");
    const body = f.worker.lastBody as { model: string; stream: boolean; tools: Array<{ function: { name: string } }>; messages: Array<{ role: string }> };
    expect(body).toMatchObject({ model: "sim-chat", stream: true });
    expect(body.messages[0]!.role).toBe("system");
    expect(body.tools.map((t) => t.function.name)).toContain("read_file");
    const rows = await waitFor(async () => {
      const r = await f.ledgerRowsSince(start);
      return r.length >= 1 ? r : undefined;
    });
    expect(rows.map((r) => [r.backend, r.status])).toContainEqual(["worker", "ok"]);
  });

  it("on Claude: a shell call Gemini CLI runs, and the call and its output back", async () => {
    const start = new Date();
    const before = f.anthropic.requests.length;
    f.anthropic.enqueue({ kind: "ok", text: 'TOOL: run_shell_command {"command":"echo gemini-ok"}' });
    f.anthropic.enqueue({ kind: "ok", text: "Done." });
    const { response } = await runGemini("Run echo", CLAUDE);
    expect(response.trim()).toBe("Done.");
    const sent = f.anthropic.requests.slice(before).map((r) => r.body as unknown as Sent);
    expect(sent).toHaveLength(2);
    const [first, second] = sent as [Sent, Sent];
    // Its system instruction, its tools and sampling; it asks to see thoughts without a budget, which leaves Claude's default (no thinking): its topK could not go with thinking.
    expect(JSON.stringify(first.system)).toContain("Gemini CLI");
    expect(first.tools!.map((t) => t.name)).toContain("run_shell_command");
    expect(first).toMatchObject({ temperature: 1, top_p: 0.95, top_k: 64 });
    expect(first.thinking).toBeUndefined();
    // The tool-result turn: the call as Claude made it, and what the shell printed.
    const turn = second.messages.at(-2)!;
    expect(turn.role).toBe("assistant");
    expect(JSON.stringify(turn.content)).toContain('"name":"run_shell_command"');
    const result = JSON.stringify(second.messages.at(-1));
    expect(result).toContain("tool_result");
    expect(result).toContain("gemini-ok");
    const rows = await waitFor(async () => {
      const r = await f.ledgerRowsSince(start);
      return r.filter((x) => x.backend === "anthropic").length >= 2 ? r : undefined;
    });
    expect(rows.filter((r) => r.backend === "anthropic").map((r) => [r.model, r.status])).toEqual(sent.map(() => [CLAUDE, "ok"]));
  });
});
