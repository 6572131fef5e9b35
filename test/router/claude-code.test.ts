// Claude Code itself — Anthropic's coding agent CLI, the pinned npm release
// (scripts/claude-code.ts) — pointed at a real router with
// ANTHROPIC_BASE_URL and a Switchyard key, run headless (`claude -p`): the
// client /v1/messages has to serve unchanged. On a Claude model it runs on
// the Anthropic backend (the faithful fake, which signs its thinking and
// refuses a tool-result turn without it): Claude Code's own request shape
// (adaptive thinking at an effort, its tools, system blocks, metadata),
// a real tool call executed by Claude Code (Bash), and the tool-result turn
// carrying the signed thinking back; of its `anthropic-beta` names, those the
// translation carries (with `--model …[1m]`, the 1M context window). On a
// worker model (sim worker) it is served there. Every answer has its ledger
// row.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setPrice } from "@switchyard/db";
import { ensureClaudeCode } from "../../scripts/agent-clis.ts";
import { runTool } from "../../scripts/pyvenv.ts";
import { FAKE_THINKING, thinkingSignature } from "../fixtures/fake-anthropic.ts";
import { FAKE_REASONING, FakeOpenRouter, fakeReasoningSignature } from "../fixtures/fake-openrouter.ts";
import { waitFor } from "../helpers/env.ts";
import { AGENT_CLAUDE as CLAUDE, startAgentCliFixture, type AgentCliFixture } from "../helpers/agent-cli.ts";

/** Claude through OpenRouter, which Claude Code knows nothing of. */
const OR_CLAUDE = "anthropic/claude-sonnet-4.6";

let f: AgentCliFixture;
let openrouter: FakeOpenRouter;
let claude: string;

beforeAll(async () => {
  claude = await ensureClaudeCode((s) => process.stderr.write(`${s}\n`));
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-cc" }).start();
  f = await startAgentCliFixture("cc", { "providers.openrouter": { apiKey: "sk-or-cc", baseUrl: openrouter.url } });
  await setPrice(f.fx.db.db, { backend: "openrouter", model: OR_CLAUDE, inputMicroPerMtok: 3_000_000n, outputMicroPerMtok: 15_000_000n });
  await waitFor(() => f.fx.router.deps.guard.deps.prices.price("openrouter", OR_CLAUDE), { what: "prices loaded" });
}, 600_000);

afterAll(async () => {
  await f?.close();
  await openrouter?.stop();
});

interface Result {
  is_error: boolean;
  result: string;
  num_turns: number;
  usage: { input_tokens: number; output_tokens: number };
}

/**
 * `claude -p PROMPT` against the router, in a fresh home and an empty
 * project: its result, and every message it printed on the way
 * (`stream-json`: the assistant turns as Claude Code assembled them).
 */
async function runClaude(prompt: string, args: string[]): Promise<Result & { events: Array<Record<string, unknown>> }> {
  const run = await runTool(claude, ["-p", prompt, "--output-format", "stream-json", "--verbose", ...args], {
    cwd: f.project,
    timeoutMs: 120_000,
    env: {
      HOME: f.home,
      ANTHROPIC_BASE_URL: f.fx.router.url,
      ANTHROPIC_API_KEY: f.fx.key,
      ANTHROPIC_AUTH_TOKEN: "",
      // Nothing but the model calls leaves: no telemetry, no update check, no other host.
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: "1",
      DISABLE_TELEMETRY: "1",
      DISABLE_AUTOUPDATER: "1",
    },
  });
  const events = run.out
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const result = events.findLast((e) => e.type === "result");
  if (run.code !== 0 || !result) throw new Error(`claude exited ${String(run.code)}:\n${run.out.slice(-3000)}`);
  return { ...(result as unknown as Result), events };
}

type Sent = { model: string; max_tokens: number; thinking?: unknown; tools?: Array<{ name: string }>; system?: unknown; metadata?: unknown; messages: Array<{ role: string; content: unknown }> };

describe("Claude Code through Switchyard", () => {
  it("on a Claude model: its request as sent (thinking on), a Bash call it runs, and the signed thinking back with the result", async () => {
    const start = new Date();
    const before = f.anthropic.requests.length;
    f.anthropic.enqueue({ kind: "ok", text: 'TOOL: Bash {"command":"echo switchyard-ok","description":"Echo a word"}' });
    f.anthropic.enqueue({ kind: "ok", text: "Done." });
    const result = await runClaude("Run echo", ["--model", CLAUDE, "--allowedTools", "Bash"]);
    expect(result).toMatchObject({ is_error: false, result: "Done.", num_turns: 2 });

    const sent = f.anthropic.requests.slice(before).map((r) => r.body as unknown as Sent);
    expect(sent).toHaveLength(2);
    const [first, second] = sent as [Sent, Sent];
    // Claude Code's shape reached Anthropic: its model, its tools, system and metadata, thinking on, max_tokens at the deployment's cap.
    expect(first).toMatchObject({ model: CLAUDE, max_tokens: 4096, thinking: { type: expect.stringMatching(/^(adaptive|enabled)$/) }, metadata: { user_id: expect.any(String) } });
    expect(first.tools!.map((t) => t.name)).toContain("Bash");
    expect(first.system).toBeTruthy();
    // Its billing-header block (a value that changes per conversation, ahead of the whole prompt) is left out: the prompt's prefix stays the same from one conversation to the next.
    expect(JSON.stringify(first.system)).not.toContain("x-anthropic-billing-header");
    expect(JSON.stringify(first.system)).toContain("Claude");
    // Of the betas it sends (its attribution, context management, effort, …), only what survives the translation goes on.
    expect(f.anthropic.requests[before]!.headers["anthropic-beta"]).toBe("interleaved-thinking-2025-05-14");
    // The tool-result turn: the assistant's signed thinking first (the fake verified it), the call, and what Bash printed.
    const assistant = second.messages.at(-2)!;
    expect(assistant.role).toBe("assistant");
    expect(assistant.content).toEqual([
      { type: "thinking", thinking: FAKE_THINKING, signature: thinkingSignature(FAKE_THINKING) },
      { type: "tool_use", id: expect.stringMatching(/^toolu_/), name: "Bash", input: { command: "echo switchyard-ok", description: "Echo a word" } },
    ]);
    expect(JSON.stringify(second.messages.at(-1))).toContain("switchyard-ok");

    const rows = await waitFor(async () => {
      const r = await f.ledgerRowsSince(start);
      return r.length >= 2 ? r : undefined;
    });
    expect(rows.map((r) => [r.backend, r.model, r.status])).toEqual([
      ["anthropic", CLAUDE, "ok"],
      ["anthropic", CLAUDE, "ok"],
    ]);
  });

  it("on a Claude model with [1m]: Anthropic gets the model and the 1M-context beta", async () => {
    const before = f.anthropic.requests.length;
    f.anthropic.enqueue({ kind: "ok", text: "Long." });
    const result = await runClaude("Say hello", ["--model", `${CLAUDE}[1m]`]);
    expect(result).toMatchObject({ is_error: false, result: "Long." });
    const got = f.anthropic.requests.slice(before);
    expect(got.map((r) => [(r.body as { model: string }).model, r.headers["anthropic-beta"]])).toEqual([[CLAUDE, "context-1m-2025-08-07,interleaved-thinking-2025-05-14"]]);
  });

  it("on a worker model: answered by the worker", async () => {
    const start = new Date();
    const result = await runClaude("Say hello", ["--model", "sim-chat"]);
    expect(result).toMatchObject({ is_error: false, result: "tok0 tok1 tok2 tok3 " });
    expect(f.worker.lastBody).toMatchObject({ model: "sim-chat", stream: true });
    expect(JSON.stringify(f.worker.lastBody)).not.toContain("x-anthropic-billing-header");
    const rows = await waitFor(async () => {
      const r = await f.ledgerRowsSince(start);
      return r.length >= 1 ? r : undefined;
    });
    expect(rows.map((r) => [r.backend, r.status])).toContainEqual(["worker", "ok"]);
  });

  it("on Claude through OpenRouter: its thinking ask reaches OpenRouter as reasoning, and the answer's signed reasoning comes back to it as a thinking block", async () => {
    const before = openrouter.requests.length;
    const result = await runClaude("Say hello", ["--model", OR_CLAUDE]);
    expect(result).toMatchObject({ is_error: false, result: "Hello from the fake OpenRouter." });
    const sent = openrouter.requests.slice(before).map((r) => r.body as { model: string; reasoning?: unknown });
    // A model it does not know gets Claude Code's budget (31,999 of 32,000), scaled with the deployment's output cap (4,096).
    expect(sent).toEqual([expect.objectContaining({ model: OR_CLAUDE, max_tokens: 4096, reasoning: { max_tokens: 4095 } })]);
    // The assistant turn as Claude Code assembled it from the stream: the thinking block, signed, then the text.
    // (stream-json prints a turn's blocks as they complete, one assistant event each).
    const blocks = result.events.filter((e) => e.type === "assistant").flatMap((e) => (e as { message: { content: Array<{ type: string }> } }).message.content);
    expect(blocks.map((b) => b.type)).toEqual(["thinking", "text"]);
    expect(blocks[0]).toMatchObject({ thinking: FAKE_REASONING, signature: fakeReasoningSignature(FAKE_REASONING) });
  });
});

