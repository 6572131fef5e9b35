// Codex CLI itself — OpenAI's coding agent, the pinned npm release
// (scripts/agent-clis.ts) — pointed at a real router as a model provider
// (`wire_api = "responses"`, a Switchyard key), run headless (`codex exec`):
// /v1/responses has to take its requests as OpenAI's API does — its
// `client_metadata`, `store: false` with `include:
// ["reasoning.encrypted_content"]`, a `namespace` of sub-agent tools — and
// stream what it reads. On a worker model the worker answers; on Claude (the
// Anthropic backend's faithful fake) it runs the shell call the model asks
// for and sends the output back, and a namespaced function's call comes back
// to it with its namespace. Every answer has its ledger row.
import { mkdirSync, writeFileSync } from "node:fs";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureCodex } from "../../scripts/agent-clis.ts";
import { runTool } from "../../scripts/pyvenv.ts";
import { FAKE_THINKING, thinkingSignature } from "../fixtures/fake-anthropic.ts";
import { waitFor } from "../helpers/env.ts";
import { AGENT_CLAUDE as CLAUDE, startAgentCliFixture, type AgentCliFixture } from "../helpers/agent-cli.ts";

let f: AgentCliFixture;
let codex: string;

beforeAll(async () => {
  codex = await ensureCodex((s) => process.stderr.write(`${s}\n`));
  f = await startAgentCliFixture("codex");
  mkdirSync(path.join(f.home, ".codex"));
  // Switchyard as a model provider, as docs/APIS.md tells Codex users to set it. No backend here runs OpenAI's web search tool.
  writeFileSync(
    path.join(f.home, ".codex", "config.toml"),
    [
      'model_provider = "switchyard"',
      'web_search = "disabled"',
      "[model_providers.switchyard]",
      'name = "Switchyard"',
      `base_url = "${f.fx.router.url}/v1"`,
      'env_key = "SWITCHYARD_API_KEY"',
      'wire_api = "responses"',
      "",
    ].join("\n"),
  );
}, 600_000);

afterAll(async () => {
  await f?.close();
});

/**
 * `codex exec PROMPT` on `model` against the router, in a fresh home and an
 * empty project, commands run without its sandbox (this box has no user
 * namespaces for it): every JSONL event it printed, and its last message.
 */
async function runCodex(prompt: string, model: string, extra: string[] = []): Promise<{ events: Array<Record<string, unknown>>; last: string | undefined }> {
  const run = await runTool(codex, ["exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox", "-m", model, ...extra, prompt], {
    cwd: f.project,
    timeoutMs: 120_000,
    env: { HOME: f.home, CODEX_HOME: path.join(f.home, ".codex"), SWITCHYARD_API_KEY: f.fx.key, OPENAI_API_KEY: "" },
  });
  const events = run.out
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  const failed = events.find((e) => e.type === "turn.failed" || e.type === "error");
  if (run.code !== 0 || failed) throw new Error(`codex exited ${String(run.code)}:\n${run.out.slice(-3000)}`);
  const messages = events.filter((e) => e.type === "item.completed" && (e.item as { type?: string }).type === "agent_message");
  return { events, last: (messages.at(-1)?.item as { text?: string } | undefined)?.text };
}

type Sent = { model: string; thinking?: unknown; output_config?: unknown; system?: unknown; tools?: Array<{ name: string; description?: string }>; messages: Array<{ role: string; content: unknown }> };

describe("Codex CLI through Switchyard", () => {
  it("on a worker model: answered by the worker, its tools (the namespace's flattened) in the worker's request", async () => {
    const start = new Date();
    const { last } = await runCodex("Say hello", "sim-chat");
    expect(last).toBe("tok0 tok1 tok2 tok3 ");
    const body = f.worker.lastBody as { model: string; stream: boolean; tools: Array<{ function: { name: string } }> };
    expect(body).toMatchObject({ model: "sim-chat", stream: true });
    const names = body.tools.map((t) => t.function.name);
    expect(names).toContain("exec_command");
    expect(names).toContain("multi_agent_v1__close_agent");
    const rows = await waitFor(async () => {
      const r = await f.ledgerRowsSince(start);
      return r.length >= 1 ? r : undefined;
    });
    expect(rows.map((r) => [r.backend, r.status])).toContainEqual(["worker", "ok"]);
  });

  it("on Claude: a shell call it runs, and the output back with the call; a namespaced function called under its namespace", async () => {
    const start = new Date();
    const before = f.anthropic.requests.length;
    f.anthropic.enqueue({ kind: "ok", text: 'TOOL: exec_command {"cmd":"echo switchyard-ok"}' });
    f.anthropic.enqueue({ kind: "ok", text: 'TOOL: multi_agent_v1__close_agent {"target":"no-such-agent"}' });
    f.anthropic.enqueue({ kind: "ok", text: "Done." });
    const { events, last } = await runCodex("Run echo", CLAUDE);
    expect(last).toBe("Done.");
    const sent = f.anthropic.requests.slice(before).map((r) => r.body as unknown as Sent);
    expect(sent).toHaveLength(3);
    const [first, second, third] = sent as [Sent, Sent, Sent];
    // Codex's developer instructions are Claude's system prompt; its namespace's functions are tools with the namespace's description.
    expect(JSON.stringify(first.system)).toContain("Codex");
    const closeAgent = first.tools!.find((t) => t.name === "multi_agent_v1__close_agent");
    expect(closeAgent?.description).toMatch(/^Tools for spawning and managing sub-agents\.\n\n/);
    // Codex ran the command: its output came back as the call's result.
    expect(events.some((e) => e.type === "item.completed" && JSON.stringify(e.item).includes("switchyard-ok"))).toBe(true);
    const result = JSON.stringify(second.messages.at(-1));
    expect(result).toContain("tool_result");
    expect(result).toContain("switchyard-ok");
    // The namespaced call reached Codex as multi_agent_v1's close_agent (it answered about the agent, not about an unknown tool), and went back under the same chat name.
    const turn = third.messages.at(-2)!;
    expect(JSON.stringify(turn.content)).toContain('"name":"multi_agent_v1__close_agent"');
    const answer = JSON.stringify(third.messages.at(-1));
    expect(answer).toContain("tool_result");
    expect(answer).toContain("invalid agent id no-such-agent");
    expect(answer).not.toMatch(/unsupported call|unknown tool/i);
    const rows = await waitFor(async () => {
      const r = await f.ledgerRowsSince(start);
      return r.length >= 3 ? r : undefined;
    });
    expect(rows.map((r) => [r.backend, r.model, r.status])).toEqual([
      ["anthropic", CLAUDE, "ok"],
      ["anthropic", CLAUDE, "ok"],
      ["anthropic", CLAUDE, "ok"],
    ]);
  });

  it("on Claude with a reasoning effort: Claude thinks, and its signed thinking goes back with the call's output in Codex's own conversation (store: false)", async () => {
    const before = f.anthropic.requests.length;
    f.anthropic.enqueue({ kind: "ok", text: 'TOOL: exec_command {"cmd":"echo thought-through"}' });
    f.anthropic.enqueue({ kind: "ok", text: "Done thinking." });
    const { events, last } = await runCodex("Run echo, carefully", CLAUDE, ["-c", 'model_reasoning_effort="high"']);
    expect(last).toBe("Done thinking.");
    // Codex showed Claude's thinking as its reasoning.
    expect(events.some((e) => e.type === "item.completed" && (e.item as { type?: string }).type === "reasoning" && JSON.stringify(e.item).includes(FAKE_THINKING.slice(0, 20)))).toBe(true);
    const [first, second] = f.anthropic.requests.slice(before).map((r) => r.body as unknown as Sent) as [Sent, Sent];
    // Claude 4.6 thinks adaptively at the effort Codex asked.
    expect(first).toMatchObject({ thinking: { type: "adaptive" }, output_config: { effort: "high" } });
    // The tool-result turn starts with the thinking as Claude signed it (the fake verified the signature): Codex sent the reasoning item back with encrypted_content.
    const turn = second.messages.at(-2)!;
    expect((turn.content as Array<Record<string, unknown>>)[0]).toEqual({ type: "thinking", thinking: FAKE_THINKING, signature: thinkingSignature(FAKE_THINKING) });
    expect(JSON.stringify(second.messages.at(-1))).toContain("thought-through");
  });
});
