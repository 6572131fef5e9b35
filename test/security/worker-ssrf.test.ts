// Issue 10 item 3: SSRF through worker records. Invited workers publish
// records whose URL points at cloud metadata (in every spelling), at
// unspecified addresses that reach this host, at the router's own admin
// listener, Redis and Postgres, or use other schemes. The router checks on
// read — the URL and what its host resolves to — so none of them is ever
// routable, each is logged once, and no request reaches what they point at.
import { RedisRegistryStore } from "@switchyard/state";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { PREFIX, startFabric, type Fabric } from "./fabric.ts";

let fx: Fabric;
let canary: SimWorker;
let honest: SimWorker;

beforeAll(async () => {
  // Loopback is this test's worker network; anything else is outside it.
  fx = await startFabric({ "workers.allowedNetworks": ["127.0.0.0/8", "10.0.0.0/8"] });
  // An "internal service" on every interface of this host: what 0.0.0.0 and [::] reach.
  canary = await new SimWorker({ id: "canary", models: ["ssrf-model"], host: "::" }).start();
  const h = await fx.invite("honest", ["honest-model"]);
  honest = await new SimWorker({ id: "honest", models: ["honest-model"], registry: h.store, token: h.invite.callSecret }).start();
  await waitFor(() => fx.router.deps.directory.candidates("honest-model").length === 1, { what: "honest worker" });
});

afterAll(async () => {
  await honest?.stop();
  await canary?.stop();
  await fx?.close();
});

describe("worker URLs are checked on read", () => {
  it("metadata, unspecified, own-listener, state-store and non-http URLs never become routable", async () => {
    const canaryPort = new URL(canary.url).port;
    const adminPort = new URL(fx.router.adminUrl).port;
    const pgPort = new URL(fx.db.url).port || "5432";
    const bad = [
      "http://169.254.169.254/latest/meta-data/",
      "http://[::ffff:169.254.169.254]/",
      "http://2852039166/",
      "http://0xa9fea9fe/",
      "http://0251.0376.0251.0376/",
      "http://metadata.google.internal/computeMetadata/v1/",
      `http://0.0.0.0:${canaryPort}`,
      `http://[::]:${canaryPort}`,
      `http://127.0.0.1:${adminPort}`,
      // Only resolving the name shows it is this host.
      `http://localhost:${adminPort}`,
      `http://127.0.0.1:${fx.redis.port}`,
      `http://localhost:${fx.redis.port}`,
      `http://127.0.0.1:${pgPort}`,
      // Outside workers.allowedNetworks.
      `http://[::1]:${canaryPort}`,
      `http://192.168.77.1:${canaryPort}`,
      "file:///etc/passwd",
      `gopher://127.0.0.1:${fx.redis.port}/_FLUSHALL`,
    ];
    const admin = new RedisRegistryStore(fx.admin, PREFIX);
    for (const [i, url] of bad.entries()) {
      const id = `ssrf-${i}`;
      const { store } = await fx.invite(id, ["ssrf-model"]);
      // Written by the worker's own ACL user, raw: the router must not rely on writers' checks.
      await store.putRaw(id, JSON.stringify({ ...canary.record(), id, url }), 60_000);
    }
    for (const [i, url] of bad.entries()) {
      await waitFor(() => fx.logs.some((l) => l.msg === "worker record refused" && l.worker === `ssrf-${i}`), { what: `refusal of ${url}` });
    }
    const refused = fx.logs.filter((l) => l.msg === "worker record refused");
    for (const l of refused) expect(["unsafe_url", "invalid_record"], JSON.stringify(l)).toContain(l.reason);
    // Many polls later: still refused, still logged once each.
    await sleep(300);
    expect(fx.logs.filter((l) => l.msg === "worker record refused")).toHaveLength(bad.length);
    expect(fx.router.deps.directory.all().map((w) => w.id)).toEqual(["honest"]);
    for (let i = 0; i < 5; i++) expect((await fx.chat("ssrf-model")).status).not.toBe(200);
    expect(canary.served.size).toBe(0);
    expect(canary.lastRequestHeaders).toBeUndefined();
    expect((await fx.chat("honest-model")).status).toBe(200);
    // A worker fixing its URL becomes routable.
    await admin.putRaw("ssrf-0", JSON.stringify({ ...canary.record(), id: "ssrf-0" }), 60_000);
    await waitFor(() => fx.router.deps.directory.candidates("ssrf-model").some((w) => w.id === "ssrf-0"), { what: "fixed worker routable" });
  }, 30_000);
});
