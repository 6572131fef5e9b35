// One contract for every RegistryStore: the Redis store and the in-process
// store must behave the same.
import { describe, expect, it } from "vitest";
import type { RegistryStore, WorkerRecord } from "@switchyard/state";
import type { ClockedHarness } from "./twins.ts";

export type RegistryHarness = ClockedHarness<RegistryStore>;

export function record(id: string, over: Partial<WorkerRecord> = {}): WorkerRecord {
  return {
    id,
    url: `http://127.0.0.1:9${id.length}00`,
    models: ["m1"],
    state: "ready",
    inFlight: 0,
    queueDepth: 0,
    capacity: 8,
    device: "cpu",
    layerRanges: [],
    prefixes: [],
    version: "1",
    startedAt: 1,
    updatedAt: 2,
    ...over,
  };
}

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
