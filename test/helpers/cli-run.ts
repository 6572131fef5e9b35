// Runs the `switchyard` CLI as users do (its own process, from the repo
// root) and collects its output — for the benches that run in CI size.
import { spawn } from "node:child_process";
import path from "node:path";

const root = path.resolve(import.meta.dirname, "../..");

export async function runCli(args: string[]): Promise<{ code: number | null; out: string; err: string }> {
  const child = spawn(process.execPath, [path.join(root, "apps/cli/bin/switchyard.mjs"), ...args], { cwd: root, stdio: ["ignore", "pipe", "pipe"] });
  let out = "";
  let err = "";
  child.stdout.on("data", (d: Buffer) => (out += d.toString()));
  child.stderr.on("data", (d: Buffer) => (err += d.toString()));
  const code = await new Promise<number | null>((resolve) => child.once("exit", resolve));
  // A failing bench shows its tables and the tail of its log in the test output.
  if (code !== 0) console.error(`${out}\n${err.slice(-4000)}`);
  return { code, out, err };
}
