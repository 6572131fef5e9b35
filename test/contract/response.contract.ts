// One contract for every ResponseStore: stored /v1/responses answers are
// kept per tenant, expire after their TTL, and are replaced and deleted the
// same way in Redis (one node and Cluster) and in process.
import { describe, expect, it } from "vitest";
import { randomBytes } from "node:crypto";
import type { ResponseStore } from "@switchyard/state";
import type { ClockedHarness } from "./twins.ts";

export type ResponseHarness = ClockedHarness<ResponseStore>;

const newId = () => `resp_${randomBytes(16).toString("hex")}`;

export function responseContract(name: string, make: () => Promise<ResponseHarness>, cleanup: (h: ResponseHarness) => Promise<void>) {
  describe(`ResponseStore contract: ${name}`, () => {
    const withStore = (fn: (h: ResponseHarness) => Promise<void>) => async () => {
      const h = await make();
      try {
        await fn(h);
      } finally {
        await cleanup(h);
      }
    };

    it(
      "keeps a record per tenant: another tenant's id finds nothing",
      withStore(async ({ store }) => {
        const id = newId();
        await store.put(1, id, '{"a":1}', 60_000);
        expect(await store.get(1, id)).toBe('{"a":1}');
        expect(await store.get(2, id)).toBeUndefined();
        expect(await store.get(1, newId())).toBeUndefined();
        expect(await store.delete(2, id)).toBe(false);
        expect(await store.get(1, id)).toBe('{"a":1}');
      }),
    );

    it(
      "replaces a record, and deletes it once",
      withStore(async ({ store }) => {
        const id = newId();
        await store.put(5, id, "one", 60_000);
        await store.put(5, id, "two", 60_000);
        expect(await store.get(5, id)).toBe("two");
        expect(await store.delete(5, id)).toBe(true);
        expect(await store.delete(5, id)).toBe(false);
        expect(await store.get(5, id)).toBeUndefined();
      }),
    );

    it(
      "a record expires after its TTL",
      withStore(async ({ store, elapse }) => {
        const id = newId();
        await store.put(9, id, "short", 150);
        expect(await store.get(9, id)).toBe("short");
        await elapse(400);
        expect(await store.get(9, id)).toBeUndefined();
      }),
    );

    it(
      "refuses ids the router never mints",
      withStore(async ({ store }) => {
        await expect(store.get(1, "resp_../../x")).rejects.toThrow(/bad response id/);
        await expect(store.put(-1, newId(), "x", 1000)).rejects.toThrow(/bad tenant/);
      }),
    );
  });
}
