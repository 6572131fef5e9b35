// A Redis restart that loses every live lease (what a failover without the
// last writes, or a Redis without persistence, looks like). Each lease
// script then refuses (UNRESTORED, lease_lib.lua) until a router has put the
// live leases back from the audit in Postgres (lease_restore.lua): the
// holders keep their workers, nobody else is granted them meanwhile, and a
// lease that ended while Redis was down is audited as expired once. Fencing
// tokens still only grow (they come from Postgres): after the holder lets
// go, the next grant's token is larger, and a dispatch still carrying the old
// token is refused by the worker once the new holder has used it.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createKey, createTenant, listLeaseEvents } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let redis: PrivateRedis;
let fx: RouterFixture;
let w1: SimWorker;
let w2: SimWorker;
let w3: SimWorker;
let otherKey: string;

beforeAll(async () => {
  redis = await startPrivateRedis();
  // Leases (and budgets) in the private Redis; the worker registry stays on the shared one.
  fx = await startTestRouter({ "redis.url": redis.url, "leases.minDurationS": 0.05, "leases.pollMs": 50 });
  w1 = await new SimWorker({ id: "rr-1", models: ["m-rr"], registry: fx.registry }).start();
  w2 = await new SimWorker({ id: "rr-2", models: ["m-rr"], registry: fx.registry }).start();
  w3 = await new SimWorker({ id: "rr-3", models: ["m-rr"], registry: fx.registry }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 3);
  const t = await createTenant(fx.db.db, "another");
  if (!t.ok) throw new Error("tenant");
  otherKey = (await createKey(fx.db.db, t.tenant.id)).key;
});

afterAll(async () => {
  await w1?.stop();
  await w2?.stop();
  await w3?.stop();
  await fx?.close();
  await redis?.stop();
});

interface LeaseBody {
  id: string;
  worker: string;
  fencing_token: number;
}

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${fx.router.url}${path}`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
  });
const chat = (leaseId: string) => post("/v1/chat/completions", { model: "m-rr", messages: [{ role: "user", content: "hi" }] }, { "x-switchyard-lease": leaseId });

describe("leases across a Redis restart that loses them", () => {
  it("the live leases are put back from the audit: holders keep their workers, others are refused; tokens keep growing after", async () => {
    const before: number[] = [];
    const live: LeaseBody[] = [];
    for (let i = 0; i < 6; i++) {
      const res = await post("/v1/leases", { worker: i % 2 ? "rr-2" : "rr-1", duration_s: 30 });
      expect(res.status).toBe(201);
      const l = (await res.json()) as LeaseBody;
      before.push(l.fencing_token);
      if (i < 4) await fetch(`${fx.router.url}/v1/leases/${l.id}`, { method: "DELETE", headers: { authorization: `Bearer ${fx.key}` } });
      else live.push(l);
    }
    const held = live.find((l) => l.worker === "rr-1")!;
    expect((await chat(held.id)).status).toBe(200);
    expect(w1.fencing.highest).toBe(held.fencing_token);
    // A short lease on a third worker, which ends while Redis is down.
    const short = (await (await post("/v1/leases", { worker: "rr-3", duration_s: 0.3 })).json()) as LeaseBody;
    expect(short.worker).toBe("rr-3");

    // Redis restarts empty: every live lease (and the per-worker token memory) is gone.
    const restoredBefore = fx.router.deps.metrics.leaseRestores.get({ outcome: "restored" });
    const port = redis.port;
    await redis.stop();
    await sleep(400);
    redis = await startPrivateRedis([], { port });

    // Someone else asking for rr-1 meanwhile is refused: the store restores before it answers.
    const other = await fetch(`${fx.router.url}/v1/leases`, {
      method: "POST",
      headers: { authorization: `Bearer ${otherKey}`, "content-type": "application/json" },
      body: JSON.stringify({ worker: "rr-1", duration_s: 30 }),
    });
    expect(other.status).toBe(409);
    expect(((await other.json()) as { error: { code: string } }).error.code).toBe("lease_conflict");
    // The holders still hold, and run on their workers with their tokens.
    expect((await chat(held.id)).status).toBe(200);
    expect(w1.fencing.highest).toBe(held.fencing_token);
    const view = (await (await fetch(`${fx.router.url}/v1/leases/${held.id}`, { headers: { authorization: `Bearer ${fx.key}` } })).json()) as { status: string; fencing_token: number };
    expect(view).toMatchObject({ status: "active", fencing_token: held.fencing_token });
    expect(fx.router.deps.metrics.leaseRestores.get({ outcome: "restored" }) - restoredBefore).toBe(2);
    // The lease that ended while Redis was down is audited as expired, once.
    await waitFor(async () => (await listLeaseEvents(fx.db.db, { worker: "rr-3" })).some((e) => e.event === "expired"), { what: "the short lease's expiry audited" });
    expect((await listLeaseEvents(fx.db.db, { worker: "rr-3" })).map((e) => e.event)).toEqual(["granted", "expired"]);

    // The holder lets go: the next grant on rr-1 carries a larger token than any before the restart.
    expect((await fetch(`${fx.router.url}/v1/leases/${held.id}`, { method: "DELETE", headers: { authorization: `Bearer ${fx.key}` } })).status).toBe(200);
    const after = (await (await post("/v1/leases", { worker: "rr-1", duration_s: 30 })).json()) as LeaseBody;
    expect(after.fencing_token).toBeGreaterThan(Math.max(...before, short.fencing_token));
    const old = await chat(held.id);
    expect(old.status).toBe(409);
    expect(((await old.json()) as { error: { code: string } }).error.code).toBe("lease_expired");
    expect((await chat(after.id)).status).toBe(200);
    expect(w1.fencing.highest).toBe(after.fencing_token);
    // A dispatch still carrying the old lease's token (a router that decided before) is refused.
    const zombie = await fetch(`${w1.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-switchyard-fencing-token": String(held.fencing_token) },
      body: JSON.stringify({ model: "m-rr", messages: [{ role: "user", content: "late" }] }),
    });
    expect(zombie.status).toBe(409);
    expect(((await zombie.json()) as { error: { code: string } }).error.code).toBe("stale_fencing_token");

    // Per worker, the audited grants' tokens strictly increase, across the restart, and never overlap.
    for (const worker of ["rr-1", "rr-2"]) {
      const tokens = (await listLeaseEvents(fx.db.db, { worker })).filter((e) => e.event === "granted").map((e) => e.fencingToken);
      expect(tokens.length).toBeGreaterThanOrEqual(3);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    }
  }, 60_000);
});
