// The coding agents' CLIs the end-to-end tests drive against a router, as
// their users run them: Claude Code (Anthropic's, on /v1/messages,
// test/router/claude-code.test.ts), Codex CLI (OpenAI's, on /v1/responses,
// test/router/codex.test.ts) and Gemini CLI (Google's, on /v1beta/models,
// test/router/gemini-cli.test.ts). Each is pinned and installed from npm
// outside the repo (~/.cache/switchyard/<name>-<version>); Claude Code's and
// Codex's npm packages carry a native binary in a per-platform optional
// package, Gemini CLI's is a Node bundle. scripts/prepare.ts installs them
// before the tests, so no test waits on npm.
import { existsSync, mkdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { runTool } from "./pyvenv.ts";

export const CLAUDE_CODE_VERSION = "2.1.197";
export const CODEX_VERSION = "0.171.0";
export const GEMINI_CLI_VERSION = "0.61.0";

interface AgentCli {
  /** The folder name under ~/.cache/switchyard (with the version) and the log prefix. */
  name: string;
  pkg: string;
  version: string;
  /** What npm fetches, for the log. */
  size: string;
  /** The environment variable naming a folder where it is installed already. */
  dirEnv: string;
  /** The native binary an install at `dir` holds, if it is there. */
  binaryIn: (dir: string) => string | undefined;
}

const firstExisting = (paths: string[]) => paths.find((p) => existsSync(p));

const claudeCode: AgentCli = {
  name: "claude-code",
  pkg: "@anthropic-ai/claude-code",
  version: CLAUDE_CODE_VERSION,
  size: "~240 MB",
  dirEnv: "SWITCHYARD_CLAUDE_CODE_DIR",
  binaryIn: (dir) => {
    const base = path.join(dir, "node_modules", "@anthropic-ai");
    return firstExisting([path.join(base, `claude-code-${process.platform}-${process.arch}`, "claude"), path.join(base, "claude-code", "bin", "claude.exe")]);
  },
};

/** Rust's target triple of this host, as Codex's platform packages name their vendor folder. */
function codexTriple(): string {
  const cpu = process.arch === "arm64" ? "aarch64" : "x86_64";
  if (process.platform === "darwin") return `${cpu}-apple-darwin`;
  return `${cpu}-unknown-linux-musl`;
}

const codex: AgentCli = {
  name: "codex",
  pkg: "@openai/codex",
  version: CODEX_VERSION,
  size: "~420 MB",
  dirEnv: "SWITCHYARD_CODEX_DIR",
  binaryIn: (dir) => firstExisting([path.join(dir, "node_modules", "@openai", `codex-${process.platform}-${process.arch}`, "vendor", codexTriple(), "bin", "codex")]),
};

const geminiCli: AgentCli = {
  name: "gemini-cli",
  pkg: "@google/gemini-cli",
  version: GEMINI_CLI_VERSION,
  size: "~100 MB",
  dirEnv: "SWITCHYARD_GEMINI_CLI_DIR",
  // A Node bundle, run with this Node (it asks for Node 20 or later).
  binaryIn: (dir) => firstExisting([path.join(dir, "node_modules", "@google", "gemini-cli", "bundle", "gemini.js")]),
};

/** The pinned CLI's binary, installing it first if it is not there; throws saying why when it cannot. */
async function ensureAgentCli(cli: AgentCli, log: (s: string) => void): Promise<string> {
  const tag = `[${cli.name}]`;
  const dir = process.env[cli.dirEnv] ?? path.join(os.homedir(), ".cache", "switchyard", `${cli.name}-${cli.version}`);
  const ready = cli.binaryIn(dir);
  if (ready) return ready;
  log(`${tag} npm install ${cli.pkg}@${cli.version} into ${dir} (${cli.size}, once)`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const t0 = Date.now();
  // npm prints nothing while it fetches the one large package: say it is still at it.
  const beat = setInterval(() => log(`${tag} npm still installing, ${((Date.now() - t0) / 1000).toFixed(0)}s`), 15_000);
  let run;
  try {
    run = await runTool("npm", ["install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save", "--loglevel=error", `${cli.pkg}@${cli.version}`], {
      timeoutMs: 600_000,
      onLine: (l) => log(`${tag} ${l}`),
    });
  } finally {
    clearInterval(beat);
  }
  const bin = cli.binaryIn(dir);
  if (run.code !== 0 || !bin) {
    throw new Error(
      `installing ${cli.pkg} ${cli.version} failed (npm exit ${String(run.code)}; no binary for ${process.platform}-${process.arch}); ` +
        `check that registry.npmjs.org answers, or point ${cli.dirEnv} at a folder where it is installed:\n${run.out.slice(-2000)}`,
    );
  }
  log(`${tag} ready in ${((Date.now() - t0) / 1000).toFixed(0)}s`);
  return bin;
}

/** The pinned Claude Code binary (installed first if need be). */
export function ensureClaudeCode(log: (s: string) => void = () => {}): Promise<string> {
  return ensureAgentCli(claudeCode, log);
}

/** The pinned Codex CLI binary (installed first if need be). */
export function ensureCodex(log: (s: string) => void = () => {}): Promise<string> {
  return ensureAgentCli(codex, log);
}

/** The pinned Gemini CLI's entry script (installed first if need be): run it with `node`. */
export function ensureGeminiCli(log: (s: string) => void = () => {}): Promise<string> {
  return ensureAgentCli(geminiCli, log);
}
