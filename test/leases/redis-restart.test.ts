// Fencing tokens only grow, also across a Redis restart that loses every live
// lease (what a failover without the last writes looks like): tokens come from
// Postgres, so the grants after the restart get larger tokens; the lost
// lease's holder is told it ended, and a dispatch still carrying its token is
// refused by the worker once the new holder has used the worker.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { listLeaseEvents } from "@switchyard/db";
import { SimWorker } from "#testkit/sim-worker";
import { waitFor } from "../helpers/env.ts";
import { startPrivateRedis, type PrivateRedis } from "#testkit/redis-server";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let redis: PrivateRedis;
let fx: RouterFixture;
let w1: SimWorker;
let w2: SimWorker;

beforeAll(async () => {
  redis = await startPrivateRedis();
  // Leases (and budgets) in the private Redis; the worker registry stays on the shared one.
  fx = await startTestRouter({ "redis.url": redis.url, "leases.minDurationS": 0.05, "leases.pollMs": 50 });
  w1 = await new SimWorker({ id: "rr-1", models: ["m-rr"], registry: fx.registry }).start();
  w2 = await new SimWorker({ id: "rr-2", models: ["m-rr"], registry: fx.registry }).start();
  await waitFor(() => fx.router.deps.directory.all().length === 2);
});

afterAll(async () => {
  await w1?.stop();
  await w2?.stop();
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

describe("fencing across a Redis restart", () => {
  it("grants after the restart carry larger tokens; the lost lease is fenced off", async () => {
    const before: number[] = [];
    let held: LeaseBody | undefined;
    for (let i = 0; i < 6; i++) {
      const res = await post("/v1/leases", { worker: i % 2 ? "rr-2" : "rr-1", duration_s: 30 });
      expect(res.status).toBe(201);
      const l = (await res.json()) as LeaseBody;
      before.push(l.fencing_token);
      if (i < 4) await fetch(`${fx.router.url}/v1/leases/${l.id}`, { method: "DELETE", headers: { authorization: `Bearer ${fx.key}` } });
      else if (l.worker === "rr-1") held = l;
    }
    expect(held).toBeDefined();
    expect((await chat(held!.id)).status).toBe(200);
    expect(w1.fencing.highest).toBe(held!.fencing_token);

    // Redis restarts empty: every live lease (and the per-worker token memory) is gone.
    const port = redis.port;
    await redis.stop();
    redis = await startPrivateRedis([], { port });
    const t0 = performance.now();
    const after = await waitFor(
      async () => {
        const res = await post("/v1/leases", { worker: "rr-1", duration_s: 30 });
        return res.status === 201 ? ((await res.json()) as LeaseBody) : undefined;
      },
      { timeoutMs: 15_000, intervalMs: 100, what: "a lease grant after the Redis restart" },
    );
    const recoveredMs = performance.now() - t0;
    expect(after.fencing_token).toBeGreaterThan(Math.max(...before));
    const other = await post("/v1/leases", { worker: "rr-2", duration_s: 30 });
    expect(other.status).toBe(201);
    expect(((await other.json()) as LeaseBody).fencing_token).toBeGreaterThan(after.fencing_token);

    // The old holder is told its lease ended; the new holder runs.
    const old = await chat(held!.id);
    expect(old.status).toBe(409);
    expect(((await old.json()) as { error: { code: string } }).error.code).toBe("lease_expired");
    expect((await chat(after.id)).status).toBe(200);
    expect(w1.fencing.highest).toBe(after.fencing_token);
    // A dispatch still carrying the lost lease's token (a router that decided before the restart) is refused.
    const zombie = await fetch(`${w1.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-switchyard-fencing-token": String(held!.fencing_token) },
      body: JSON.stringify({ model: "m-rr", messages: [{ role: "user", content: "late" }] }),
    });
    expect(zombie.status).toBe(409);
    expect(((await zombie.json()) as { error: { code: string } }).error.code).toBe("stale_fencing_token");

    // Per worker, the audited grants' tokens strictly increase, across the restart.
    for (const worker of ["rr-1", "rr-2"]) {
      const tokens = (await listLeaseEvents(fx.db.db, { worker })).filter((e) => e.event === "granted").map((e) => e.fencingToken);
      expect(tokens.length).toBeGreaterThanOrEqual(4);
      for (let i = 1; i < tokens.length; i++) expect(tokens[i]!).toBeGreaterThan(tokens[i - 1]!);
    }
    console.log(`leases: first grant ${Math.round(recoveredMs)} ms after the Redis restart`);
  }, 60_000);
});
