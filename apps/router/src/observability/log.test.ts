import { spawnSync } from "node:child_process";
import path from "node:path";
import { describe, expect, it } from "vitest";
import { createLogger, LineBatcher } from "./log.ts";

describe("createLogger", () => {
  it("children write their own and their ancestors' fields (a child's win), below the level nothing", () => {
    const lines: Record<string, unknown>[] = [];
    const root = createLogger("info", { service: "router", a: 1 }, (l) => lines.push(JSON.parse(l) as Record<string, unknown>));
    const child = root.child({ request_id: "r1", a: 2 });
    const grandchild = child.child({ attempt: 1 });
    root.debug("hidden");
    grandchild.info("x", { f: true });
    child.info("y");
    root.warn("z");
    expect(lines.map(({ ts: _ts, ...l }) => l)).toEqual([
      { level: "info", msg: "x", service: "router", a: 2, request_id: "r1", attempt: 1, f: true },
      { level: "info", msg: "y", service: "router", a: 2, request_id: "r1" },
      { level: "warn", msg: "z", service: "router", a: 1 },
    ]);
  });
});

describe("LineBatcher", () => {
  it("writes a turn's lines together, once that turn's callbacks are done, and at once past its size", async () => {
    const writes: string[] = [];
    const b = new LineBatcher({ write: (t) => writes.push(t) }, 100);
    b.line("a");
    b.line("b");
    expect(writes).toEqual([]);
    await new Promise((r) => setImmediate(r));
    expect(writes).toEqual(["a\nb\n"]);
    b.line("x".repeat(60));
    b.line("y".repeat(60)); // past 100 characters: written now, not at the turn's end
    expect(writes).toEqual(["a\nb\n", `${"x".repeat(60)}\n${"y".repeat(60)}\n`]);
    await new Promise((r) => setImmediate(r));
    expect(writes).toHaveLength(2); // nothing left for the scheduled flush
    b.line("c");
    b.flush();
    expect(writes.at(-1)).toBe("c\n");
  });

  it("a process's last lines reach stdout when it exits, by process.exit() or an uncaught exception", () => {
    const log = path.join(import.meta.dirname, "log.ts");
    for (const [how, code] of [
      ["process.exit(3)", 3],
      ["throw new Error('boom')", 1],
    ] as const) {
      const script = `import { createLogger } from ${JSON.stringify(log)}; const l = createLogger("info"); l.info("one"); l.warn("two"); ${how};`;
      const r = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "-e", script], { encoding: "utf8" });
      expect(r.status, r.stderr).toBe(code);
      expect(r.stdout.trim().split("\n").map((l) => (JSON.parse(l) as { msg: string }).msg), how).toEqual(["one", "two"]);
    }
  });
});
