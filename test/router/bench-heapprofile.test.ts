// bench/lib/heapprofile.ts on a heap profile whose allocations are known:
// the table `bench router --profile` prints of what a request allocates, by
// the module of a bundle chunk a frame's line falls in.
import { describe, expect, it } from "vitest";
import { allocationBy, allocationTable, bundleModules, moduleGroup, type HeapNode } from "../../bench/lib/heapprofile.ts";

const chunkUrl = "file:///repo/dist/cli-abc/chunk-X.js";
// An esbuild chunk: each module's code after a `// path` comment.
const chunk = ["import x from 'y';", "// node_modules/hono/dist/compose.js", "function compose() {}", "", "// apps/router/src/relay/stream.ts", "function pump() {}", "function emit() {}", "// packages/state/src/redis.ts", "function r() {}"].join("\n");

let nextId = 1;
const node = (functionName: string, url: string, line: number, selfSize: number, children: HeapNode[] = []): HeapNode => ({ id: nextId++, selfSize, callFrame: { functionName, url, lineNumber: line - 1 }, children });

describe("heap profile allocation", () => {
  it("finds where each module of a chunk begins", () => {
    expect(bundleModules(chunk)).toEqual([
      [2, "node_modules/hono/dist/compose.js"],
      [5, "apps/router/src/relay/stream.ts"],
      [8, "packages/state/src/redis.ts"],
    ]);
  });

  it("groups module paths by router folder, package and npm package", () => {
    expect(moduleGroup("apps/router/src/relay/stream.ts")).toBe("router relay");
    expect(moduleGroup("apps/router/src/middleware.ts")).toBe("router middleware");
    expect(moduleGroup("node_modules/@hono/node-server/dist/index.mjs")).toBe("npm @hono/node-server");
    expect(moduleGroup("node_modules/undici/lib/dispatcher/client-h1.js")).toBe("npm undici");
    expect(moduleGroup("packages/state/src/redis.ts")).toBe("packages/state");
    expect(moduleGroup("db/ledger.ts")).toBe("db");
  });

  it("adds each frame's bytes to the module its chunk line falls in, Node's by its module, the rest as V8's", () => {
    const head = node("(root)", "", 0, 0, [
      node("compose", chunkUrl, 3, 1000, [node("pump", chunkUrl, 6, 4000, [node("emit", chunkUrl, 7, 2000)]), node("Readable", "node:internal/streams/readable", 320, 1500)]),
      node("r", chunkUrl, 9, 500),
      node("(V8 API)", "", 0, 1000),
    ]);
    const a = allocationBy({ head }, (url) => (url === chunkUrl ? chunk : undefined));
    expect(a.totalBytes).toBe(10_000);
    expect(a.groups).toEqual([
      { group: "router relay", bytes: 6000 },
      { group: "node streams/readable", bytes: 1500 },
      { group: "npm hono", bytes: 1000 },
      { group: "(V8, native)", bytes: 1000 },
      { group: "packages/state", bytes: 500 },
    ]);
    // Per request: 10,000 bytes over 4 requests.
    const table = allocationTable(a, 4, 2);
    expect(table).toContain("| **all** | **2.4** | 100.0 |");
    expect(table).toContain("| router relay | 1.5 | 60.0 |");
    expect(table.split("\n")).toHaveLength(5); // header, rule, all, two groups
  });
});
