// Running the Python tools the benches install (LiteLLM, llama-cpp-python):
// a command to its end with its output's tail kept and each line streamed,
// and the first Python on PATH that can make a venv. The test scripts have
// their own in scripts/pyvenv.ts (the room boundaries keep scripts out of
// bench and bench out of scripts).
import { spawn } from "node:child_process";

export interface ToolRun {
  code: number | null;
  /** The output's tail (stdout and stderr interleaved). */
  out: string;
}

export function runTool(cmd: string, args: string[], opts: { onLine?: (line: string) => void; timeoutMs?: number; env?: Record<string, string>; keep?: number } = {}): Promise<ToolRun> {
  return new Promise((resolve) => {
    let out = "";
    let partial = "";
    const keep = opts.keep ?? 8000;
    let child;
    try {
      child = spawn(cmd, args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, ...opts.env } });
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

/** The first of `envPython` (when set) and the usual python3.x names that runs, has venv + ensurepip, and is within [min, below). */
export async function findPython(envPython: string | undefined, min: [number, number], below: [number, number]): Promise<string | undefined> {
  const probe = `import sys, venv, ensurepip; sys.exit(0 if (${min.join(", ")}) <= sys.version_info[:2] < (${below.join(", ")}) else 1)`;
  for (const c of [envPython, "python3.12", "python3.11", "python3.13", "python3.10", "python3"].filter((c): c is string => !!c)) {
    if ((await runTool(c, ["-c", probe], { timeoutMs: 20_000 })).code === 0) return c;
  }
  return undefined;
}
