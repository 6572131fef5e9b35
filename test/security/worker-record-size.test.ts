// Issue 10 item 5 (records): an invited worker heartbeating a 64 MiB record
// must not cost routers CPU or memory. Records over registry.maxRecordBytes
// are refused in Redis (registry_read.lua looks at the length, never sends
// the value) — logged once, not routable — and the router stays responsive.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { workerKey } from "@switchyard/state";
import { PREFIX, startFabric, type Fabric } from "./fabric.ts";

const workerKeyOf = (id: string) => workerKey(PREFIX, id);

let fx: Fabric;
let honest: SimWorker;

beforeAll(async () => {
  fx = await startFabric({ "registry.maxRecordBytes": 8 * 1024 });
  const h = await fx.invite("honest", ["size-model"]);
  honest = await new SimWorker({ id: "honest", models: ["size-model"], registry: h.store, token: h.invite.callSecret }).start();
  await waitFor(() => fx.router.deps.directory.candidates("size-model").length === 1, { what: "honest worker" });
});

afterAll(async () => {
  await honest?.stop();
  await fx?.close();
});

async function healthzP95(n: number): Promise<number> {
  const times: number[] = [];
  for (let i = 0; i < n; i++) {
    const t0 = performance.now();
    expect((await fetch(`${fx.router.url}/healthz`)).status).toBe(200);
    times.push(performance.now() - t0);
    await sleep(10);
  }
  times.sort((a, b) => a - b);
  return times[Math.floor(n * 0.95)]!;
}

describe("worker record size", () => {
  it("a 64 MiB heartbeat is refused unread: logged once, never routable, the router stays fast", async () => {
    const e = await fx.invite("bloat", ["size-model"]);
    const bloat = await new SimWorker({ id: "bloat", models: ["size-model"] }).start();
    try {
      const huge = JSON.stringify({ ...bloat.record(), version: "v".repeat(64 * 1024 * 1024) });
      // Its ACL user may write its own key with anything: two heartbeats of 64 MiB.
      await e.store.putRaw("bloat", huge, 60_000);
      await waitFor(() => fx.logs.some((l) => l.msg === "worker record refused" && l.worker === "bloat" && l.reason === "too_large"), { what: "refusal logged" });
      await e.store.putRaw("bloat", huge, 60_000);
      // 20 polls (every 50 ms) with the record in Redis, the router otherwise idle:
      // reading (let alone parsing) 64 MiB each poll would keep this process busy.
      // The Redis is this test's own, so what it sent in that second is what the router read.
      const sent = async () => Number(/total_net_output_bytes:(\d+)/.exec(await fx.admin.info("stats"))![1]);
      const sent0 = await sent();
      const cpu0 = process.cpuUsage();
      const wall0 = performance.now();
      await sleep(1000);
      const cpu = process.cpuUsage(cpu0);
      const busy = (cpu.user + cpu.system) / 1000 / (performance.now() - wall0);
      expect(await sent() - sent0).toBeLessThan(1 << 20);
      expect(busy).toBeLessThan(0.15);
      // And it answers at once (the bound leaves room for a loaded CI box; a
      // router parsing 64 MiB per poll would take seconds).
      expect(await healthzP95(40)).toBeLessThan(250);
      expect(fx.router.deps.directory.all().map((w) => w.id)).toEqual(["honest"]);
      expect(fx.logs.filter((l) => l.msg === "worker record refused" && l.worker === "bloat")).toHaveLength(1);
      expect(fx.router.deps.metrics.registryRefusals.get({ reason: "too_large" })).toBe(1);
      expect(String(fx.logs.find((l) => l.worker === "bloat")?.detail)).toMatch(/over 8192/);
      for (let i = 0; i < 5; i++) expect((await fx.chat("size-model")).status).toBe(200);
      expect(bloat.served.size).toBe(0);
      // Back to a normal-sized record: it becomes routable.
      await e.store.publish({ ...bloat.record() }, 60_000);
      await waitFor(() => fx.router.deps.directory.candidates("size-model").length === 2, { what: "bloat back in rotation" });
    } finally {
      await bloat.stop();
    }
  }, 30_000);

  it("a heartbeat written without a TTL is refused: a worker cannot stay in rotation after it dies", async () => {
    const e = await fx.invite("immortal", ["size-model"]);
    const immortal = await new SimWorker({ id: "immortal", models: ["size-model"] }).start();
    // Its ACL user may SET its own key without PX.
    await e.conn.set(workerKeyOf("immortal"), JSON.stringify(immortal.record()));
    await waitFor(() => fx.logs.some((l) => l.msg === "worker record refused" && l.worker === "immortal" && l.reason === "no_ttl"), { what: "refusal logged" });
    expect(fx.router.deps.directory.all().map((w) => w.id)).not.toContain("immortal");
    // The same record with an expiry is routable.
    await e.conn.set(workerKeyOf("immortal"), JSON.stringify(immortal.record()), "PX", 60_000);
    await waitFor(() => fx.router.deps.directory.all().some((w) => w.id === "immortal"), { what: "immortal with a TTL listed" });
    await e.conn.del(workerKeyOf("immortal"));
    await immortal.stop();
  });
});
