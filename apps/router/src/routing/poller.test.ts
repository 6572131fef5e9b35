import { describe, expect, it } from "vitest";
import { createLogger } from "../observability/log.ts";
import { Poller } from "./poller.ts";

describe("Poller", () => {
  it("a refresh asked for while one runs sees a write made after that one read the store", async () => {
    let store = 0;
    let snapshot = -1;
    let loads = 0;
    let release: () => void = () => {};
    const poller = new Poller(60_000, async () => {
      loads++;
      const read = store;
      if (loads === 1) await new Promise<void>((r) => (release = r));
      snapshot = read;
    }, createLogger("error"), "refresh failed");
    const first = poller.refresh(); // reads store = 0, then waits
    store = 1; // a write after that read
    const mine = poller.refresh();
    const also = poller.refresh(); // shares the queued load
    release();
    await Promise.all([first, mine, also]);
    expect(snapshot).toBe(1);
    expect(loads).toBe(2);
  });

  it("a failed load keeps the snapshot and the next refresh loads again", async () => {
    let fail = true;
    let loads = 0;
    const poller = new Poller(60_000, async () => {
      loads++;
      if (fail) throw new Error("redis down");
    }, createLogger("error"), "refresh failed");
    await poller.refresh();
    expect(poller.lastRefreshAgeMs()).toBe(Infinity);
    fail = false;
    await poller.refresh();
    expect(loads).toBe(2);
    expect(poller.lastRefreshAgeMs()).toBeLessThan(1000);
  });
});
