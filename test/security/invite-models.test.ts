// Issue 10 item 4: an invite bounds what a worker may advertise. Invited
// worker `evil` advertises paid providers' model names (and models it was not
// invited for) to receive tenants' prompts meant for them. The router routes
// a worker only for models on its invite (an admin-written key the worker
// cannot write), and never for a name that maps to a paid backend unless an
// alias names it as a worker model — in invite mode and in shared-token mode.
import { spawn } from "node:child_process";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { setPrice } from "@switchyard/db";
import { fencingPublicKey, inviteKey, RedisRegistryStore, revokeWorker } from "@switchyard/state";
import { FakeAnthropic } from "../fixtures/fake-anthropic.ts";
import { FakeOpenRouter } from "../fixtures/fake-openrouter.ts";
import { SimWorker } from "#testkit/sim-worker";
import { sleep, waitFor } from "../helpers/env.ts";
import { startTestRouter } from "../helpers/router.ts";
import { PREFIX, SECRET_KEY, startFabric, type Fabric } from "./fabric.ts";

const OR_MODEL = "openai/gpt-4o-mini";
const AN_MODEL = "claude-3-5-sonnet-latest";
const ADVERTISED = ["smol-model", OR_MODEL, AN_MODEL, "gpt4", "meta-llama/llama-3-8b", "uninvited-model"];

let fx: Fabric;
let openrouter: FakeOpenRouter;
let anthropic: FakeAnthropic;
let evil: SimWorker;

beforeAll(async () => {
  openrouter = await new FakeOpenRouter({ apiKey: "sk-or-inv" }).start();
  anthropic = await new FakeAnthropic("sk-ant-inv").start();
  fx = await startFabric({
    "providers.openrouter": { apiKey: "sk-or-inv", baseUrl: openrouter.url },
    "providers.anthropic": { apiKey: "sk-ant-inv", baseUrl: anthropic.url },
    "billing.refreshMs": 100,
    "routing.models": {
      "house-chat": { worker: "smol-model", openrouter: OR_MODEL },
      gpt4: { openrouter: "openai/gpt-4o" },
      // The operator says this vendor/model name is a worker's.
      "meta-llama/llama-3-8b": { worker: "meta-llama/llama-3-8b" },
    },
  });
  for (const model of [OR_MODEL, "openai/gpt-4o"]) await setPrice(fx.db.db, { backend: "openrouter", model, inputMicroPerMtok: 15_000_000n, outputMicroPerMtok: 60_000_000n });
  await setPrice(fx.db.db, { backend: "anthropic", model: AN_MODEL, inputMicroPerMtok: 80_000_000n, outputMicroPerMtok: 400_000_000n });
  await waitFor(() => fx.router.deps.guard.deps.prices.price("anthropic", AN_MODEL), { what: "prices" });
  // Invited for a paid name too: the paid-name rule holds regardless.
  const e = await fx.invite("evil", ["smol-model", "meta-llama/llama-3-8b", OR_MODEL]);
  evil = await new SimWorker({ id: "evil", models: ADVERTISED, registry: e.store, token: e.invite.callSecret }).start();
  await waitFor(() => fx.router.deps.directory.all().some((w) => w.id === "evil"), { what: "evil listed" });
});

afterAll(async () => {
  await evil?.stop();
  await fx?.close();
  await openrouter?.stop();
  await anthropic?.stop();
});

describe("an invite bounds what a worker is routed for", () => {
  it("evil advertising paid and uninvited models never receives those prompts", async () => {
    const served = () => evil.served.get("/v1/chat/completions") ?? 0;
    expect(fx.router.deps.directory.all().find((w) => w.id === "evil")?.models).toEqual(["smol-model", "meta-llama/llama-3-8b"]);
    const orBefore = openrouter.requests.length;
    const anBefore = anthropic.requests.length;
    for (let i = 0; i < 3; i++) {
      expect((await fx.chat(OR_MODEL)).status).toBe(200);
      expect((await fx.chat(AN_MODEL)).status).toBe(200);
      expect((await fx.chat("gpt4")).status).toBe(200);
      expect((await fx.chat("uninvited-model")).status).toBe(404);
    }
    expect(served()).toBe(0);
    expect(openrouter.requests.length - orBefore).toBe(6);
    expect(anthropic.requests.length - anBefore).toBe(3);
    // What it was invited for (and what an alias names as a worker model) it serves.
    for (const model of ["smol-model", "house-chat", "meta-llama/llama-3-8b"]) expect((await fx.chat(model)).status).toBe(200);
    expect(served()).toBe(3);
    const refusals = fx.logs.filter((l) => l.msg === "worker record refused" && l.worker === "evil");
    expect(refusals).toHaveLength(1);
    expect(refusals[0]).toMatchObject({ reason: "model_not_allowed" });
    expect(String(refusals[0]!.detail)).toContain(OR_MODEL);
  });

  it("the worker cannot write its invite, and a worker without one is not routable", async () => {
    const e = await fx.invite("sneaky", ["small-model"]);
    const conn = e.conn;
    await expect(conn.set(inviteKey(PREFIX, "sneaky"), JSON.stringify({ models: [OR_MODEL, "anything"], createdAt: 1 }))).rejects.toThrow(/NOPERM/);
    await expect(conn.del(inviteKey(PREFIX, "sneaky"))).rejects.toThrow(/NOPERM/);
    // A record nobody invited (written with admin rights, say by a leaked admin URL's typo'd prefix).
    const stray = await new SimWorker({ id: "stray", models: ["stray-model"], registry: new RedisRegistryStore(fx.admin, PREFIX) }).start();
    try {
      await waitFor(() => fx.logs.some((l) => l.worker === "stray" && l.reason === "not_invited"), { what: "not_invited logged" });
      expect(fx.router.deps.directory.all().some((w) => w.id === "stray")).toBe(false);
      expect((await fx.chat("stray-model")).status).toBe(404);
      expect(stray.served.size).toBe(0);
    } finally {
      await stray.stop();
    }
  });

  it("'switchyard workers invite --model' records the invite and prints the routers' fencing key; revoke removes both", async () => {
    const root = path.resolve(import.meta.dirname, "../..");
    const env: Record<string, string | undefined> = { ...process.env, REDIS_URL: fx.redis.url, DATABASE_URL: fx.db.url, SWITCHYARD_WORKER_SECRET_KEY: SECRET_KEY, SWITCHYARD_REDIS__KEY_PREFIX: undefined, SWITCHYARD_CONFIG: undefined };
    const cli = (args: string[]) =>
      new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const child = spawn(process.execPath, [path.join(root, "apps/cli/bin/switchyard.mjs"), ...args], { cwd: root, env, stdio: ["ignore", "pipe", "pipe"] });
        let out = "";
        let err = "";
        child.stdout.on("data", (d: Buffer) => (out += d.toString()));
        child.stderr.on("data", (d: Buffer) => (err += d.toString()));
        child.once("exit", (code) => resolve({ code, out, err }));
      });
    const r = await cli(["workers", "invite", "cli-box", "--model", "m-a", "--model", "m-b", "--advertise", "http://10.0.0.8:9100"]);
    expect(r.code, r.err).toBe(0);
    expect(r.out).toContain(`--fencing-key ${fencingPublicKey(SECRET_KEY)}`);
    expect(r.out).toContain("--model 'm-a' --model 'm-b'");
    expect(JSON.parse((await fx.admin.get(inviteKey(PREFIX, "cli-box")))!)).toMatchObject({ models: ["m-a", "m-b"] });
    // The worker refuses a fencing key that is not one (rather than run unfenced).
    const bad = await cli(["worker", "--redis", fx.redis.url, "--token", "t0123456789", "--id", "cli-box", "--fencing-key", "not-a-key"]);
    expect(bad.code).toBe(2);
    expect(bad.err).toMatch(/--fencing-key.*32 bytes/);
    const gone = await cli(["workers", "revoke", "cli-box"]);
    expect(gone.code, gone.err).toBe(0);
    expect(await fx.admin.exists(inviteKey(PREFIX, "cli-box"))).toBe(0);
  }, 60_000);

  it("revoking removes the invite: the worker leaves rotation at the next poll", async () => {
    await evil.heartbeat();
    expect(await revokeWorker(fx.admin, "evil", { prefix: PREFIX })).toBe(true);
    expect(await fx.admin.exists(inviteKey(PREFIX, "evil"))).toBe(0);
    // At the next poll — not when its last heartbeat (TTL 3 s) expires.
    await waitFor(() => !fx.router.deps.directory.all().some((w) => w.id === "evil"), { what: "evil gone", timeoutMs: 1000 });
    await sleep(100);
    const before = evil.served.get("/v1/chat/completions") ?? 0;
    expect((await fx.chat("smol-model")).status).not.toBe(200);
    expect(evil.served.get("/v1/chat/completions") ?? 0).toBe(before);
  });
});

describe("paid model names without invites (shared-token mode)", () => {
  it("a worker advertising a paid backend's name is not routed for it", async () => {
    const rt = await startTestRouter();
    const w = await new SimWorker({ id: "shared-evil", models: ["ok-model", OR_MODEL, AN_MODEL], registry: rt.registry }).start();
    try {
      await waitFor(() => rt.router.deps.directory.candidates("ok-model").length === 1, { what: "worker listed" });
      const chat = (model: string) =>
        fetch(`${rt.router.url}/v1/chat/completions`, {
          method: "POST",
          headers: { authorization: `Bearer ${rt.key}`, "content-type": "application/json" },
          body: JSON.stringify({ model, messages: [{ role: "user", content: "hi" }] }),
        });
      expect((await chat(OR_MODEL)).status).toBe(404);
      expect((await chat(AN_MODEL)).status).toBe(404);
      expect(w.served.size).toBe(0);
      expect((await chat("ok-model")).status).toBe(200);
      expect(rt.router.deps.directory.all().find((x) => x.id === "shared-evil")?.models).toEqual(["ok-model"]);
    } finally {
      await w.stop();
      await rt.close();
    }
  });
});
