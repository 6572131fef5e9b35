// Pinned PyPI tools in venvs outside the repo (~/.cache/switchyard/<name>-venv),
// installed on first use with progress and reused while the pins are the
// same: the OpenAPI fuzzer (scripts/schemathesis.ts) and the Python clients
// the e2e tests drive (scripts/python-clients.ts). scripts/prepare.ts installs
// them before the tests, so a test never spends its time in pip.
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";

export interface RunResult {
  code: number | null;
  out: string;
}

/** Runs a command to its end; the whole output (bounded to `keep` characters, the tail), each line to `onLine` as it comes. */
export function runTool(
  cmd: string,
  args: string[],
  opts: { timeoutMs?: number; env?: Record<string, string>; keep?: number; cwd?: string; onLine?: (line: string) => void } = {},
): Promise<RunResult> {
  return new Promise((resolve) => {
    let out = "";
    let partial = "";
    const keep = opts.keep ?? 200_000;
    let child;
    try {
      child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...opts.env }, ...(opts.cwd ? { cwd: opts.cwd } : {}) });
    } catch (e) {
      return resolve({ code: null, out: String(e) });
    }
    const timer = opts.timeoutMs ? setTimeout(() => child.kill("SIGKILL"), opts.timeoutMs) : undefined;
    const take = (d: Buffer) => {
      const s = d.toString();
      out = (out + s).slice(-keep);
      if (!opts.onLine) return;
      const lines = (partial + s).split(/\r?\n/);
      partial = lines.pop() ?? "";
      for (const l of lines) if (l.trim()) opts.onLine(l);
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

export interface PyVenvSpec {
  /** Names the venv (~/.cache/switchyard/<name>-venv) and the log lines. */
  name: string;
  /** What pip installs, each pinned (`pkg==1.2.3`). */
  requirements: string[];
  /** A constraints file pinning everything else, from a known-good install; dropped (with a note) if it no longer resolves. */
  constraints?: string;
  /** The venv's directory, when not the default. */
  dir?: string;
  /** An environment variable naming the Python to build the venv with, tried first. */
  pythonVar?: string;
  /** A file under the venv's bin/ that must exist once installed (`python` if not given). */
  entry?: string;
}

export interface PyVenv {
  dir: string;
  /** bin/<name> in the venv. */
  bin(name: string): string;
  python: string;
}

async function findPython(pythonVar?: string): Promise<string | undefined> {
  const probe = "import sys, venv, ensurepip; sys.exit(0 if (3, 10) <= sys.version_info[:2] < (3, 15) else 1)";
  const env = pythonVar ? process.env[pythonVar] : undefined;
  for (const c of [env, "python3.12", "python3.11", "python3.13", "python3"].filter((c): c is string => !!c)) {
    if ((await runTool(c, ["-c", probe], { timeoutMs: 20_000 })).code === 0) return c;
  }
  return undefined;
}

const lastLines = (s: string, n = 3) => s.trim().split("\n").slice(-n).join(" | ");

/** The venv with `spec`'s pinned packages, installing them first if they are not there; throws saying why when it cannot. */
export async function ensurePyVenv(spec: PyVenvSpec, log: (s: string) => void = () => {}): Promise<PyVenv> {
  const dir = spec.dir ?? path.join(os.homedir(), ".cache", "switchyard", `${spec.name}-venv`);
  const venv: PyVenv = { dir, bin: (name) => path.join(dir, "bin", name), python: path.join(dir, "bin", "python") };
  const entry = venv.bin(spec.entry ?? "python");
  const marker = path.join(dir, ".switchyard-installed");
  const constraints = spec.constraints && existsSync(spec.constraints) ? readFileSync(spec.constraints, "utf8") : "";
  // schemathesis' marker predates constraints: a venv without them keeps the plain requirement line.
  const want = spec.requirements.join(" ") + (constraints ? ` ${createHash("sha256").update(constraints).digest("hex").slice(0, 16)}` : "");
  if (existsSync(entry) && existsSync(marker) && readFileSync(marker, "utf8").trim() === want) return venv;

  const t0 = performance.now();
  const elapsed = () => `${((performance.now() - t0) / 1000).toFixed(0)}s`;
  log(`» installing ${spec.requirements.join(" ")} into ${dir} (first use)`);
  const python = await findPython(spec.pythonVar);
  if (!python) throw new Error(`${spec.name} needs Python 3.10-3.14 with the venv module${spec.pythonVar ? ` (set ${spec.pythonVar})` : ""}`);
  rmSync(dir, { recursive: true, force: true });
  const made = await runTool(python, ["-m", "venv", dir], { timeoutMs: 120_000 });
  if (made.code !== 0) throw new Error(`${python} -m venv failed: ${made.out.slice(-2000)}`);

  const pipInstall = async (withConstraints: boolean) => {
    let collected = 0;
    const beat = setInterval(() => log(`» ${spec.name} pip: still working, ${collected} packages resolved, ${elapsed()}`), 15_000);
    const args = ["install", "--disable-pip-version-check", "--no-input", "--progress-bar", "off", ...spec.requirements];
    if (withConstraints) args.push("-c", spec.constraints!);
    const r = await runTool(venv.bin("pip"), args, {
      timeoutMs: 20 * 60_000,
      env: { PIP_NO_INPUT: "1" },
      onLine: (l) => {
        if (l.startsWith("Collecting ")) {
          collected++;
          if (collected === 1 || collected % 25 === 0) log(`» ${spec.name} pip: ${collected} packages resolved (${l.slice(11).split(/[ <>=!~;[(]/)[0]}…), ${elapsed()}`);
        } else if (l.startsWith("Installing collected packages")) log(`» ${spec.name} pip: installing ${collected} packages, ${elapsed()}`);
        else if (l.startsWith("ERROR")) log(`» ${spec.name} pip: ${l}`);
      },
    });
    clearInterval(beat);
    return r;
  };
  let r = await pipInstall(constraints !== "");
  if (r.code !== 0 && constraints !== "") {
    log(`» ${spec.name}: the pinned dependency set did not install (${lastLines(r.out, 1)}); retrying with only ${spec.requirements.join(" ")} pinned`);
    r = await pipInstall(false);
  }
  if (r.code !== 0 || !existsSync(entry)) throw new Error(`pip install ${spec.requirements.join(" ")} failed: ${r.out.slice(-2000)}`);
  writeFileSync(marker, want + "\n");
  log(`» ${spec.name} ready in ${elapsed()}`);
  return venv;
}
