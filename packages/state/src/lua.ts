// Where every Lua script lives: packages/state/lua (one folder, STYLE.md),
// found from this module whether it runs from the sources or from a bundle
// under dist/. Each store reads its scripts through here.
import { existsSync, readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

let found: string | undefined;

/** packages/state/lua. */
function findLuaDir(): string {
  if (found) return found;
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    for (const candidate of [path.join(dir, "lua"), path.join(dir, "packages", "state", "lua")]) {
      if (existsSync(path.join(candidate, "budget_lib.lua"))) return (found = candidate);
    }
    dir = path.dirname(dir);
  }
  throw new Error("cannot find packages/state/lua (the Lua scripts)");
}

/** One script's source, e.g. luaSource("ratelimit.lua"). */
export function luaSource(file: string): string {
  return readFileSync(path.join(findLuaDir(), file), "utf8");
}
