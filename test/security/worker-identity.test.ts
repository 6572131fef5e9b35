// Issue 10 item 1: a worker impersonating another. Invited worker `evil`
// writes its own registry key with `"id": "victim"` and its own URL; the
// router must take the identity from the key (which evil's ACL user is the
// only one able to write), so evil never gets victim's call secret, prompts
// or leased requests. And fencing tokens count on a worker only with a
// router's signature for that worker: whoever holds victim's call secret
// still cannot push its highest token to 2^53−1 and lock out real leases.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { FENCING_SIGNATURE_HEADER, workerCallSecret } from "@switchyard/state";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { SECRET_KEY, startFabric, type Fabric } from "./fabric.ts";

let fx: Fabric;
let victim: SimWorker;
let evil: SimWorker;
let victimSecret: string;
let fencingKey: string;

beforeAll(async () => {
  fx = await startFabric({ "leases.minDurationS": 0.05 });
  const v = await fx.invite("victim", ["id-model"]);
  victimSecret = v.invite.callSecret;
  fencingKey = v.invite.fencingKey;
  victim = await new SimWorker({ id: "victim", models: ["id-model"], registry: v.store, token: victimSecret, fencingKey, heartbeatMs: 200 }).start();
  const e = await fx.invite("evil", ["evil-model"]);
  // Evil runs a worker that accepts anything, to see what reaches it.
  evil = await new SimWorker({ id: "evil", models: ["id-model"] }).start();
  // Its ACL user may write only its own key: it writes victim's id and its own URL there.
  const forged = JSON.stringify({ ...evil.record(), id: "victim" });
  await e.store.putRaw("evil", forged, 60_000);
  await waitFor(() => fx.router.deps.directory.all().some((w) => w.id === "victim"), { what: "victim routable" });
});

afterAll(async () => {
  await victim?.stop();
  await evil?.stop();
  await fx?.close();
});

async function lease(model: string): Promise<{ id: string; worker: string; fencing_token: number }> {
  const res = await fetch(`${fx.router.url}/v1/leases`, {
    method: "POST",
    headers: { authorization: `Bearer ${fx.apiKey}`, "content-type": "application/json" },
    body: JSON.stringify({ model, duration_s: 30 }),
  });
  expect(res.status).toBe(201);
  return (await res.json()) as { id: string; worker: string; fencing_token: number };
}

async function release(id: string): Promise<void> {
  const res = await fetch(`${fx.router.url}/v1/leases/${id}`, { method: "DELETE", headers: { authorization: `Bearer ${fx.apiKey}` } });
  expect(res.status).toBe(200);
}

describe("worker identity is the registry key", () => {
  it("a record naming another worker's id is refused and logged once; evil gets no secret, prompt or leased request", async () => {
    await waitFor(() => fx.logs.some((l) => l.msg === "worker record refused" && l.worker === "evil" && l.reason === "id_mismatch"), { what: "refusal logged" });
    expect(fx.router.deps.metrics.registryRefusals.get({ reason: "id_mismatch" })).toBe(1);
    const victims = fx.router.deps.directory.all().filter((w) => w.id === "victim");
    expect(victims.map((w) => w.url)).toEqual([victim.url]);
    for (let i = 0; i < 10; i++) expect((await fx.chat("id-model")).status).toBe(200);
    const l = await lease("id-model");
    expect(l.worker).toBe("victim");
    for (let i = 0; i < 5; i++) expect((await fx.chat("id-model", { "x-switchyard-lease": l.id })).status).toBe(200);
    expect(victim.served.get("/v1/chat/completions")).toBe(15);
    expect(evil.lastRequestHeaders).toBeUndefined();
    expect(evil.served.size).toBe(0);
    // Many polls later the refusal is still logged once, not every poll.
    await sleep(300);
    expect(fx.logs.filter((x) => x.msg === "worker record refused" && x.worker === "evil").length).toBe(1);
    expect(fx.router.deps.metrics.registryRefusals.get({ reason: "id_mismatch" })).toBe(1);
    await release(l.id);
  });

  it("a forged fencing token of 2^53−1 sent with victim's stolen call secret is refused; real leases keep working", async () => {
    const before = await lease("id-model");
    expect((await fx.chat("id-model", { "x-switchyard-lease": before.id })).status).toBe(200);
    const highest = victim.fencing.highest;
    expect(highest).toBe(before.fencing_token);
    // The router's signature for victim's real token, as victim saw it.
    const realSignature = String(victim.lastRequestHeaders?.[FENCING_SIGNATURE_HEADER]);
    expect(realSignature).toMatch(/^[A-Za-z0-9_-]{86}$/);
    await release(before.id);

    const stolen = workerCallSecret(SECRET_KEY, "victim");
    expect(stolen).toBe(victimSecret);
    const attack = (headers: Record<string, string>) =>
      fetch(`${victim.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${stolen}`, "content-type": "application/json", "x-switchyard-fencing-token": "9007199254740991", ...headers },
        body: JSON.stringify({ model: "id-model", messages: [{ role: "user", content: "x" }] }),
      });
    // No signature, a made-up one, and a real router signature over another token.
    for (const headers of [{}, { [FENCING_SIGNATURE_HEADER]: "A".repeat(86) }, { [FENCING_SIGNATURE_HEADER]: realSignature }] as Array<Record<string, string>>) {
      const res = await attack(headers);
      expect(res.status).toBe(403);
      expect(((await res.json()) as { error: { code: string } }).error.code).toBe("unsigned_fencing_token");
    }
    expect(victim.fencing.highest).toBe(highest);

    const after = await lease("id-model");
    expect(after.worker).toBe("victim");
    expect(after.fencing_token).toBeGreaterThan(highest);
    for (let i = 0; i < 3; i++) expect((await fx.chat("id-model", { "x-switchyard-lease": after.id })).status).toBe(200);
    expect(victim.fencing.highest).toBe(after.fencing_token);
    expect(victim.fenceLog.filter((f) => f.token === after.fencing_token).every((f) => f.accepted)).toBe(true);
  });

  it("a router signature evil received for its own lease does not move victim's fence", async () => {
    // Evil, now publishing its own record honestly, gets a lease of its own.
    const e = await fx.invite("evil", ["evil-model"]);
    const honest = await new SimWorker({ id: "evil", models: ["evil-model"], registry: e.store, token: e.invite.callSecret, fencingKey }).start();
    try {
      await waitFor(() => fx.router.deps.directory.candidates("evil-model").some((w) => w.id === "evil"), { what: "evil routable" });
      const mine = await lease("evil-model");
      expect(mine.worker).toBe("evil");
      expect((await fx.chat("evil-model", { "x-switchyard-lease": mine.id })).status).toBe(200);
      const signature = String(honest.lastRequestHeaders?.[FENCING_SIGNATURE_HEADER]);
      const highest = victim.fencing.highest;
      // Replayed at victim, above its highest token: signed for "evil", so refused.
      const res = await fetch(`${victim.url}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${victimSecret}`, "content-type": "application/json", "x-switchyard-fencing-token": String(mine.fencing_token), [FENCING_SIGNATURE_HEADER]: signature },
        body: JSON.stringify({ model: "id-model", messages: [{ role: "user", content: "x" }] }),
      });
      expect(mine.fencing_token).toBeGreaterThan(highest);
      expect(res.status).toBe(403);
      expect(victim.fencing.highest).toBe(highest);
    } finally {
      await honest.stop();
    }
  });
});
