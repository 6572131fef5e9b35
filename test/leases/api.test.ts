// The lease API through a real router (real Redis, real Postgres) with sim
// workers: grant, read, extend, release, expiry by itself, waiting for a
// worker, the errors, tenant isolation and the audit rows.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, listLeaseEvents } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let fx: RouterFixture;
let other: { key: string; tenantId: number };
const workers: SimWorker[] = [];

beforeAll(async () => {
  fx = await startTestRouter({ "leases.minDurationS": 0.05, "leases.maxDurationS": 60, "leases.maxWaitS": 10, "leases.pollMs": 50 });
  const t = await createTenant(fx.db.db, "rival");
  if (!t.ok) throw new Error("tenant");
  other = { key: (await createKey(fx.db.db, t.tenant.id)).key, tenantId: t.tenant.id };
  for (const [id, models, state] of [
    ["api-a1", ["m-a"], "ready"],
    ["api-b1", ["m-b"], "ready"],
    ["api-b2", ["m-b"], "ready"],
    ["api-c1", ["m-c"], "ready"],
    ["api-d1", ["m-d"], "draining"],
    ["api-e1", ["m-e"], "ready"],
    ["api-f1", ["m-f"], "ready"],
    ["api-g1", ["m-g"], "ready"],
  ] as const) {
    workers.push(await new SimWorker({ id, models: [...models], registry: fx.registry, state }).start());
  }
  await waitFor(() => fx.router.deps.directory.all().length === workers.length);
});

afterAll(async () => {
  for (const w of workers) await w.stop();
  await fx?.close();
});

interface LeaseBody {
  id: string;
  object: string;
  worker: string;
  fencing_token: number;
  status: string;
  granted_at: number;
  expires_at: number;
  ended_at: number | null;
}
interface ErrorBody {
  error: { message: string; type: string; param: string | null; code: string; request_id?: string };
}

async function call<T = LeaseBody>(method: string, path: string, body?: unknown, key = fx.key): Promise<{ status: number; body: T; headers: Headers }> {
  const res = await fetch(`${fx.router.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${key}`, ...(body !== undefined ? { "content-type": "application/json" } : {}) },
    ...(body !== undefined ? { body: typeof body === "string" ? body : JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as T, headers: res.headers };
}

const acquire = <T = LeaseBody>(body: unknown, key?: string) => call<T>("POST", "/v1/leases", body, key);

describe("lease API", () => {
  it("grant → get → extend → release, each audited", async () => {
    const t0 = Date.now() / 1000;
    const g = await acquire({ model: "m-a", duration_s: 30 });
    expect(g.status).toBe(201);
    expect(g.headers.get("location")).toBe(`/v1/leases/${g.body.id}`);
    expect(g.body).toMatchObject({ object: "lease", worker: "api-a1", status: "active", ended_at: null });
    expect(g.body.id).toMatch(/^lease_[A-Za-z0-9_-]{24}$/);
    expect(Number.isSafeInteger(g.body.fencing_token) && g.body.fencing_token > 0).toBe(true);
    expect(g.body.expires_at - g.body.granted_at).toBeCloseTo(30, 3);
    expect(Math.abs(g.body.granted_at - t0)).toBeLessThan(5);

    const r = await call("GET", `/v1/leases/${g.body.id}`);
    expect(r.status).toBe(200);
    expect(r.body).toEqual(g.body);

    const e = await call("POST", `/v1/leases/${g.body.id}/extend`, { duration_s: 50 });
    expect(e.status).toBe(200);
    expect(e.body.fencing_token).toBe(g.body.fencing_token);
    expect(e.body.expires_at).toBeGreaterThan(g.body.expires_at + 15);

    const d = await call("DELETE", `/v1/leases/${g.body.id}`);
    expect(d.status).toBe(200);
    expect(d.body).toMatchObject({ id: g.body.id, status: "released", fencing_token: g.body.fencing_token });
    expect(d.body.ended_at).not.toBeNull();
    // Released: readable (as released), releasing again is harmless, extending is a 409.
    expect((await call("GET", `/v1/leases/${g.body.id}`)).body).toMatchObject({ status: "released" });
    expect(await call("DELETE", `/v1/leases/${g.body.id}`)).toMatchObject({ status: 200, body: { status: "released" } });
    const late = await call<ErrorBody>("POST", `/v1/leases/${g.body.id}/extend`, { duration_s: 5 });
    expect(late.status).toBe(409);
    expect(late.body.error).toMatchObject({ code: "lease_expired", type: "conflict_error" });
    // The worker is free again, with a larger token.
    const again = await acquire({ worker: "api-a1", duration_s: 1 });
    expect(again.status).toBe(201);
    expect(again.body.fencing_token).toBeGreaterThan(g.body.fencing_token);
    await call("DELETE", `/v1/leases/${again.body.id}`);

    const events = (await listLeaseEvents(fx.db.db, { worker: "api-a1" })).filter((ev) => ev.leaseId === g.body.id);
    expect(events.map((ev) => ev.event)).toEqual(["granted", "extended", "released"]);
    // The audit is append-only.
    await expect(fx.db.sql`update lease_events set fencing_token = 0 where lease_id = ${g.body.id}`).rejects.toThrow(/append-only/);
    await expect(fx.db.sql`delete from lease_events where lease_id = ${g.body.id}`).rejects.toThrow(/append-only/);
    // Each audited change is counted on /metrics too.
    const metrics = await (await fetch(`${fx.router.adminUrl}/metrics`)).text();
    expect(metrics).toMatch(/switchyard_lease_events_total\{event="granted"\} [1-9]/);
    expect(metrics).toMatch(/switchyard_lease_events_total\{event="extended"\} [1-9]/);
    expect(events.every((ev) => ev.tenantId === fx.tenantId && ev.fencingToken === g.body.fencing_token)).toBe(true);
    expect(events[0]!.at.getTime()).toBe(Math.round(g.body.granted_at * 1000));
    expect(events[1]!.expiresAt.getTime()).toBe(Math.round(e.body.expires_at * 1000));
  });

  it("chooses a free worker for a model; a second tenant gets the other one, a third request a 409 with Retry-After", async () => {
    const a = await acquire({ model: "m-b", duration_s: 20 });
    const b = await acquire({ model: "m-b", duration_s: 20 }, other.key);
    expect([a.status, b.status]).toEqual([201, 201]);
    expect(new Set([a.body.worker, b.body.worker])).toEqual(new Set(["api-b1", "api-b2"]));
    const c = await acquire<ErrorBody>({ model: "m-b", duration_s: 5 });
    expect(c.status).toBe(409);
    expect(c.body.error).toMatchObject({ code: "lease_conflict", type: "conflict_error", param: null });
    expect(c.body.error.request_id).toBeTruthy();
    const retry = Number(c.headers.get("retry-after"));
    expect(retry).toBeGreaterThanOrEqual(18);
    expect(retry).toBeLessThanOrEqual(20);
    // Naming the held worker: the same 409.
    expect((await acquire<ErrorBody>({ worker: a.body.worker, duration_s: 5 }, other.key)).body.error.code).toBe("lease_conflict");
    await call("DELETE", `/v1/leases/${a.body.id}`);
    await call("DELETE", `/v1/leases/${b.body.id}`, undefined, other.key);
  });

  it("a lease expires by itself: the worker frees, GET says expired, the expiry is audited once", async () => {
    const g = await acquire({ worker: "api-c1", duration_s: 0.3 });
    expect(g.status).toBe(201);
    expect((await acquire<ErrorBody>({ worker: "api-c1", duration_s: 1 }, other.key)).status).toBe(409);
    await sleep(400);
    const r = await call("GET", `/v1/leases/${g.body.id}`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ status: "expired", ended_at: g.body.expires_at, fencing_token: g.body.fencing_token });
    const next = await acquire({ worker: "api-c1", duration_s: 1 }, other.key);
    expect(next.status).toBe(201);
    expect(next.body.fencing_token).toBeGreaterThan(g.body.fencing_token);
    const late = await call<ErrorBody>("POST", `/v1/leases/${g.body.id}/extend`, { duration_s: 5 });
    expect(late.status).toBe(409);
    expect(late.body.error.code).toBe("lease_expired");
    const expired = await waitFor(async () => {
      const rows = (await listLeaseEvents(fx.db.db, { worker: "api-c1" })).filter((ev) => ev.leaseId === g.body.id && ev.event === "expired");
      return rows.length ? rows : undefined;
    });
    expect(expired).toHaveLength(1);
    expect(expired[0]!.expiresAt.getTime()).toBe(Math.round(g.body.expires_at * 1000));
    expect(expired[0]!.at.getTime()).toBeGreaterThanOrEqual(expired[0]!.expiresAt.getTime());
    await call("DELETE", `/v1/leases/${next.body.id}`, undefined, other.key);
  });

  it("extend keeps the worker past the original expiry", async () => {
    const g = await acquire({ worker: "api-e1", duration_s: 0.4 });
    const e = await call("POST", `/v1/leases/${g.body.id}/extend`, { duration_s: 2 });
    expect(e.status).toBe(200);
    await sleep(600);
    expect((await call("GET", `/v1/leases/${g.body.id}`)).body.status).toBe("active");
    expect((await acquire<ErrorBody>({ worker: "api-e1", duration_s: 1 }, other.key)).status).toBe(409);
    await call("DELETE", `/v1/leases/${g.body.id}`);
  });

  it("wait_s: a request waits for the lease to end (release or expiry), then gets the worker", async () => {
    const held = await acquire({ worker: "api-f1", duration_s: 0.8 });
    expect(held.status).toBe(201);
    const t0 = performance.now();
    const waited = await acquire({ model: "m-f", duration_s: 5, wait_s: 5 }, other.key);
    const ms = performance.now() - t0;
    expect(waited.status).toBe(201);
    expect(waited.body.worker).toBe("api-f1");
    expect(ms).toBeGreaterThan(500);
    expect(ms).toBeLessThan(3_000);
    expect(waited.body.granted_at).toBeGreaterThanOrEqual(held.body.expires_at);

    // A release wakes the waiter at once.
    const pending = acquire({ worker: "api-f1", duration_s: 5, wait_s: 5 });
    await sleep(200);
    const t1 = performance.now();
    await call("DELETE", `/v1/leases/${waited.body.id}`, undefined, other.key);
    const third = await pending;
    expect(third.status).toBe(201);
    expect(performance.now() - t1).toBeLessThan(800);
    // Waiting runs out: 409.
    const t2 = performance.now();
    const none = await acquire<ErrorBody>({ worker: "api-f1", duration_s: 1, wait_s: 0.3 }, other.key);
    expect(none.status).toBe(409);
    expect(performance.now() - t2).toBeGreaterThanOrEqual(290);
    await call("DELETE", `/v1/leases/${third.body.id}`);
  });

  it("errors: bad bodies 400, unknown model/worker/lease 404, no ready worker 503, no key 401", async () => {
    const bad = async (body: unknown, param: string | null) => {
      const r = await acquire<ErrorBody>(body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.error.code).toMatch(/^invalid_(request|json)$/);
      if (param !== null) expect(r.body.error.param).toBe(param);
    };
    await bad({ duration_s: 5 }, "model");
    await bad({ model: "m-a", worker: "api-a1", duration_s: 5 }, "model");
    await bad({ model: "m-a" }, "duration_s");
    await bad({ model: "m-a", duration_s: 0 }, "duration_s");
    await bad({ model: "m-a", duration_s: 61 }, "duration_s");
    await bad({ model: "m-a", duration_s: "5" }, "duration_s");
    await bad({ model: "m-a", duration_s: 5, wait_s: 11 }, "wait_s");
    await bad({ model: "m-a", duration_s: 5, wait_s: -1 }, "wait_s");
    await bad({ model: "m-a", duration_s: 5, extra: 1 }, null);
    await bad({ worker: "no spaces", duration_s: 5 }, "worker");
    await bad("{not json", null);
    expect((await call<ErrorBody>("POST", "/v1/leases/lease_x/extend", { duration_s: 100 })).status).toBe(400);

    const unknownModel = await acquire<ErrorBody>({ model: "m-nope", duration_s: 5 });
    expect(unknownModel).toMatchObject({ status: 404, body: { error: { code: "model_not_found", param: "model" } } });
    const unknownWorker = await acquire<ErrorBody>({ worker: "api-nope", duration_s: 5 });
    expect(unknownWorker).toMatchObject({ status: 404, body: { error: { code: "worker_not_found", param: "worker" } } });
    const draining = await acquire<ErrorBody>({ model: "m-d", duration_s: 5 });
    expect(draining.status).toBe(503);
    expect(draining.body.error.code).toBe("no_healthy_backend");
    expect(draining.headers.get("retry-after")).toBeTruthy();
    for (const id of ["lease_doesnotexist000000000000", "not-a-lease", "lease_a%7Cb"]) {
      const r = await call<ErrorBody>("GET", `/v1/leases/${id}`);
      expect(r.status).toBe(404);
      expect(r.body.error.code).toBe("lease_not_found");
      expect((await call<ErrorBody>("DELETE", `/v1/leases/${id}`)).status).toBe(404);
      expect((await call<ErrorBody>("POST", `/v1/leases/${id}/extend`, { duration_s: 1 })).status).toBe(404);
    }
    const anon = await fetch(`${fx.router.url}/v1/leases`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "m-a", duration_s: 5 }) });
    expect(anon.status).toBe(401);
    expect(((await anon.json()) as ErrorBody).error.code).toBe("missing_api_key");
    expect((await call<ErrorBody>("GET", "/v1/leases/lease_whatever", undefined, "sy_00000000_wrongwrongwrongwrongwrongwrongwrong")).status).toBe(401);
  });

  it("tenant isolation: another tenant's lease is a 404 for GET, extend and DELETE, and stays intact", async () => {
    const mine = await acquire({ worker: "api-g1", duration_s: 10 });
    expect(mine.status).toBe(201);
    const path = `/v1/leases/${mine.body.id}`;
    for (const [method, p, body] of [
      ["GET", path, undefined],
      ["POST", `${path}/extend`, { duration_s: 30 }],
      ["DELETE", path, undefined],
    ] as const) {
      const r = await call<ErrorBody>(method, p, body, other.key);
      expect(r.status, `${method} ${p}`).toBe(404);
      expect(r.body.error.code).toBe("lease_not_found");
      expect(r.body.error.message).not.toContain("api-g1");
    }
    expect(await call("GET", path)).toMatchObject({ status: 200, body: { status: "active", expires_at: mine.body.expires_at } });
    await call("DELETE", path);
    // Ended, it is still not theirs.
    expect((await call<ErrorBody>("GET", path, undefined, other.key)).status).toBe(404);
    expect((await call<ErrorBody>("DELETE", path, undefined, other.key)).status).toBe(404);
    const rows = await listLeaseEvents(fx.db.db, { tenantId: other.tenantId });
    expect(rows.some((r) => r.leaseId === mine.body.id)).toBe(false);
  });
});
