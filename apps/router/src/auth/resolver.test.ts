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

describe("KeyResolver", () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ["Date"] });
    vi.setSystemTime(1_000_000);
  });
  afterEach(() => vi.useRealTimers());

  it("re-reads a key in use in the background from 3/4 of its ttl: its requests never wait for Postgres, and a revocation shows within the ttl", async () => {
    const db = store();
    const keys = new KeyResolver(db.keys, 2_000);
    const first = keys.resolve("sy_test_key");
    db.answer();
    expect((await first)?.revoked).toBe(false);
    vi.setSystemTime(1_000_000 + 1_499);
    await keys.resolve("sy_test_key");
    expect(db.lookups.count).toBe(1);
    db.revoke();
    vi.setSystemTime(1_000_000 + 1_500);
    // Answered at once from the cache while one lookup goes out (not one per request).
    expect((await keys.resolve("sy_test_key"))?.revoked).toBe(false);
    expect((await keys.resolve("sy_test_key"))?.revoked).toBe(false);
    expect(db.lookups.count).toBe(2);
    db.answer();
    await settled();
    vi.setSystemTime(1_000_000 + 1_600);
    expect((await keys.resolve("sy_test_key"))?.revoked).toBe(true);
    expect(db.lookups.count).toBe(2);
  });

  it("keeps the last answer when the background lookup fails, asking a failing Postgres at most once a second", async () => {
    const db = store();
    const keys = new KeyResolver(db.keys, 2_000);
    const first = keys.resolve("sy_test_key");
    db.answer();
    await first;
    vi.setSystemTime(1_000_000 + 1_600);
    await keys.resolve("sy_test_key");
    db.fail();
    await settled();
    expect((await keys.resolve("sy_test_key"))?.tenantId).toBe(7);
    expect(db.lookups.count).toBe(2);
    vi.setSystemTime(1_000_000 + 1_600 + 1_000);
    await keys.resolve("sy_test_key");
    expect(db.lookups.count).toBe(3);
  });
});
