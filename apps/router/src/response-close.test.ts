// One 'close' listener per response, whatever number of parts ask to know.
import { EventEmitter } from "node:events";
import type { ServerResponse } from "node:http";
import { describe, expect, it } from "vitest";
import { onResponseClose } from "./response-close.ts";

describe("onResponseClose", () => {
  it("runs every hook once, in order, with the response, through one listener", () => {
    const res = new EventEmitter() as unknown as ServerResponse;
    const seen: string[] = [];
    for (const name of ["a", "b", "c"]) onResponseClose(res, (r) => seen.push(`${name}:${r === res}`));
    expect(res.listenerCount("close")).toBe(1);
    res.emit("close");
    res.emit("close");
    expect(seen).toEqual(["a:true", "b:true", "c:true"]);
  });

  it("a hook that throws does not keep the others from running; its error comes out after", () => {
    const res = new EventEmitter() as unknown as ServerResponse;
    const seen: string[] = [];
    onResponseClose(res, () => seen.push("first"));
    onResponseClose(res, () => {
      throw new Error("boom");
    });
    onResponseClose(res, () => seen.push("last"));
    expect(() => res.emit("close")).toThrow("boom");
    expect(seen).toEqual(["first", "last"]);
  });

  it("a single hook runs alone; responses keep their own hooks", () => {
    const a = new EventEmitter() as unknown as ServerResponse;
    const b = new EventEmitter() as unknown as ServerResponse;
    let ran = 0;
    onResponseClose(a, () => ran++);
    onResponseClose(b, () => (ran += 10));
    a.emit("close");
    expect(ran).toBe(1);
    b.emit("close");
    expect(ran).toBe(11);
  });
});
