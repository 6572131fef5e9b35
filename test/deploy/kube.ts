// Rendering deploy/k8s with kubectl's kustomize and validating what comes out
// against the Kubernetes JSON schemas that the PyPI package
// kubernetes-validate ships (strict: unknown fields are errors), installed
// pinned into a venv under ~/.cache/switchyard on first use.
import { execFileSync, spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { cpSync, existsSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parse as parseYaml, parseAllDocuments, stringify as stringifyYaml } from "yaml";

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const here = path.join(repoRoot, "test", "deploy", "kube-validate");

/** Kubernetes versions every object must validate against: an older cluster still common, and the newest schemas shipped. */
export const KUBE_VERSIONS = ["1.29.0", "1.37.0"];

export interface KubeObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; labels?: Record<string, string>; annotations?: Record<string, string> };
  [field: string]: unknown;
}

/** kubectl with kustomize v5 (kubectl 1.27+), or an error that says what is missing (a deployment test never skips). */
export function kubectl(): string {
  const probe = spawnSync("kubectl", ["version", "--client"], { encoding: "utf8" });
  const install = "Install kubectl 1.27 or newer (its built-in kustomize is v5; Debian bookworm's kubernetes-client package, 1.20, is too old) and run again.";
  if (probe.error || probe.status !== 0) {
    throw new Error(
      `kubectl is not installed (or does not run): test/deploy renders deploy/k8s with \`kubectl kustomize\`. ${install}` +
        (probe.error ? ` (${probe.error.message})` : ` (exit ${probe.status}: ${probe.stderr.trim()})`),
    );
  }
  const kustomize = /Kustomize Version: v(\d+)\./.exec(probe.stdout);
  if (!kustomize || Number(kustomize[1]) < 5) {
    throw new Error(`kubectl's kustomize is too old or unknown (${probe.stdout.replace(/\s+/g, " ").trim()}): deploy/k8s needs kustomize v5. ${install}`);
  }
  return "kubectl";
}

/** `kubectl kustomize DIR`, parsed into objects. */
export function kustomize(dir: string): KubeObject[] {
  const out = execFileSync(kubectl(), ["kustomize", dir], { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  const objects: KubeObject[] = [];
  for (const doc of parseAllDocuments(out)) {
    if (doc.errors.length) throw new Error(`kubectl kustomize ${dir}: ${doc.errors[0]!.message}`);
    const obj = doc.toJS() as KubeObject | null;
    if (obj) objects.push(obj);
  }
  return objects;
}

/**
 * A copy of deploy/k8s with each overlay's secrets/*.env.example in place of
 * the real secrets/*.env the operator writes, rendered at `overlay` — with
 * `components` (deploy/k8s/components/<name>) added to that overlay, as its
 * comment tells an operator to.
 */
export function renderOverlay(overlay: string, opts: { components?: string[] } = {}): { objects: KubeObject[]; cleanup(): void } {
  const tmp = mkdtempSync(path.join(os.tmpdir(), "sy-deploy-"));
  try {
    cpSync(path.join(repoRoot, "deploy", "k8s"), path.join(tmp, "k8s"), { recursive: true });
    const secrets = path.join(tmp, "k8s", "overlays", overlay, "secrets");
    if (existsSync(secrets)) {
      for (const f of readdirSync(secrets)) {
        if (f.endsWith(".env.example")) cpSync(path.join(secrets, f), path.join(secrets, f.slice(0, -".example".length)));
      }
    }
    const dir = path.join(tmp, "k8s", "overlays", overlay);
    if (opts.components?.length) {
      // Where the overlay's comment says to list them: its own transformers (images) then apply to them too.
      const file = path.join(dir, "kustomization.yaml");
      const k = parseYaml(readFileSync(file, "utf8")) as { components?: string[] };
      k.components = [...(k.components ?? []), ...opts.components.map((c) => `../../components/${c}`)];
      writeFileSync(file, stringifyYaml(k));
    }
    const objects = kustomize(dir);
    return { objects, cleanup: () => rmSync(tmp, { recursive: true, force: true }) };
  } catch (err) {
    rmSync(tmp, { recursive: true, force: true });
    throw err;
  }
}

/** The venv's python with the pinned kubernetes-validate, installed on first use. */
export function validatorPython(): string {
  const requirements = readFileSync(path.join(here, "requirements.txt"), "utf8");
  const stamp = createHash("sha256").update(requirements).digest("hex").slice(0, 12);
  const cache = process.env.SWITCHYARD_CACHE ?? path.join(os.homedir(), ".cache", "switchyard");
  const venv = path.join(cache, `k8s-validate-venv-${stamp}`);
  const python = path.join(venv, "bin", "python");
  if (existsSync(python)) return python;
  const python3 = process.env.PYTHON ?? "python3";
  const tmp = `${venv}.tmp-${process.pid}`;
  rmSync(tmp, { recursive: true, force: true });
  const step = (cmd: string, args: string[]) => {
    const r = spawnSync(cmd, args, { encoding: "utf8", timeout: 300_000 });
    if (r.error || r.status !== 0) {
      rmSync(tmp, { recursive: true, force: true });
      throw new Error(`installing the schema validator (${cmd} ${args.join(" ")}) failed: ${r.error?.message ?? r.stderr.slice(-2000)}`);
    }
  };
  step(python3, ["-m", "venv", tmp]);
  step(path.join(tmp, "bin", "python"), ["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "-r", path.join(here, "requirements.txt")]);
  try {
    renameSync(tmp, venv);
  } catch {
    rmSync(tmp, { recursive: true, force: true }); // another test process finished first
  }
  return python;
}

export interface SchemaResult {
  index: number;
  kind: string;
  name: string;
  version: string;
  ok: boolean;
  error: string | null;
}

/** Every object against every version's strict schema. */
export function validateObjects(objects: unknown[], versions: string[] = KUBE_VERSIONS): SchemaResult[] {
  const out = execFileSync(validatorPython(), [path.join(here, "validate.py")], {
    input: JSON.stringify({ versions, objects }),
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  return JSON.parse(out) as SchemaResult[];
}
