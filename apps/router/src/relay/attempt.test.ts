import { describe, expect, it } from "vitest";
import { onAbortOf } from "./attempt.ts";

describe("onAbortOf", () => {
  it("calls each callback still waiting when the signal aborts, once; an undone one is not called", () => {
    const ac = new AbortController();
    const called: string[] = [];
    const offA = onAbortOf(ac.signal, () => called.push("a"));
    onAbortOf(ac.signal, () => called.push("b"));
    const offC = onAbortOf(ac.signal, () => called.push("c"));
    offA();
    ac.abort();
    offC(); // after the abort: nothing left to undo
    ac.abort();
    expect(called).toEqual(["b", "c"]);
  });
});
