#!/usr/bin/env node
// Installs npm dependencies when node_modules is missing or older than the
// lockfile, so the README's two commands work on a fresh clone. Plain JS:
// it must run before anything is installed.
import { execSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";

const marker = "node_modules/.package-lock.json";
const stale = !existsSync(marker) || statSync(marker).mtimeMs < statSync("package-lock.json").mtimeMs;
if (stale) {
  process.stderr.write("» installing npm dependencies (first run)…\n");
  // `npm install`, not `npm ci`: vite (via vitest) lists an optional
  // dependency the registry doesn't serve, which npm install skips but
  // npm ci reports as a lockfile mismatch. The lockfile still pins versions.
  execSync("npm install --no-audit --no-fund", { stdio: "inherit" });
}
