// One key must not lease every worker. The attack: a tenant loops
// POST /v1/leases over the pool (and extends each lease forever), and every
// other tenant's requests find no free worker. With leases.maxPerTenant the
// grant past the cap is refused (409 lease_limit_reached, nothing granted or
// audited), another tenant still gets a worker, and a release makes room.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, listLeaseEvents } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let fx: RouterFixture;
let rival: { key: string; tenantId: number };
const workers: SimWorker[] = [];

beforeAll(async () => {
  fx = await startTestRouter({ "leases.maxPerTenant": 2, "leases.pollMs": 50 });
  const t = await createTenant(fx.db.db, "rival");
  if (!t.ok) throw new Error("tenant");
  rival = { key: (await createKey(fx.db.db, t.tenant.id)).key, tenantId: t.tenant.id };
  for (const id of ["hoard-1", "hoard-2", "hoard-3"]) workers.push(await new SimWorker({ id, models: ["m-pool"], registry: fx.registry }).start());
  await waitFor(() => fx.router.deps.directory.all().length === workers.length);
});

afterAll(async () => {
  for (const w of workers) await w.stop();
  await fx?.close();
});

const call = async (method: string, path: string, body: unknown, key = fx.key) => {
  const res = await fetch(`${fx.router.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as { id?: string; worker?: string; error?: { code: string; message: string } } };
};

describe("a tenant at leases.maxPerTenant", () => {
  it("cannot lease the rest of the pool; another tenant can; a release makes room", async () => {
    const first = await call("POST", "/v1/leases", { worker: "hoard-1", duration_s: 60 });
    const second = await call("POST", "/v1/leases", { worker: "hoard-2", duration_s: 60 });
    expect([first.status, second.status]).toEqual([201, 201]);
    const third = await call("POST", "/v1/leases", { worker: "hoard-3", duration_s: 60 });
    expect(third.status).toBe(409);
    expect(third.body.error?.code).toBe("lease_limit_reached");
    expect(third.body.error?.message).toContain("release one first");
    // By model too: no way round the cap.
    expect((await call("POST", "/v1/leases", { model: "m-pool", duration_s: 60 })).body.error?.code).toBe("lease_limit_reached");
    const grants = (await listLeaseEvents(fx.db.db, { tenantId: fx.tenantId })).filter((e) => e.event === "granted");
    expect(grants).toHaveLength(2);
    // The rival still gets the last worker.
    const theirs = await call("POST", "/v1/leases", { model: "m-pool", duration_s: 60 }, rival.key);
    expect([theirs.status, theirs.body.worker]).toEqual([201, "hoard-3"]);
    // Released: room for one more.
    expect((await call("DELETE", `/v1/leases/${first.body.id}`, undefined)).status).toBe(200);
    expect((await call("POST", "/v1/leases", { worker: "hoard-1", duration_s: 60 })).status).toBe(201);
  });
});
