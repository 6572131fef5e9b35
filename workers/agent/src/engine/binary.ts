// Finds the engine binary, building it with cargo when it is missing or older
// than its sources. CPU builds use the host's instruction set
// (workers/engine/.cargo/config.toml, picked up because cargo runs with its
// cwd there); `cuda`/`metal` builds go to their own target subdirectory so a
// CPU binary is always available to fall back to.
import { spawn } from "node:child_process";
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { engineTargetDir } from "../config.ts";

/** workers/engine, found from this module (sources or the dist/ bundle). */
function findEngineDir(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    if (existsSync(path.join(dir, "workers", "engine", "Cargo.toml"))) return path.join(dir, "workers", "engine");
    dir = path.dirname(dir);
  }
  return path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../../engine");
}

export const engineDir = findEngineDir();

export type EngineFlavor = "cpu" | "cuda" | "metal";

/** Where cargo builds the engine (the agent's config reads CARGO_TARGET_DIR). */
export const targetDir = engineTargetDir;

export function binaryPath(flavor: EngineFlavor): string {
  const sub = flavor === "cpu" ? "" : `${flavor}/`;
  return path.join(targetDir(), `${sub}release`, "switchyard-engine");
}

function newestSource(dir: string): number {
  let newest = 0;
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) {
        if (e.name !== "target" && e.name !== "tests") walk(p);
      } else newest = Math.max(newest, statSync(p).mtimeMs);
    }
  };
  walk(path.join(dir, "src"));
  for (const f of ["Cargo.toml", "Cargo.lock", "build.rs"]) if (existsSync(path.join(dir, f))) newest = Math.max(newest, statSync(path.join(dir, f)).mtimeMs);
  const proto = path.resolve(dir, "../../proto/switchyard/engine/v1/engine.proto");
  if (existsSync(proto)) newest = Math.max(newest, statSync(proto).mtimeMs);
  return newest;
}

export function isStale(flavor: EngineFlavor): boolean {
  const bin = binaryPath(flavor);
  if (!existsSync(bin)) return true;
  return existsSync(path.join(engineDir, "src")) && newestSource(engineDir) > statSync(bin).mtimeMs;
}

/** Runs cargo, showing one progress line per compiled crate. */
export async function buildEngine(flavor: EngineFlavor, log: (line: string) => void = (l) => process.stderr.write(l + "\n")): Promise<string> {
  const args = ["build", "--release", "--bin", "switchyard-engine"];
  const env: NodeJS.ProcessEnv = { ...process.env, CARGO_TARGET_DIR: flavor === "cpu" ? targetDir() : path.join(targetDir(), flavor) };
  if (flavor !== "cpu") args.push("--features", flavor);
  log(`» building the ${flavor} engine (cargo ${args.join(" ")}); the first build takes several minutes`);
  const child = spawn("cargo", args, { cwd: engineDir, env, stdio: ["ignore", "inherit", "pipe"] });
  let compiled = 0;
  let tail = "";
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (d: string) => {
    tail = (tail + d).slice(-6000);
    for (const line of d.split("\n")) {
      const m = /^\s*Compiling (\S+ v\S+)/.exec(line);
      if (m) log(`  [${++compiled}] compiling ${m[1]}`);
      else if (/^(error|warning: unused)/.test(line.trim())) log(`  ${line.trim()}`);
    }
  });
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", resolve);
  });
  if (code !== 0) throw new Error(`cargo build failed (exit ${code}):\n${tail}`);
  log(`» engine ready: ${binaryPath(flavor)}`);
  return binaryPath(flavor);
}

/** An explicit binary, or the cached build (rebuilt when stale). */
export async function ensureEngine(flavor: EngineFlavor, explicit?: string): Promise<string> {
  if (explicit) {
    if (!existsSync(explicit)) throw new Error(`engine binary ${explicit} does not exist`);
    return explicit;
  }
  if (!isStale(flavor)) return binaryPath(flavor);
  if (!existsSync(path.join(engineDir, "Cargo.toml"))) throw new Error(`no engine binary at ${binaryPath(flavor)} and no sources to build it from`);
  return buildEngine(flavor);
}
