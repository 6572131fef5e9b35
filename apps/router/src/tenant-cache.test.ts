import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { TenantCache } from "./tenant-cache.ts";

/** A Postgres stand-in: each read answers when the test says (or fails), and is counted. */
function table(initial: string) {
  let value = initial;
  const pending: Array<{ resolve: (v: string) => void; reject: (e: Error) => void }> = [];
  const reads = { count: 0 };
  const read = (_tenantId: number) => {
    reads.count++;
    return new Promise<string>((resolve, reject) => pending.push({ resolve, reject }));
  };
  return {
    read,
    reads,
    set: (v: string) => (value = v),
    answer: () => pending.splice(0).forEach((p) => p.resolve(value)),
    fail: () => pending.splice(0).forEach((p) => p.reject(new Error("postgres down"))),
  };
}

const settled = () => new Promise<void>((r) => setImmediate(r));

describe("TenantCache", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(1_000_000);
  });
  afterEach(() => vi.useRealTimers());

  it("re-reads an entry in use in the background from 3/4 of its ttl: a steady tenant never waits for Postgres, and a change shows within the ttl", async () => {
    const db = table("a");
    const cache = new TenantCache(db.read, 4_000);
    const first = cache.get(1);
    db.answer();
    expect(await first).toBe("a"); // a tenant never seen waits for its read
    vi.setSystemTime(1_000_000 + 2_999);
    expect(await cache.get(1)).toBe("a");
    expect(db.reads.count).toBe(1);
    db.set("b");
    vi.setSystemTime(1_000_000 + 3_000);
    // Answered from the cache at once, while one read goes out (not one per request).
    expect(await cache.get(1)).toBe("a");
    expect(await cache.get(1)).toBe("a");
    expect(db.reads.count).toBe(2);
    db.answer();
    await settled();
    expect(await cache.get(1)).toBe("b");
    expect(db.reads.count).toBe(2);
  });

  it("keeps answering from the last value when the background read fails, asking a failing Postgres at most once a second", async () => {
    const db = table("a");
    const cache = new TenantCache(db.read, 4_000);
    const first = cache.get(1);
    db.answer();
    await first;
    vi.setSystemTime(1_000_000 + 3_500);
    expect(await cache.get(1)).toBe("a");
    db.fail();
    await settled();
    expect(await cache.get(1)).toBe("a");
    expect(db.reads.count).toBe(2);
    vi.setSystemTime(1_000_000 + 3_500 + 1_000);
    expect(await cache.get(1)).toBe("a");
    expect(db.reads.count).toBe(3);
  });

  it("makes a request wait for an expired entry's read (up to the stale bound), as before", async () => {
    const db = table("a");
    const cache = new TenantCache(db.read, 4_000);
    const first = cache.get(1);
    db.answer();
    await first;
    db.set("b");
    vi.setSystemTime(1_000_000 + 4_001);
    const expired = cache.get(1);
    db.answer();
    expect(await expired).toBe("b");
  });
});
