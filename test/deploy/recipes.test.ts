// deploy/docker: no Docker daemon here, so the images are never built in a
// test. What can be checked without one is checked: the recipe's stages and
// what they copy exist, they run the commands CI runs (scripts/,
// package.json), the engines land where the agent looks for them, the images
// run as non-root with a health check, and the worker entrypoint turns a
// node's invite into the right `switchyard worker` command.
import { spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { ROUTER_SEMI_SPACE_MB } from "@switchyard/router";
import { binaryPath } from "../../workers/agent/src/engine/binary.ts";
import { repoRoot } from "./kube.ts";

interface Instruction {
  op: string;
  args: string;
}
interface Stage {
  name: string;
  from: string;
  instructions: Instruction[];
}

/** The Dockerfile as stages of instructions (continuations joined, comments dropped). */
function parseDockerfile(text: string): { args: Record<string, string>; stages: Stage[] } {
  const lines: string[] = [];
  let current = "";
  for (const raw of text.split("\n")) {
    if (/^\s*#/.test(raw) && !current) continue;
    if (/^\s*#/.test(raw)) continue; // a comment inside a continued RUN
    if (raw.endsWith("\\")) {
      current += raw.slice(0, -1) + " ";
      continue;
    }
    current += raw;
    if (current.trim()) lines.push(current.trim());
    current = "";
  }
  const args: Record<string, string> = {};
  const stages: Stage[] = [];
  for (const line of lines) {
    const m = /^(\w+)\s+([\s\S]*)$/.exec(line);
    if (!m) continue;
    const op = m[1]!.toUpperCase();
    const rest = m[2]!.replace(/\s+/g, " ").trim();
    if (op === "FROM") {
      const f = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(rest)!;
      stages.push({ from: f[1]!, name: f[2] ?? `#${stages.length}`, instructions: [] });
    } else if (stages.length === 0 && op === "ARG") {
      const [k, v] = rest.split("=");
      args[k!] = v ?? "";
    } else {
      stages.at(-1)!.instructions.push({ op, args: rest });
    }
  }
  return { args, stages };
}

const dockerfileText = readFileSync(path.join(repoRoot, "deploy", "docker", "Dockerfile"), "utf8");
const { stages } = parseDockerfile(dockerfileText);
const stage = (name: string): Stage => {
  const s = stages.find((x) => x.name === name);
  if (!s) throw new Error(`no stage ${name} in deploy/docker/Dockerfile (has ${stages.map((x) => x.name).join(", ")})`);
  return s;
};
/** The stage and the stages it is built FROM, nearest first. */
function lineage(name: string): Stage[] {
  const out: Stage[] = [];
  for (let s: Stage | undefined = stage(name); s; s = stages.find((x) => x.name === s!.from)) out.push(s);
  return out;
}
/** The last value an instruction kind has for a target, inherited through FROM. */
function effective(target: string, op: string): string | undefined {
  for (const s of lineage(target)) {
    const i = s.instructions.filter((x) => x.op === op).at(-1);
    if (i) return i.args;
  }
  return undefined;
}
function envOf(target: string): Record<string, string> {
  const env: Record<string, string> = {};
  for (const s of lineage(target).reverse()) {
    for (const i of s.instructions.filter((x) => x.op === "ENV")) for (const [, k, v] of i.args.matchAll(/(\w+)=(\S+)/g)) env[k!] = v!;
  }
  return env;
}
const runs = (name: string) => stage(name).instructions.filter((i) => i.op === "RUN").map((i) => i.args);
const copies = (name: string) =>
  stage(name)
    .instructions.filter((i) => i.op === "COPY")
    .map((i) => {
      const parts = i.args.split(" ");
      const from = parts.find((p) => p.startsWith("--from="))?.slice("--from=".length);
      const paths = parts.filter((p) => !p.startsWith("--"));
      return { from, sources: paths.slice(0, -1), dest: paths.at(-1)! };
    });

const TARGETS = ["router", "worker", "worker-cuda"];

describe("deploy/docker/Dockerfile", () => {
  it("has the three targets the manifests and docs name, each with an entrypoint, a health check and a non-root user", () => {
    for (const t of TARGETS) {
      const user = effective(t, "USER");
      expect(user, `${t}: USER`).toBeDefined();
      expect(user!.split(":")[0], `${t} runs as root`).toMatch(/^[1-9]\d*$/);
      expect(effective(t, "ENTRYPOINT"), `${t}: ENTRYPOINT`).toBeDefined();
      expect(effective(t, "HEALTHCHECK"), `${t}: HEALTHCHECK`).toBeDefined();
    }
    expect(effective("router", "HEALTHCHECK")).toContain("/readyz");
    expect(effective("router", "CMD")).toContain('"router"');
    expect(effective("worker", "CMD")).toContain('"cpu"');
    expect(effective("worker-cuda", "CMD")).toContain('"cuda"');
    // The user the manifests run as.
    expect(effective("router", "USER")).toBe("10001:10001");
    // A router pod runs one process, started by this entrypoint: the router's semi-space, as forked router processes get it.
    expect(JSON.parse(effective("router", "ENTRYPOINT")!)).toEqual(["node", `--max-semi-space-size=${ROUTER_SEMI_SPACE_MB}`, "/app/apps/cli/bin/switchyard.mjs"]);
    expect(effective("app", "ENTRYPOINT")).toBe('["node", "/app/apps/cli/bin/switchyard.mjs"]');
  });

  it("copies only what exists in the repository, and from stages defined before", () => {
    const problems: string[] = [];
    stages.forEach((s, i) => {
      for (const c of copies(s.name)) {
        if (c.from) {
          if (!stages.slice(0, i).some((x) => x.name === c.from)) problems.push(`${s.name}: COPY --from=${c.from} (no earlier stage)`);
        } else for (const src of c.sources) if (!existsSync(path.join(repoRoot, src))) problems.push(`${s.name}: COPY ${src} (not in the repository)`);
      }
      if (!stages.slice(0, i).some((x) => x.name === s.from) && !/^\$\{\w+\}$|^[\w.\-/]+:[\w.\-]+$/.test(s.from)) problems.push(`${s.name}: FROM ${s.from} (unpinned)`);
    });
    expect(problems).toEqual([]);
  });

  it("installs npm dependencies as CI does (scripts/ensure-install.mjs) with every workspace's package.json in place", () => {
    const deps = stage("deps");
    expect(runs("deps").join(" && ")).toContain("node scripts/ensure-install.mjs");
    const pkg = JSON.parse(readFileSync(path.join(repoRoot, "package.json"), "utf8")) as { workspaces: string[] };
    const copied = copies(deps.name).flatMap((c) => c.sources);
    for (const ws of pkg.workspaces) expect(copied, `workspace ${ws}`).toContain(`${ws}/package.json`);
    expect(copied).toEqual(expect.arrayContaining(["package.json", "package-lock.json", "scripts/ensure-install.mjs"]));
    // The npm CI uses (package.json's allowScripts is an npm 11 setting).
    const npm = spawnSync("npm", ["--version"], { encoding: "utf8" }).stdout.trim();
    expect(dockerfileText).toContain(`ARG NPM_VERSION=${npm}`);
  });

  it("builds the CPU engine with the agent's cargo command and the CUDA engine with scripts/build-engine-cuda.sh", () => {
    const binary = readFileSync(path.join(repoRoot, "workers", "agent", "src", "engine", "binary.ts"), "utf8");
    expect(binary).toContain('["build", "--release", "--bin", "switchyard-engine"]');
    const cpu = runs("engine-cpu").join(" ");
    expect(cpu).toContain("cd workers/engine");
    expect(cpu).toContain("cargo build --release --bin switchyard-engine");
    expect(runs("engine-cuda").join(" ")).toContain("bash scripts/build-engine-cuda.sh");
    // build.rs compiles ../../proto: the engine stages carry it.
    for (const s of ["engine-cpu", "engine-cuda"]) expect(copies(s).flatMap((c) => c.sources)).toContain("proto/switchyard");
  });

  it("puts the engines where the agent looks for them (binaryPath), the CPU build in both worker images", () => {
    const target = envOf("worker").CARGO_TARGET_DIR;
    expect(target).toBeDefined();
    const saved = process.env.CARGO_TARGET_DIR;
    process.env.CARGO_TARGET_DIR = target;
    try {
      const dests = (t: string) => copies(t).filter((c) => c.from?.startsWith("engine-")).map((c) => c.dest);
      expect(dests("worker")).toEqual([binaryPath("cpu")]);
      expect(dests("worker-cuda").sort()).toEqual([binaryPath("cpu"), binaryPath("cuda")].sort());
    } finally {
      if (saved === undefined) delete process.env.CARGO_TARGET_DIR;
      else process.env.CARGO_TARGET_DIR = saved;
    }
    // No engine sources in a runtime image: the agent never tries to rebuild.
    for (const t of ["app", "worker-base", "worker", "worker-cuda"]) expect(copies(t).flatMap((c) => c.sources).some((s) => s.startsWith("workers/engine"))).toBe(false);
  });

  it("ships the CUDA libraries the CUDA engine links, at the CUDA version scripts/build-engine-cuda.sh builds against", () => {
    const script = readFileSync(path.join(repoRoot, "scripts", "build-engine-cuda.sh"), "utf8");
    const sonames = [...script.matchAll(/\("(\w+)", "(lib[\w.]+)"\)/g)].map((m) => m[1]!);
    expect(sonames.sort()).toEqual(["cublas", "cublasLt", "cuda", "cudart", "curand", "nvrtc"].sort());
    const pip = runs("cuda-libs").join(" ");
    // libcuda.so.1 is the driver's (the NVIDIA container runtime mounts it); the rest come from these wheels.
    const wheelFor: Record<string, string> = { cudart: "nvidia-cuda-runtime", cublas: "nvidia-cublas", cublasLt: "nvidia-cublas", curand: "nvidia-curand", nvrtc: "nvidia-cuda-nvrtc" };
    for (const lib of sonames.filter((s) => s !== "cuda")) expect(pip, lib).toMatch(new RegExp(`${wheelFor[lib]}==\\d`));
    const runtime = /nvidia-cuda-runtime==([\d.]+)/;
    expect(runtime.exec(pip)?.[1]).toBe(runtime.exec(script)?.[1]);
    expect(envOf("worker-cuda").LD_LIBRARY_PATH).toContain("/opt/cuda13/lib");
  });

  it("prebuilds the CLI bundle from every source directory it is built from, and bakes in the ConfigMap's switchyard.yaml", () => {
    const bin = readFileSync(path.join(repoRoot, "apps", "cli", "bin", "switchyard.mjs"), "utf8");
    const sources = JSON.parse(/const sources = (\[[^\]]*\])/.exec(bin)![1]!) as string[];
    const copied = copies("app").filter((c) => !c.from).flatMap((c) => c.sources);
    for (const s of sources) expect(copied.some((c) => s === c || s.startsWith(`${c}/`)), `${s} is bundled but not copied`).toBe(true);
    // Built as root in a mkdtemp (0700) directory: the image's user must be able to read it.
    expect(runs("app").join(" ")).toMatch(/node apps\/cli\/bin\/switchyard\.mjs --help .*&& chmod -R a\+rX dist/);
    expect(copies("app")).toContainEqual({ from: undefined, sources: ["deploy/k8s/base/switchyard.yaml"], dest: "/etc/switchyard/switchyard.yaml" });
  });

  it("keeps installed and built trees and the operator's secrets out of the build context", () => {
    const ignore = readFileSync(path.join(repoRoot, "deploy", "docker", "Dockerfile.dockerignore"), "utf8").split("\n");
    for (const p of [".git", "**/node_modules", "dist", "target", ".switchyard", "deploy/k8s/overlays/*/secrets/*.env"]) expect(ignore).toContain(p);
  });
});

describe("deploy/docker/worker-entrypoint.sh", () => {
  const scratch = mkdtempSync(path.join(os.tmpdir(), "sy-entrypoint-"));
  afterAll(() => rmSync(scratch, { recursive: true, force: true }));
  // Stands in for the CLI: prints the arguments and the environment it got.
  const fakeCli = path.join(scratch, "cli.mjs");
  writeFileSync(
    fakeCli,
    "const pick = ['REDIS_URL','SWITCHYARD_WORKER_TOKEN','SWITCHYARD_WORKER_FENCING_KEY'];\n" +
      "process.stdout.write(JSON.stringify({ argv: process.argv.slice(2), env: Object.fromEntries(pick.map((k) => [k, process.env[k] ?? null])) }));\n",
  );
  const entrypoint = path.join(repoRoot, "deploy", "docker", "worker-entrypoint.sh");
  const run = (args: string[], env: Record<string, string>) =>
    spawnSync("sh", [entrypoint, ...args], { encoding: "utf8", env: { PATH: process.env.PATH!, SWITCHYARD_CLI: fakeCli, ...env } });

  it("is executable", () => {
    expect(spawnSync("test", ["-x", entrypoint]).status).toBe(0);
  });

  it("reads this node's invite from the invites directory and passes id, advertise URL, port and models to `switchyard worker`", () => {
    const invites = path.join(scratch, "invites");
    spawnSync("mkdir", ["-p", invites]);
    writeFileSync(path.join(invites, "gpu-node-1.redis-url"), "redis://sy-worker-gpu-node-1:pw@redis:6379\n");
    writeFileSync(path.join(invites, "gpu-node-1.token"), "call-secret-1\n");
    writeFileSync(path.join(invites, "gpu-node-1.fencing-key"), "fk-1\n");
    writeFileSync(path.join(invites, "gpu-node-2.token"), "someone-else\n");
    const r = run(["--device", "cuda"], {
      SWITCHYARD_WORKER_ID: "gpu-node-1",
      SWITCHYARD_INVITES: invites,
      SWITCHYARD_ADVERTISE: "http://10.1.2.3:9100",
      SWITCHYARD_WORKER_PORT: "9100",
      SWITCHYARD_MODELS: "smollm2-135m-instruct all-minilm-l6-v2",
    });
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    expect(JSON.parse(r.stdout)).toEqual({
      argv: ["worker", "--device", "cuda", "--id", "gpu-node-1", "--advertise", "http://10.1.2.3:9100", "--port", "9100", "--model", "smollm2-135m-instruct", "--model", "all-minilm-l6-v2"],
      env: { REDIS_URL: "redis://sy-worker-gpu-node-1:pw@redis:6379", SWITCHYARD_WORKER_TOKEN: "call-secret-1", SWITCHYARD_WORKER_FENCING_KEY: "fk-1" },
    });
    // Every flag it passes is one `switchyard worker` parses.
    const main = readFileSync(path.join(repoRoot, "apps", "cli", "src", "main.ts"), "utf8");
    for (const flag of ["device", "id", "advertise", "port", "model"]) expect(main).toMatch(new RegExp(`\\b"?${flag}"?: \\{ type:`));
  });

  it("refuses to start without this node's invite, naming the node and the command that makes one (exit 2)", () => {
    const invites = path.join(scratch, "empty");
    spawnSync("mkdir", ["-p", invites]);
    const r = run([], { SWITCHYARD_WORKER_ID: "gpu-node-9", SWITCHYARD_INVITES: invites });
    expect(r.status).toBe(2);
    expect(r.stdout).toBe("");
    expect(r.stderr).toContain("gpu-node-9");
    expect(r.stderr).toContain("switchyard workers invite gpu-node-9");
    const noId = run([], { SWITCHYARD_INVITES: invites });
    expect(noId.status).toBe(2);
    expect(noId.stderr).toContain("SWITCHYARD_WORKER_ID");
  });

  it("without invites, passes the environment and the flags through as they are", () => {
    const r = run(["--device", "cpu", "--redis", "redis://x:6379"], { REDIS_URL: "redis://env:6379" });
    expect(r.status).toBe(0);
    const out = JSON.parse(r.stdout) as { argv: string[]; env: Record<string, string | null> };
    expect(out.argv).toEqual(["worker", "--device", "cpu", "--redis", "redis://x:6379"]);
    expect(out.env.REDIS_URL).toBe("redis://env:6379");
  });
});
