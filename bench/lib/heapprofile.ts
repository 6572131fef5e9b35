// Reading a V8 sampling heap profile (bench/lib/heap-sample.mjs) for
// `bench router --profile`: the bytes a process allocated, by where in the
// code — a module of the router, an npm package, a part of Node. The
// router runs as one esbuild bundle (dist/cli-*/), whose chunks say in a
// `// path` comment where each module's code begins: a frame's line in a
// chunk names its module.
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

export interface HeapNode {
  id: number;
  selfSize: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  children?: HeapNode[];
}

/** What HeapProfiler.stopSampling returns: selfSize per node is already scaled to bytes allocated. */
export interface HeapProfile {
  head: HeapNode;
}

/** Where each module of a bundle chunk begins: [line (1-based), module path] in line order. */
export function bundleModules(chunk: string): Array<[number, string]> {
  const out: Array<[number, string]> = [];
  const lines = chunk.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const m = /^\/\/ ((?:node_modules|apps|packages|db|workers|proto|bench)\/\S+)$/.exec(lines[i]!);
    if (m) out.push([i + 1, m[1]!]);
  }
  return out;
}

/** A module path as a group of the table: a router folder, a package of ours, an npm package. */
export function moduleGroup(path: string): string {
  let m;
  if ((m = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path))) return `npm ${m[1]}`;
  if ((m = /^apps\/router\/src\/([^/]+?)(\.ts)?(\/|$)/.exec(path))) return `router ${m[1]}`;
  if ((m = /^(apps|packages|workers)\/([^/]+)\//.exec(path))) return `${m[1]}/${m[2]}`;
  if ((m = /^(db|bench|proto)\//.exec(path))) return m[1]!;
  return path;
}

export interface Allocation {
  /** Bytes allocated in all (the profile's whole span). */
  totalBytes: number;
  /** By group, most first. */
  groups: Array<{ group: string; bytes: number }>;
}

/**
 * Bytes allocated by group. A frame of a bundle chunk goes to the module its
 * line falls in (`readChunk` gives a chunk's text by URL); Node's own code by
 * its internal module; frames without a script (V8's own, natives) as one.
 */
export function allocationBy(prof: HeapProfile, readChunk: (url: string) => string | undefined = readBundleChunk): Allocation {
  const chunks = new Map<string, Array<[number, string]>>();
  const groupOf = (url: string, line: number): string => {
    if (!url) return "(V8, native)";
    if (url.startsWith("node:")) return url.replace(/^node:(internal\/)?/, "node ").replace(/^(node (?:streams|process|http|modules|util)\/[^/]+).*/, "$1");
    let modules = chunks.get(url);
    if (!modules) {
      const text = url.includes("/dist/") ? readChunk(url) : undefined;
      chunks.set(url, (modules = text ? bundleModules(text) : []));
    }
    let mod: string | undefined;
    for (const [from, path] of modules) {
      if (from > line) break;
      mod = path;
    }
    return moduleGroup(mod ?? url.replace(/^file:\/\/.*?\/(node_modules|apps|packages|db|bench)\//, "$1/"));
  };
  const by = new Map<string, number>();
  let total = 0;
  const walk = (n: HeapNode) => {
    if (n.selfSize > 0) {
      const g = groupOf(n.callFrame.url, n.callFrame.lineNumber + 1);
      by.set(g, (by.get(g) ?? 0) + n.selfSize);
      total += n.selfSize;
    }
    for (const c of n.children ?? []) walk(c);
  };
  walk(prof.head);
  return { totalBytes: total, groups: [...by].map(([group, bytes]) => ({ group, bytes })).sort((a, b) => b.bytes - a.bytes) };
}

function readBundleChunk(url: string): string | undefined {
  try {
    return readFileSync(url.startsWith("file:") ? fileURLToPath(url) : url, "utf8");
  } catch {
    return undefined;
  }
}

/** Per request: the total, then the `n` largest groups. */
export function allocationTable(a: Allocation, requests: number, n = 15): string {
  const per = (bytes: number) => (bytes / Math.max(1, requests) / 1024).toFixed(1);
  const pct = (bytes: number) => ((100 * bytes) / Math.max(1, a.totalBytes)).toFixed(1);
  return [
    "| allocated by | KB per request | share % |",
    "|---|---:|---:|",
    `| **all** | **${per(a.totalBytes)}** | 100.0 |`,
    ...a.groups.slice(0, n).map((g) => `| ${g.group} | ${per(g.bytes)} | ${pct(g.bytes)} |`),
  ].join("\n");
}
