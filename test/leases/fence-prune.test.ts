// A worker's fence record in Redis (the highest token granted on it) is
// forgotten leases.fenceIdleS after its last lease ended, by the routers'
// lease poll, so `{leases}:fence` does not keep a field for every worker id
// ever leased. Through a real router: the config reaches the store, and a
// worker leased again after the prune gets a larger token, which it accepts.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { leaseKeys } from "@switchyard/state";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { startTestRouter, type RouterFixture } from "../helpers/router.ts";

let fx: RouterFixture;
const workers: SimWorker[] = [];

beforeAll(async () => {
  // The smallest bound the config allows: 2 × (maxDurationS + maxWaitS).
  fx = await startTestRouter({ "leases.minDurationS": 0.1, "leases.maxDurationS": 2, "leases.maxWaitS": 0, "leases.fenceIdleS": 4, "leases.pollMs": 50 });
  for (const id of ["fp-1", "fp-2"]) workers.push(await new SimWorker({ id, models: ["m-fp"], registry: fx.registry }).start());
  await waitFor(() => fx.router.deps.directory.all().length === workers.length);
});

afterAll(async () => {
  for (const w of workers) await w.stop();
  await fx?.close();
});

const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
  const res = await fetch(`${fx.router.url}${path}`, {
    method,
    headers: { authorization: `Bearer ${fx.key}`, "content-type": "application/json", ...headers },
    ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
  });
  return { status: res.status, body: (await res.json()) as { id: string; fencing_token: number; worker: string } };
};

const chat = (leaseId: string) => call("POST", "/v1/chat/completions", { model: "m-fp", messages: [{ role: "user", content: "hi" }] }, { "x-switchyard-lease": leaseId });

describe("lease fence records", () => {
  it("the poll forgets an idle worker's record after leases.fenceIdleS, keeps a leased one's; the next grant carries a larger token and the worker accepts it", async () => {
    const fence = leaseKeys(fx.redis.prefix)[3];
    const first = await call("POST", "/v1/leases", { worker: "fp-1", duration_s: 0.5 });
    expect(first.status).toBe(201);
    expect((await chat(first.body.id)).status).toBe(200);
    expect((await call("DELETE", `/v1/leases/${first.body.id}`)).status).toBe(200);
    // fp-2 stays leased (extended) the whole time.
    const held = await call("POST", "/v1/leases", { worker: "fp-2", duration_s: 2 });
    expect(held.status).toBe(201);
    expect(await fx.redis.redis.hkeys(fence)).toEqual(expect.arrayContaining(["fp-1", "fp-2"]));
    for (let i = 0; i < 10; i++) {
      await sleep(500);
      expect((await call("POST", `/v1/leases/${held.body.id}/extend`, { duration_s: 2 })).status).toBe(200);
    }
    // More than 4 s after fp-1's lease ended: the poll has dropped its record, not fp-2's.
    await waitFor(async () => !(await fx.redis.redis.hexists(fence, "fp-1")), { timeoutMs: 2_000, what: "fp-1's fence record pruned" });
    expect(Number(await fx.redis.redis.hget(fence, "fp-2"))).toBe(held.body.fencing_token);

    const again = await call("POST", "/v1/leases", { worker: "fp-1", duration_s: 2 });
    expect(again.status).toBe(201);
    expect(again.body.fencing_token).toBeGreaterThan(held.body.fencing_token);
    expect((await chat(again.body.id)).status).toBe(200);
    const fp1 = workers[0]!.fenceLog;
    expect(fp1.map((f) => [f.token, f.accepted])).toEqual([
      [first.body.fencing_token, true],
      [again.body.fencing_token, true],
    ]);
    // The superseded holder gets nowhere.
    expect((await chat(first.body.id)).status).toBe(409);
  }, 30_000);
});
