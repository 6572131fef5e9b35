import { describe, expect, it } from "vitest";
import { createLogger } from "./log.ts";

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
