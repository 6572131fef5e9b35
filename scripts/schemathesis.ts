// Schemathesis (PyPI), the OpenAPI fuzzer the API test runs against a live
// router: a pinned version in a venv outside the repo
// (~/.cache/switchyard/schemathesis-venv), installed on first use the way
// the LiteLLM bench venv is (bench/lib/litellm.ts). scripts/prepare.ts calls
// it before the tests, so a test never spends its time installing.
import { spawn } from "node:child_process";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

export const SCHEMATHESIS_VERSION = "4.32.5";
export const SCHEMATHESIS_VENV = process.env.SWITCHYARD_SCHEMATHESIS_VENV ?? path.join(os.homedir(), ".cache", "switchyard", "schemathesis-venv");

export interface RunResult {
  code: number | null;
  out: string;
}

/** Runs a command to its end; the whole output (bounded to `keep` characters, the tail). */
export function runTool(cmd: string, args: string[], opts: { timeoutMs?: number; env?: Record<string, string>; keep?: number; cwd?: string } = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    let out = "";
    const keep = opts.keep ?? 200_000;
    let child;
    try {
      child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...opts.env }, ...(opts.cwd ? { cwd: opts.cwd } : {}) });
    } catch (e) {
      return resolve({ code: null, out: String(e) });
    }
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : undefined;
    const take = (d: Buffer) => {
      out = (out + d.toString()).slice(-keep);
    };
    child.stdout.on("data", take);
    child.stderr.on("data", take);
    child.on("error", (e) => {
      clearTimeout(timer);
      resolve({ code: null, out: out + String(e) });
    });
    child.on("close", (code) => {
      clearTimeout(timer);
      resolve({ code, out });
    });
  });
}

async function findPython(): Promise<string | undefined> {
  const probe = "import sys, venv, ensurepip; sys.exit(0 if (3, 10) <= sys.version_info[:2] < (3, 15) else 1)";
  for (const c of [process.env.SCHEMATHESIS_PYTHON, "python3.12", "python3.11", "python3.13", "python3"].filter((c): c is string => !!c)) {
    if ((await runTool(c, ["-c", probe], { timeoutMs: 20_000 })).code === 0) return c;
  }
  return undefined;
}

/** The venv's `st` entry point, installing the pinned Schemathesis first if it is not there; throws saying why when it cannot. */
export async function ensureSchemathesis(log: (s: string) => void = () => {}): Promise<string> {
  const bin = path.join(SCHEMATHESIS_VENV, "bin", "st");
  const marker = path.join(SCHEMATHESIS_VENV, ".switchyard-installed");
  const want = `schemathesis==${SCHEMATHESIS_VERSION}`;
  if (existsSync(bin) && existsSync(marker) && readFileSync(marker, "utf8").trim() === want) return bin;
  log(`» installing ${want} into ${SCHEMATHESIS_VENV} (first use)`);
  const python = await findPython();
  if (!python) throw new Error("schemathesis needs Python 3.10-3.14 with the venv module (set SCHEMATHESIS_PYTHON)");
  rmSync(SCHEMATHESIS_VENV, { recursive: true, force: true });
  const venv = await runTool(python, ["-m", "venv", SCHEMATHESIS_VENV], { timeoutMs: 120_000 });
  if (venv.code !== 0) throw new Error(`${python} -m venv failed: ${venv.out.slice(-2000)}`);
  const pip = await runTool(path.join(SCHEMATHESIS_VENV, "bin", "pip"), ["install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off", want], {
    timeoutMs: 15 * 60_000,
    env: { PIP_NO_INPUT: "1" },
  });
  if (pip.code !== 0 || !existsSync(bin)) throw new Error(`pip install ${want} failed: ${pip.out.slice(-2000)}`);
  writeFileSync(marker, want);
  return bin;
}
