// One contract for every RegistryStore: the Redis store and the in-process
// store must behave the same — also when a worker writes its own key with
// something else than its own record.
import { describe, expect, it } from "vitest";
import type { RegistryStore, WorkerInviteGrant, WorkerRecord } from "@switchyard/state";
import type { ClockedHarness } from "./twins.ts";
import { workerRecord } from "#testkit/worker-record";

/** A store plus what a worker (any text into its own key) and an admin (its invite) can write. */
export type ContractRegistry = RegistryStore & {
  putRaw(workerId: string, text: string, ttlMs: number): Promise<void>;
  putInvite(workerId: string, grant: WorkerInviteGrant): Promise<void>;
  /** Every record and invite gone at once: a Redis that came back empty (restarted without persistence, failed over to an empty replica). */
  lose(): Promise<void>;
};

export type RegistryHarness = ClockedHarness<ContractRegistry>;

/** A valid record (the test kit's): the contract's tests change what they test. */
export const record = workerRecord;

export function registryContract(name: string, make: () => Promise<RegistryHarness>, cleanup: (h: RegistryHarness) => Promise<void>) {
  describe(`RegistryStore contract: ${name}`, () => {
    it("lists what was published, with every field intact", async () => {
      const h = await make();
      try {
        const r = record("w-a", { models: ["m1", "m2"], inFlight: 3, layerRanges: [{ model: "m1", start: 0, end: 30 }] });
        expect(await h.store.publish(r, 1000)).toEqual({ ok: true });
        expect(await h.store.list()).toEqual([r]);
      } finally {
        await cleanup(h);
      }
    });

    it("polling again reads the same record until the worker writes another (also a refused one turned valid)", async () => {
      const h = await make();
      try {
        await h.store.publish(record("w-a", { inFlight: 1 }), 1000);
        await h.store.putRaw("w-b", "{not json", 1000);
        const first = await h.store.listing();
        const again = await h.store.listing();
        expect(again.workers).toEqual(first.workers);
        expect(again.rejected.map((r) => [r.workerId, r.reason])).toEqual([["w-b", "invalid_record"]]);
        await h.store.publish(record("w-a", { inFlight: 2 }), 1000);
        await h.store.publish(record("w-b"), 1000);
        const later = await h.store.listing();
        expect(later.rejected).toEqual([]);
        expect(later.workers.map((w) => [w.id, w.inFlight]).sort()).toEqual([["w-a", 2], ["w-b", 0]]);
      } finally {
        await cleanup(h);
      }
    });

    it("a refreshed heartbeat replaces the record", async () => {
      const h = await make();
      try {
        await h.store.publish(record("w-a", { state: "warming" }), 1000);
        await h.store.publish(record("w-a", { state: "ready", inFlight: 5 }), 1000);
        const list = await h.store.list();
        expect(list).toHaveLength(1);
        expect(list[0]).toMatchObject({ state: "ready", inFlight: 5 });
      } finally {
        await cleanup(h);
      }
    });

    it("a record expires after its TTL unless refreshed", async () => {
      const h = await make();
      try {
        await h.store.publish(record("w-a"), 300);
        await h.store.publish(record("w-b"), 300);
        await h.elapse(150);
        await h.store.publish(record("w-b"), 300);
        await h.elapse(250);
        expect((await h.store.list()).map((r) => r.id)).toEqual(["w-b"]);
        await h.elapse(400);
        expect(await h.store.list()).toEqual([]);
      } finally {
        await cleanup(h);
      }
    });

    it("remove deregisters at once", async () => {
      const h = await make();
      try {
        await h.store.publish(record("w-a"), 10_000);
        await h.store.publish(record("w-b"), 10_000);
        await h.store.remove("w-a");
        expect((await h.store.list()).map((r) => r.id)).toEqual(["w-b"]);
      } finally {
        await cleanup(h);
      }
    });

    it("the epoch holds through heartbeats, removals and expiry, and changes once the store lost its records", async () => {
      const h = await make();
      try {
        const first = (await h.store.listing()).epoch;
        expect(first).toMatch(/\S/);
        await h.store.publish(record("w-a"), 300);
        await h.store.publish(record("w-b"), 10_000);
        await h.store.remove("w-b");
        expect((await h.store.listing()).epoch).toBe(first);
        await h.elapse(400);
        const afterExpiry = await h.store.listing();
        expect(afterExpiry.workers).toEqual([]);
        expect(afterExpiry.epoch).toBe(first);
        await h.store.publish(record("w-a"), 10_000);
        await h.store.lose();
        const lost = await h.store.listing();
        expect(lost.workers).toEqual([]);
        expect(lost.epoch).not.toBe(first);
        // The new epoch holds in its turn.
        await h.store.publish(record("w-a"), 10_000);
        expect((await h.store.listing()).epoch).toBe(lost.epoch);
      } finally {
        await cleanup(h);
      }
    });

    it("refuses an invalid record", async () => {
      const h = await make();
      try {
        const bad = { ...record("w-a"), url: "not a url" } as WorkerRecord;
        expect(await h.store.publish(bad, 1000)).toEqual({ ok: false, reason: "invalid_record" });
        const badId = record("../etc");
        expect(await h.store.publish(badId, 1000)).toEqual({ ok: false, reason: "invalid_record" });
        expect(await h.store.list()).toEqual([]);
      } finally {
        await cleanup(h);
      }
    });

    it("identity is the key: a record naming another worker's id is refused and reported, the real one stays", async () => {
      const h = await make();
      try {
        const victim = record("victim", { url: "http://10.0.0.7:9100" });
        await h.store.publish(victim, 10_000);
        // Worker "evil" may write only its own key — it writes victim's name and its own URL there.
        await h.store.putRaw("evil", JSON.stringify(record("victim", { url: "http://10.6.6.6:9100" })), 10_000);
        expect(await h.store.list()).toEqual([victim]);
        const listing = await h.store.listing();
        expect(listing.workers).toEqual([victim]);
        expect(listing.rejected).toEqual([{ workerId: "evil", reason: "id_mismatch", detail: expect.stringContaining("victim") }]);
        // Its own record under its own key is fine.
        await h.store.putRaw("evil", JSON.stringify(record("evil")), 10_000);
        expect((await h.store.list()).map((r) => r.id).sort()).toEqual(["evil", "victim"]);
      } finally {
        await cleanup(h);
      }
    });

    it("refuses oversized and malformed records before using them; a record up to the limit is read", async () => {
      const h = await make();
      try {
        await h.store.putRaw("huge", JSON.stringify(record("huge", { version: "x".repeat(64 * 1024) })), 10_000);
        await h.store.putRaw("junk", "{not json", 10_000);
        await h.store.putRaw("shape", JSON.stringify({ id: "shape", url: "http://10.0.0.1:1" }), 10_000);
        const near = record("near", { version: "y".repeat(15 * 1024) });
        await h.store.putRaw("near", JSON.stringify(near), 10_000);
        const listing = await h.store.listing();
        expect(listing.workers).toEqual([near]);
        expect(Object.fromEntries(listing.rejected.map((r) => [r.workerId, r.reason]))).toEqual({ huge: "too_large", junk: "invalid_record", shape: "invalid_record" });
      } finally {
        await cleanup(h);
      }
    });

    it("invites: listed with their worker, never as a worker themselves", async () => {
      const h = await make();
      try {
        await h.store.putInvite("w-a", { models: ["m1"], createdAt: 5 });
        await h.store.putInvite("w-ghost", { models: ["m1"], createdAt: 5 });
        expect(await h.store.list()).toEqual([]);
        await h.store.publish(record("w-a", { models: ["m1", "m2"] }), 10_000);
        await h.store.publish(record("w-b"), 10_000);
        const listing = await h.store.listing();
        expect(listing.workers.map((w) => w.id).sort()).toEqual(["w-a", "w-b"]);
        // The store reports what was advertised; the router applies the invite.
        expect(listing.workers.find((w) => w.id === "w-a")?.models).toEqual(["m1", "m2"]);
        expect([...listing.invites]).toEqual([["w-a", { models: ["m1"], createdAt: 5 }]]);
      } finally {
        await cleanup(h);
      }
    });

    it("lists many workers", async () => {
      const h = await make();
      try {
        for (let i = 0; i < 150; i++) await h.store.publish(record(`w-${i}`), 10_000);
        expect((await h.store.list()).length).toBe(150);
        expect(await h.store.ping()).toBe(true);
      } finally {
        await cleanup(h);
      }
    });
  });
}
