// docs/METRICS.md against the metrics the router exports: every metric has a
// row, every row is a metric, and each row's type and merge across router
// processes are the registry's. A metric added without its row (or a row left
// behind by a removed one) fails here instead of leaving the page wrong.
import { readdirSync, readFileSync } from "node:fs";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { Counter, Gauge, Histogram, RouterMetrics } from "../../apps/router/src/observability/metrics.ts";

const root = path.resolve(import.meta.dirname, "../..");
const routerSrc = path.join(root, "apps/router/src");

type Exported = { type: "counter" | "gauge" | "histogram"; merge: string };

const typeOf = (m: Counter | Gauge | Histogram): Exported["type"] => (m instanceof Counter ? "counter" : m instanceof Gauge ? "gauge" : "histogram");

/** What RouterMetrics renders on /metrics, as every router process builds it. */
function registry(): Map<string, Exported> {
  const out = new Map<string, Exported>();
  for (const m of new RouterMetrics().all()) {
    // Histograms are always summed bucket by bucket (processes.ts, mergeMetrics).
    out.set(m.name, { type: typeOf(m), merge: m instanceof Histogram ? "sum" : m.merge });
  }
  return out;
}

function sourceFiles(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) sourceFiles(p, out);
    else if (e.name.endsWith(".ts") && !e.name.endsWith(".test.ts")) out.push(p);
  }
  return out;
}

/**
 * Metrics made outside RouterMetrics (the primary's, in processes.ts), read
 * from the source: superviseRouters builds them only as it forks processes.
 * Any router source file is read, so one added elsewhere is caught too.
 */
function madeElsewhere(): Map<string, Exported> {
  const out = new Map<string, Exported>();
  const made = /new (Counter|Gauge|Histogram)\(\s*"([^"]+)"/g;
  for (const file of sourceFiles(routerSrc)) {
    if (file.endsWith(path.join("observability", "metrics.ts"))) continue;
    for (const [, kind, name] of readFileSync(file, "utf8").matchAll(made)) {
      out.set(name!, { type: kind!.toLowerCase() as Exported["type"], merge: "primary" });
    }
  }
  return out;
}

/** The page's metric rows: a first cell that is a backticked metric name (config keys, with dots, are not). */
function documented(text: string): Array<{ name: string; type: string; merge: string; line: number }> {
  const rows: Array<{ name: string; type: string; merge: string; line: number }> = [];
  text.split("\n").forEach((l, i) => {
    const m = /^\|\s*`([a-zA-Z_:][a-zA-Z0-9_:]*)`\s*\|(.*)\|\s*$/.exec(l);
    if (!m) return;
    const cells = m[2]!.split("|").map((c) => c.trim());
    // name | type | labels | across processes | meaning: labels and meaning hold no pipes.
    rows.push({ name: m[1]!, type: cells[0]!, merge: (cells[2] ?? "").split(" ")[0]!, line: i + 1 });
  });
  return rows;
}

describe("docs/METRICS.md", () => {
  const doc = readFileSync(path.join(root, "docs/METRICS.md"), "utf8");
  const rows = documented(doc);
  const exported = new Map([...registry(), ...madeElsewhere()]);

  it("reads the metrics the router exports, the primary's two included", () => {
    expect(exported.size).toBeGreaterThan(30);
    expect(exported.get("switchyard_router_processes")).toEqual({ type: "gauge", merge: "primary" });
    expect(exported.get("switchyard_router_process_restarts_total")).toEqual({ type: "counter", merge: "primary" });
  });

  it("has a row for every exported metric", () => {
    const listed = new Set(rows.map((r) => r.name));
    expect([...exported.keys()].filter((n) => !listed.has(n))).toEqual([]);
  });

  it("lists no metric the router does not export", () => {
    expect(rows.filter((r) => !exported.has(r.name)).map((r) => `line ${r.line}: ${r.name}`)).toEqual([]);
  });

  it("lists each metric once", () => {
    const seen = new Set<string>();
    expect(rows.filter((r) => (seen.has(r.name) ? true : (seen.add(r.name), false))).map((r) => `line ${r.line}: ${r.name}`)).toEqual([]);
  });

  it("gives each metric its type and its merge across router processes", () => {
    const wrong = rows
      .filter((r) => exported.has(r.name))
      .filter((r) => r.type !== exported.get(r.name)!.type || r.merge !== exported.get(r.name)!.merge)
      .map((r) => `${r.name}: doc says ${r.type}/${r.merge}, router has ${exported.get(r.name)!.type}/${exported.get(r.name)!.merge}`);
    expect(wrong).toEqual([]);
  });
});
