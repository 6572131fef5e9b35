// Claude Code (Anthropic's coding agent CLI), pinned, installed from npm
// outside the repo (~/.cache/switchyard/claude-code-<version>) for
// test/router/claude-code.test.ts, which points it at a router with
// ANTHROPIC_BASE_URL: the client /v1/messages has to serve as it is. Its npm
// package carries the native binary in a per-platform optional package;
// scripts/prepare.ts installs it before the tests, so no test waits on npm.
import { existsSync, mkdirSync, rmSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { runTool } from "./pyvenv.ts";

export const CLAUDE_CODE_VERSION = "2.1.197";

/** The native binary an install at `dir` holds, if it is there. */
function binaryIn(dir: string): string | undefined {
  const base = path.join(dir, "node_modules", "@anthropic-ai");
  for (const p of [path.join(base, `claude-code-${process.platform}-${process.arch}`, "claude"), path.join(base, "claude-code", "bin", "claude.exe")]) {
    if (existsSync(p)) return p;
  }
  return undefined;
}

/** The pinned Claude Code binary, installing it first if it is not there; throws saying why when it cannot. */
export async function ensureClaudeCode(log: (s: string) => void = () => {}): Promise<string> {
  const dir = process.env.SWITCHYARD_CLAUDE_CODE_DIR ?? path.join(os.homedir(), ".cache", "switchyard", `claude-code-${CLAUDE_CODE_VERSION}`);
  const ready = binaryIn(dir);
  if (ready) return ready;
  log(`[claude-code] npm install @anthropic-ai/claude-code@${CLAUDE_CODE_VERSION} into ${dir} (~240 MB, once)`);
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const t0 = Date.now();
  // npm prints nothing while it fetches the one large package: say it is still at it.
  const beat = setInterval(() => log(`[claude-code] npm still installing, ${((Date.now() - t0) / 1000).toFixed(0)}s`), 15_000);
  let run;
  try {
    run = await runTool("npm", ["install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save", "--loglevel=error", `@anthropic-ai/claude-code@${CLAUDE_CODE_VERSION}`], {
      timeoutMs: 600_000,
      onLine: (l) => log(`[claude-code] ${l}`),
    });
  } finally {
    clearInterval(beat);
  }
  const bin = binaryIn(dir);
  if (run.code !== 0 || !bin) {
    throw new Error(
      `installing Claude Code ${CLAUDE_CODE_VERSION} failed (npm exit ${String(run.code)}; no binary for ${process.platform}-${process.arch}); ` +
        `check that registry.npmjs.org answers, or point SWITCHYARD_CLAUDE_CODE_DIR at a folder where it is installed:\n${run.out.slice(-2000)}`,
    );
  }
  log(`[claude-code] ready in ${((Date.now() - t0) / 1000).toFixed(0)}s`);
  return bin;
}
