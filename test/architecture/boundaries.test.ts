// What may import what (ARCHITECTURE.md, "Boundaries"): every .ts file's
// imports are read and checked against the rooms' allowed dependencies, so a
// forbidden import fails `npm test` instead of waiting for a reviewer.
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";

const root = path.resolve(import.meta.dirname, "../..");

/** The rooms, longest prefix first; a file outside all of them is "root". */
const rooms = ["apps/router", "apps/cli", "workers/agent", "db", "proto", "packages/state", "packages/testkit", "bench", "test", "scripts"] as const;
type Room = (typeof rooms)[number] | "root";

const packages: Record<string, Room> = {
  "@switchyard/router": "apps/router",
  "@switchyard/cli": "apps/cli",
  "@switchyard/agent": "workers/agent",
  "@switchyard/db": "db",
  "@switchyard/proto": "proto",
  "@switchyard/state": "packages/state",
};

/** Which rooms each room may import from (besides itself and npm packages). Tests may import anything but the CLI's bench entry rule. */
const allowed: Record<Exclude<Room, "test">, Room[]> = {
  "apps/router": ["db", "proto", "packages/state"],
  "apps/cli": ["apps/router", "workers/agent", "db", "proto", "packages/state", "bench"],
  "workers/agent": ["db", "proto", "packages/state"],
  db: [],
  proto: [],
  "packages/state": ["db", "proto"],
  "packages/testkit": ["packages/state", "workers/agent", "proto"],
  bench: ["apps/router", "workers/agent", "db", "proto", "packages/state", "packages/testkit"],
  scripts: ["workers/agent", "db", "proto", "packages/state"],
  root: ["db"],
};

/** The one bench module the CLI loads (`switchyard bench <suite>`). */
const benchEntry = "bench/index.ts";

function roomOf(file: string): Room {
  return rooms.find((r) => file === r || file.startsWith(`${r}/`)) ?? "root";
}

function isTest(file: string): boolean {
  return roomOf(file) === "test" || file.endsWith(".test.ts");
}

function walk(dir: string, out: string[]): void {
  for (const e of readdirSync(path.join(root, dir), { withFileTypes: true })) {
    if (e.name === "node_modules" || e.name === "dist" || e.name === "reference" || e.name === "target" || e.name.startsWith(".")) continue;
    const rel = dir === "" ? e.name : `${dir}/${e.name}`;
    if (e.isDirectory()) walk(rel, out);
    else if (/\.(ts|mts|mjs)$/.test(e.name)) out.push(rel);
  }
}

const specifier = /(?:^|[\s;])(?:import|export)\s[^"'`;]*?from\s*["']([^"']+)["']|(?:^|[\s;])import\s*["']([^"']+)["']|import\s*\(\s*["']([^"']+)["']\s*\)/g;

/** Import specifiers of one source text (static, re-exports, side-effect and literal dynamic imports). */
function importsOf(src: string): string[] {
  const out: string[] = [];
  for (const m of src.matchAll(specifier)) out.push((m[1] ?? m[2] ?? m[3])!);
  return out;
}

interface Target {
  room: Room;
  /** The file it names, for relative imports. */
  file?: string;
  /** The package subpath after the package name ("" for the package itself). */
  subpath?: string;
}

function resolve(from: string, spec: string): Target | undefined {
  if (spec.startsWith(".")) {
    const file = path.posix.normalize(path.posix.join(path.posix.dirname(from), spec));
    return { room: roomOf(file), file };
  }
  if (spec.startsWith("#testkit/")) return { room: "packages/testkit" };
  const m = /^(@switchyard\/[^/]+)(\/.*)?$/.exec(spec);
  if (m) {
    const room = packages[m[1]!];
    return room === undefined ? undefined : { room, subpath: m[2] ?? "" };
  }
  return undefined; // npm packages and node: builtins
}

/** Every forbidden import in the files given, as "file: spec (why)". */
function violations(files: { path: string; src: string }[]): string[] {
  const bad: string[] = [];
  for (const { path: file, src } of files) {
    const from = roomOf(file);
    for (const spec of importsOf(src)) {
      const t = resolve(file, spec);
      if (t === undefined || t.room === from) continue;
      const say = (why: string) => bad.push(`${file}: ${spec} (${why})`);
      if (t.room === "test" && !isTest(file)) say("only tests import test/");
      else if (from.startsWith("workers/") && t.room.startsWith("apps/")) say("workers never import apps");
      else if (t.room === "packages/testkit" && from !== "bench" && !isTest(file)) say("the test kit is for tests and benches");
      else if (from === "test" || (isTest(file) && t.room !== "test")) continue; // tests may reach into what they test
      else if (!allowed[from as Exclude<Room, "test">].includes(t.room)) say(`${from} may not import ${t.room}`);
      else if (t.room === "bench" && t.file !== benchEntry) say(`the CLI loads benches through ${benchEntry} only`);
      else if (t.file !== undefined && t.room !== "bench") say(`outside its room, ${t.room} is imported by its package name, never by a path into its sources`);
    }
  }
  return bad;
}

function exportsOf(pkgDir: string): Record<string, string> {
  const pkg = JSON.parse(readFileSync(path.join(root, pkgDir, "package.json"), "utf8")) as { exports?: Record<string, string> };
  return pkg.exports ?? {};
}

describe("boundaries", () => {
  const files: { path: string; src: string }[] = [];
  const all: string[] = [];
  walk("", all);
  for (const f of all) if (!f.startsWith("proto/gen/")) files.push({ path: f, src: readFileSync(path.join(root, f), "utf8") });

  it("reads the tree's imports", () => {
    expect(files.length).toBeGreaterThan(100);
    expect(importsOf(`import { a } from "./a.ts";\nimport type { B } from "@switchyard/state";\nexport * from "../c.ts";\nimport "./side.ts";\nconst m = await import("./lazy.ts");`)).toEqual([
      "./a.ts",
      "@switchyard/state",
      "../c.ts",
      "./side.ts",
      "./lazy.ts",
    ]);
  });

  it("has no forbidden import", () => {
    expect(violations(files)).toEqual([]);
  });

  it("fails on the imports it forbids", () => {
    expect(
      violations([
        { path: "workers/agent/src/x.ts", src: `import { startRouter } from "@switchyard/router";` },
        { path: "bench/x.ts", src: `import { SimWorker } from "../test/fixtures/sim-worker.ts";` },
        { path: "apps/cli/src/x.ts", src: `import { reconcileBudgetDay } from "../../router/src/billing/reconcile.ts";` },
        { path: "apps/cli/src/commands/x.ts", src: `const m = await import("../../../../bench/router.ts");` },
        { path: "apps/router/src/x.ts", src: `import { SimWorker } from "#testkit/sim-worker";` },
        { path: "apps/router/src/y.ts", src: `import { startAgent } from "@switchyard/agent";` },
      ]).map((v) => v.replace(/ \(.*/, "")),
    ).toEqual([
      "workers/agent/src/x.ts: @switchyard/router",
      "bench/x.ts: ../test/fixtures/sim-worker.ts",
      "apps/cli/src/x.ts: ../../router/src/billing/reconcile.ts",
      "apps/cli/src/commands/x.ts: ../../../../bench/router.ts",
      "apps/router/src/x.ts: #testkit/sim-worker",
      "apps/router/src/y.ts: @switchyard/agent",
    ]);
  });

  it("imports packages only through the subpaths they export", () => {
    const bad: string[] = [];
    for (const { path: file, src } of files) {
      for (const spec of importsOf(src)) {
        const m = /^(@switchyard\/[^/]+)(\/.*)?$/.exec(spec);
        if (!m) continue;
        const dir = packages[m[1]!];
        if (dir === undefined) continue;
        const exported = Object.keys(exportsOf(dir));
        const sub = `.${m[2] ?? ""}`;
        const ok = exported.includes(sub) || exported.some((k) => k.endsWith("/*") && sub.startsWith(k.slice(0, -1)));
        if (!ok) bad.push(`${file}: ${spec}`);
      }
    }
    expect(bad).toEqual([]);
  });

  it("gives the router, the agent, the state and the db packages a deliberate surface (no './*')", () => {
    // proto's "./*" is left as it is: it maps the generated tree.
    for (const dir of ["apps/router", "workers/agent", "packages/state", "db"]) {
      expect(Object.keys(exportsOf(dir)).filter((k) => k.includes("*")), dir).toEqual([]);
    }
  });

  it("lets the worker agent read the environment only in its config", () => {
    // workers/agent/src/config.ts parses the agent's options once; a
    // process.env read anywhere else is a setting nobody can find. Handing
    // the environment on to a child process (`...process.env`) reads none.
    const reads = (src: string) => src.replaceAll("...process.env", "").includes("process.env");
    const readers = files.filter((f) => f.path.startsWith("workers/agent/src/") && !isTest(f.path) && f.path !== "workers/agent/src/config.ts" && reads(f.src)).map((f) => f.path);
    expect(readers).toEqual([]);
    // ...and the check sees a read where there is one.
    expect(reads("const dir = process.env.SWITCHYARD_CACHE;")).toBe(true);
    expect(reads("spawn(cmd, { env: { ...process.env, A: '1' } });")).toBe(false);
  });
});
