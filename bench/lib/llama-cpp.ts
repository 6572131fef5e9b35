// llama.cpp compiled for this CPU, the stricter reference of `bench engine`
// (issue 17): a pinned llama-cpp-python built from source with
// GGML_NATIVE=ON in a venv outside the repo (~/.cache/switchyard/llama-cpp-venv),
// installed on first use the way the Schemathesis venv is
// (scripts/schemathesis.ts), and driven by bench/reference/llama_cpp_speed.py
// through llama.cpp's low-level batch/decode API. A -march=native build only
// runs on the CPU it was built for, so the venv's marker names that CPU and a
// different one rebuilds.
import { createHash } from "node:crypto";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { findPython, runTool as run } from "./run-tool.ts";

export const LLAMA_CPP_PYTHON_VERSION = "0.3.36";
export const LLAMA_CPP_VENV = process.env.SWITCHYARD_LLAMA_CPP_VENV ?? path.join(os.homedir(), ".cache", "switchyard", "llama-cpp-venv");
// Only libllama and libggml are used: the multimodal library (mtmd, a third of the build) is left out.
const CMAKE_ARGS = "-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF";
// -march=native minus AMX: on the Sapphire Rapids VM this was built on, the
// AMX matmul of this llama.cpp died with SIGILL at its first tileloadd
// (a stand-alone ldtilecfg/tileloadd program runs there, so it is ggml's AMX
// path, not the CPU). Everything else -march=native gives (AVX-512 VNNI,
// BF16, the repacked Q4 kernels) stays on.
const NATIVE_FLAGS = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16";

/** The CPU a native build is good for: model name and feature flags (Linux), else the model name. */
export function cpuFingerprint(): string {
  let id = os.cpus()[0]?.model ?? "unknown";
  try {
    const info = readFileSync("/proc/cpuinfo", "utf8");
    const first = info.split("\n\n")[0] ?? "";
    const flags = /^flags\s*:\s*(.*)$/m.exec(first)?.[1] ?? "";
    id += ` ${createHash("sha256").update(flags).digest("hex").slice(0, 12)}`;
  } catch {
    // not Linux: the model name alone
  }
  return `${os.arch()} ${id}`;
}

const marker = () => path.join(LLAMA_CPP_VENV, ".switchyard-installed");
const wanted = () => `llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION} CMAKE_ARGS="${CMAKE_ARGS}" CFLAGS="${NATIVE_FLAGS}" cpu=${cpuFingerprint()}`;
const venvPython = () => path.join(LLAMA_CPP_VENV, "bin", "python");

/** The venv's python when the pinned native build for this CPU is installed, else undefined. */
export function installedLlamaCpp(): string | undefined {
  const py = venvPython();
  return existsSync(py) && existsSync(marker()) && readFileSync(marker(), "utf8").trim() === wanted() ? py : undefined;
}

/**
 * The venv's python with the native llama.cpp, building it first when it is
 * not there (pip compiles llama.cpp: minutes; `log` gets the build's
 * progress). Throws saying why when it cannot.
 */
export async function ensureLlamaCpp(log: (s: string) => void = () => {}): Promise<string> {
  const have = installedLlamaCpp();
  if (have) return have;
  const want = `llama-cpp-python==${LLAMA_CPP_PYTHON_VERSION}`;
  const cores = os.availableParallelism();
  log(`» building ${want} (llama.cpp with ${CMAKE_ARGS}) into ${LLAMA_CPP_VENV}: first use only, ~8 min on 2 cores`);
  const python = await findPython(process.env.LLAMA_CPP_PYTHON, [3, 9], [3, 15]);
  if (!python) throw new Error("the native llama.cpp reference needs Python 3.9-3.14 with the venv module (set LLAMA_CPP_PYTHON)");
  rmSync(LLAMA_CPP_VENV, { recursive: true, force: true });
  const venv = await run(python, ["-m", "venv", LLAMA_CPP_VENV], { timeoutMs: 120_000 });
  if (venv.code !== 0) throw new Error(`${python} -m venv failed: ${venv.out.slice(-2000)}`);
  const t0 = Date.now();
  let lastStep = -1;
  const onLine = (line: string) => {
    // ninja prints [done/total] per object; report every tenth of the build.
    const m = /^\s*\[(\d+)\/(\d+)\]/.exec(line);
    if (m) {
      const step = Math.floor((10 * Number(m[1])) / Number(m[2]));
      if (step !== lastStep) {
        lastStep = step;
        log(`  compiling llama.cpp: ${m[1]}/${m[2]} (${Math.round((Date.now() - t0) / 1000)} s)`);
      }
    } else if (/^(Collecting|Downloading|\s*Building wheel|Successfully)/.test(line.trim())) {
      log(`  ${line.trim().slice(0, 160)}`);
    }
  };
  // Verbose so that ninja's progress comes through; no cache, so a wheel
  // built for another CPU is never reused.
  const pip = await run(path.join(LLAMA_CPP_VENV, "bin", "pip"), ["install", "-v", "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--progress-bar", "off", "--no-binary", "llama-cpp-python", want], {
    onLine,
    timeoutMs: 60 * 60_000,
    // CFLAGS/CXXFLAGS seed CMake's CMAKE_C(XX)_FLAGS; an explicit -mno-* wins over -march=native in either order.
    env: { PIP_NO_INPUT: "1", CMAKE_ARGS, CFLAGS: NATIVE_FLAGS, CXXFLAGS: NATIVE_FLAGS, FORCE_CMAKE: "1", CMAKE_BUILD_PARALLEL_LEVEL: String(cores) },
  });
  if (pip.code !== 0) throw new Error(`pip install ${want} failed (exit ${pip.code}): ${pip.out.slice(-3000)}`);
  const check = await run(venvPython(), ["-c", "import llama_cpp; print(llama_cpp.__version__)"], { timeoutMs: 60_000 });
  if (check.code !== 0) throw new Error(`the built llama_cpp does not import: ${check.out.slice(-2000)}`);
  writeFileSync(marker(), wanted());
  log(`» llama.cpp built in ${Math.round((Date.now() - t0) / 1000)} s`);
  return venvPython();
}

/** How to get the native reference, for messages. */
export const LLAMA_CPP_INSTALL_HINT = "npx switchyard bench engine --reference native (builds it on first use, ~8 min on 2 cores)";
