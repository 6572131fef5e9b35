import { describe, expect, it } from "vitest";
import { sharedCheck } from "./readyz.ts";

describe("sharedCheck (/readyz's pings)", () => {
  it("runs one check for any number of callers, reuses its answer for freshMs after it settles, then checks again", async () => {
    let t = 0;
    let runs = 0;
    let release!: () => void;
    const check = sharedCheck(
      500,
      () => {
        runs++;
        return new Promise<number>((done) => (release = () => done(runs)));
      },
      () => t,
    );
    const flood = Array.from({ length: 200 }, () => check());
    expect(runs).toBe(1);
    t = 10_000; // still in flight: shared however long it takes
    expect(check()).toBe(flood[0]);
    release();
    expect(new Set(await Promise.all(flood))).toEqual(new Set([1]));
    t = 10_499;
    expect(await check()).toBe(1);
    t = 10_500;
    const next = check();
    expect(runs).toBe(2);
    release();
    expect(await next).toBe(2);
  });

  it("a failed check is shared and reused like an answer", async () => {
    let t = 0;
    let runs = 0;
    const check = sharedCheck(500, async () => Promise.reject(new Error(`down ${++runs}`)), () => t);
    await expect(Promise.all([check(), check()])).rejects.toThrow("down 1");
    await expect(check()).rejects.toThrow("down 1");
    t = 501;
    await expect(check()).rejects.toThrow("down 2");
  });
});
