import { describe, expect, it } from "vitest";
import { MemoryRegistryStore, type WorkerRecord } from "@switchyard/state";
import { createLogger } from "../observability/log.ts";
import { RouterMetrics } from "../observability/metrics.ts";
import { workerRecord } from "../../../../packages/testkit/worker-record.ts";
import { LOST_REGISTRY_KEEP_MS, WorkerDirectory } from "./directory.ts";

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A live record (the test kit's, heartbeating now). */
const record = (id: string, over: Partial<WorkerRecord> = {}) => workerRecord(id, { updatedAt: Date.now(), models: ["m"], ...over });

function directoryOver(store: MemoryRegistryStore) {
  const lines: Array<Record<string, unknown>> = [];
  const metrics = new RouterMetrics();
  const log = createLogger("warn", {}, (line) => lines.push(JSON.parse(line) as Record<string, unknown>));
  // A poll far apart: each refresh below is asked for.
  const directory = new WorkerDirectory(store, 60_000, log, undefined, { metrics });
  return { directory, lines, metrics };
}

const ids = (d: WorkerDirectory) => d.candidates("m").map((w) => w.id).sort();

describe("WorkerDirectory when the registry loses its records", () => {
  it("keeps routing to the workers it knew until each heartbeats again or its TTL has passed", async () => {
    const store = new MemoryRegistryStore();
    const { directory, lines, metrics } = directoryOver(store);
    await store.publish(record("w-a", { ttlMs: 400 }), 10_000);
    await store.publish(record("w-b", { ttlMs: 400 }), 10_000);
    await store.publish(record("w-c", { state: "draining", ttlMs: 400 }), 10_000);
    await directory.start();
    try {
      expect(ids(directory)).toEqual(["w-a", "w-b"]);

      await store.clear(); // Redis back empty
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-a", "w-b"]);
      expect(directory.all().map((w) => w.id).sort()).toEqual(["w-a", "w-b", "w-c"]); // the draining one kept as draining: still no candidate
      expect(metrics.registryLosses.get()).toBe(1);
      expect(lines.filter((l) => String(l.msg).includes("registry lost its records"))).toHaveLength(1);

      // w-a heartbeats into the new registry: its new record is routed, not the kept one.
      await store.publish(record("w-a", { inFlight: 5, ttlMs: 400 }), 10_000);
      await directory.refresh();
      expect(directory.all().find((w) => w.id === "w-a")?.inFlight).toBe(5);
      expect(ids(directory)).toEqual(["w-a", "w-b"]);

      // w-b never comes back: it leaves once its TTL since the loss has passed.
      await sleep(450);
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-a"]);
      expect(directory.all().map((w) => w.id)).toEqual(["w-a"]);
      // One loss, counted once, however many refreshes followed.
      expect(metrics.registryLosses.get()).toBe(1);
    } finally {
      directory.stop();
    }
  });

  it("a kept worker whose record comes back refused is not routed to: the registry's word on it wins", async () => {
    const store = new MemoryRegistryStore();
    const { directory } = directoryOver(store);
    await store.publish(record("w-a", { ttlMs: 60_000 }), 10_000);
    await store.publish(record("w-b", { ttlMs: 60_000 }), 10_000);
    await directory.start();
    try {
      await store.clear();
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-a", "w-b"]);
      await store.putRaw("w-b", "{not json", 10_000);
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-a"]);
    } finally {
      directory.stop();
    }
  });

  it("a worker that leaves a registry that kept its records is gone at once: removed or expired, nothing is kept", async () => {
    const store = new MemoryRegistryStore();
    const { directory, metrics } = directoryOver(store);
    await store.publish(record("w-a", { ttlMs: 60_000 }), 10_000);
    await store.publish(record("w-b", { ttlMs: 60_000 }), 150);
    await directory.start();
    try {
      expect(ids(directory)).toEqual(["w-a", "w-b"]);
      await store.remove("w-a");
      await sleep(200); // w-b's record expires
      await directory.refresh();
      expect(ids(directory)).toEqual([]);
      expect(metrics.registryLosses.get()).toBe(0);
    } finally {
      directory.stop();
    }
  });

  it("a record that names no TTL (an older worker) is kept for the agent's default", async () => {
    const store = new MemoryRegistryStore();
    const { directory } = directoryOver(store);
    await store.publish(record("w-old"), 10_000);
    await directory.start();
    try {
      await store.clear();
      const lostAt = Date.now();
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-old"]);
      await sleep(Math.max(0, lostAt + LOST_REGISTRY_KEEP_MS - 200 - Date.now()));
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-old"]);
      await sleep(Math.max(0, lostAt + LOST_REGISTRY_KEEP_MS + 50 - Date.now()));
      await directory.refresh();
      expect(ids(directory)).toEqual([]);
    } finally {
      directory.stop();
    }
  });

  it("after failed refreshes (Redis unreachable), a worker whose record expired meanwhile is kept until its TTL has passed again", async () => {
    // What a failover longer than the heartbeat TTL looks like: no beat could land, so the records expired.
    class Unreachable extends MemoryRegistryStore {
      down = false;
      override async listing() {
        if (this.down) throw new Error("connect ECONNREFUSED");
        return super.listing();
      }
    }
    const store = new Unreachable();
    const { directory, lines, metrics } = directoryOver(store);
    await store.publish(record("w-a", { ttlMs: 400 }), 150);
    await store.publish(record("w-b", { ttlMs: 400 }), 10_000);
    await directory.start();
    try {
      store.down = true;
      await directory.refresh(); // fails: the last snapshot stays
      expect(ids(directory)).toEqual(["w-a", "w-b"]);
      await sleep(200); // w-a's record expires while the registry is away
      store.down = false;
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-a", "w-b"]);
      expect(lines.filter((l) => String(l.msg).includes("reachable again"))).toHaveLength(1);
      expect(metrics.registryLosses.get()).toBe(0); // not a loss: the registry kept its data
      await sleep(450);
      await directory.refresh();
      expect(ids(directory)).toEqual(["w-b"]);
    } finally {
      directory.stop();
    }
  });
});
