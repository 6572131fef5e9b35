import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import type { KeyOwner, KeyStore } from "./key-store.ts";
import { KeyResolver } from "./resolver.ts";

/** A key store whose lookups answer when the test says (or fail), counted. */
function store() {
  let owner: KeyOwner = { keyId: 1, prefix: "sy_test", tenantId: 7, tenantName: "t", revoked: false };
  const pending: Array<{ resolve: (o: KeyOwner) => void; reject: (e: Error) => void }> = [];
  const lookups = { count: 0 };
  const keys: KeyStore = {
    lookup: () => {
      lookups.count++;
      return new Promise<KeyOwner>((resolve, reject) => pending.push({ resolve, reject }));
    },
    touch: async () => {},
    ping: async () => true,
  };
  return {
    keys,
    lookups,
    revoke: () => (owner = { ...owner, revoked: true }),
    answer: () => pending.splice(0).forEach((p) => p.resolve(owner)),
    fail: () => pending.splice(0).forEach((p) => p.reject(new Error("postgres down"))),
  };
}

const settled = () => new Promise<void>((r) => setImmediate(r));
/** Shaped as generateKey makes them: sy_<8 hex>_<43 base64url>. */
const KEY = "sy_0123abcd_" + "k".repeat(43);
const keyNo = (i: number) => `sy_${i.toString(16).padStart(8, "0")}_${"s".repeat(43)}`;

describe("KeyResolver", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(1_000_000);
  });
  afterEach(() => vi.useRealTimers());

  it("re-reads a key in use in the background from 3/4 of its ttl: its requests never wait for Postgres, and a revocation shows within the ttl", async () => {
    const db = store();
    const keys = new KeyResolver(db.keys, 2_000);
    const first = keys.resolve(KEY);
    db.answer();
    expect((await first)?.revoked).toBe(false);
    vi.setSystemTime(1_000_000 + 1_499);
    await keys.resolve(KEY);
    expect(db.lookups.count).toBe(1);
    db.revoke();
    vi.setSystemTime(1_000_000 + 1_500);
    // Answered at once from the cache while one lookup goes out (not one per request).
    expect((await keys.resolve(KEY))?.revoked).toBe(false);
    expect((await keys.resolve(KEY))?.revoked).toBe(false);
    expect(db.lookups.count).toBe(2);
    db.answer();
    await settled();
    vi.setSystemTime(1_000_000 + 1_600);
    expect((await keys.resolve(KEY))?.revoked).toBe(true);
    expect(db.lookups.count).toBe(2);
  });

  it("keeps the last answer when the background lookup fails, asking a failing Postgres at most once a second", async () => {
    const db = store();
    const keys = new KeyResolver(db.keys, 2_000);
    const first = keys.resolve(KEY);
    db.answer();
    await first;
    vi.setSystemTime(1_000_000 + 1_600);
    await keys.resolve(KEY);
    db.fail();
    await settled();
    expect((await keys.resolve(KEY))?.tenantId).toBe(7);
    expect(db.lookups.count).toBe(2);
    vi.setSystemTime(1_000_000 + 1_600 + 1_000);
    await keys.resolve(KEY);
    expect(db.lookups.count).toBe(3);
  });

  it("refuses what is not shaped like a key without a lookup", async () => {
    const db = store();
    const keys = new KeyResolver(db.keys, 2_000);
    for (const bad of ["x", "sy_test_key", "Bearer", `sy_0123ABCD_${"k".repeat(43)}`, `sy_0123abcd_${"k".repeat(10)}`, `sy_0123abcd_${"k".repeat(42)}!`, `${KEY} `, `sy_0123abcd_${"k".repeat(300)}`]) {
      expect(keys.resolve(bad), bad).toBeUndefined();
    }
    expect(db.lookups.count).toBe(0);
  });

  it("at its bound drops unknown keys' entries first: a flood of made-up keys leaves real keys cached", async () => {
    const lookups = new Map<string, number>();
    const owner: KeyOwner = { keyId: 1, prefix: "sy_0123abcd", tenantId: 7, tenantName: "t", revoked: false };
    const { hashKey } = await import("@switchyard/db");
    const keys = new KeyResolver(
      {
        lookup: async (hash) => {
          lookups.set(hash, (lookups.get(hash) ?? 0) + 1);
          return hash === hashKey(KEY) ? owner : undefined;
        },
        touch: async () => {},
        ping: async () => true,
      },
      60_000,
      10,
    );
    expect(await keys.resolve(KEY)).toEqual(owner);
    for (let i = 0; i < 50; i++) expect(await keys.resolve(keyNo(i))).toBeUndefined();
    expect(keys.resolve(KEY)).toEqual(owner); // answered from the cache, not a promise
    expect(lookups.get(hashKey(KEY))).toBe(1);
    // A made-up key seen again within the ttl is still answered from its entry while the cache has room.
    const before = lookups.get(hashKey(keyNo(49)));
    expect(keys.resolve(keyNo(49))).toBeUndefined();
    expect(lookups.get(hashKey(keyNo(49)))).toBe(before);
  });
});
